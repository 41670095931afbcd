"""PutLogs routes by `Storage.write_routes`, a cache of each logstore's readwrite shards by
key range: after any sequence of splits, merges, deletions and re-creations it equals what
the shard rows say, and every hash key has exactly one route."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loghubd.server.storage import MAX_KEY_HEX, Route, Storage, StorageError

KEYS = st.integers(0, 2**128 - 1)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("split"), st.integers(0, 30), KEYS),
        st.tuples(st.just("merge"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("recreate"), st.integers(1, 4), st.just(0)),
        st.tuples(st.just("put"), st.integers(0, 30), st.just(0)),
    ),
    max_size=25,
)


def from_rows(storage: Storage, ls: int) -> tuple[Route, ...]:
    return tuple(
        Route(s.shard_id, int(s.begin_key, 16), int(s.end_key, 16), s.end_key == MAX_KEY_HEX)
        for s in storage.list_shards(ls)
        if not s.readonly
    )


def logstore_id(storage: Storage) -> int:
    found = storage.get_logstore("p", "ls")
    assert found is not None
    return found.id


@settings(max_examples=60, deadline=None)
@given(shards=st.integers(1, 4), ops=OPS, probes=st.lists(KEYS, min_size=1, max_size=20))
def test_routes_follow_every_change_of_the_shards(
    tmp_path_factory: pytest.TempPathFactory,
    shards: int,
    ops: list[tuple[str, int, int]],
    probes: list[int],
) -> None:
    path = tmp_path_factory.mktemp("routes") / "db.sqlite"
    storage = Storage(path)
    try:
        storage.create_project("p", "", 0)
        storage.create_logstore("p", "ls", 1, shards, 0)
        for op, n, key in ops:
            ls = logstore_id(storage)
            rows = [s for s in storage.list_shards(ls) if not s.readonly]
            shard = rows[n % len(rows)]
            if op == "split":
                begin, end = int(shard.begin_key, 16), int(shard.end_key, 16)
                mid = f"{begin + key % max(end - begin, 1):032x}"
                with contextlib.suppress(StorageError):  # the shard's begin: refused
                    storage.split_shard(ls, shard.shard_id, mid, 0)
            elif op == "merge":
                with contextlib.suppress(StorageError):  # the last shard has no neighbour
                    storage.merge_shard(ls, shard.shard_id, 0)
            elif op == "recreate":
                storage.delete_logstore(ls)
                storage.create_logstore("p", "ls", 1, n, 0)
            else:
                storage.write_routes(ls)  # a put: fills the cache
                storage.append(ls, shard.shard_id, b"x", 1, 0.0)
            ls = logstore_id(storage)
            assert storage.write_routes(ls) == from_rows(storage, ls), (op, n, key)
        routes = storage.write_routes(logstore_id(storage))
        for key in [*probes, 0, 2**128 - 1]:
            assert sum(r.contains(key) for r in routes) == 1, (key, routes)
    finally:
        storage.close()
