"""The official `aliyun-log-python-sdk` (0.9.52), unmodified, against a real `loghubd serve`.

Proves wire compatibility end to end: project/logstore management, PutLogs (load-balanced and
hash-routed, lz4), shard split while writing, PullLogs over every shard, the SDK's own
`ConsumerWorker` (two workers sharing a group, a split while they run, checkpoints, resume after
a restart of the consumers), and v1/v4 request signatures checked by the server.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aliyun.log import LogClient, LogException, LogItem, PutLogsRequest
from aliyun.log.consumer import (
    ConsumerProcessorBase,
    ConsumerWorker,
    CursorPosition,
    LogHubConfig,
)

from loghubd.testing.process import ServerProcess
from tests.integration.sls_http import wait_until

PROJECT = "sdkproj"
LOGSTORE = "events"
GROUP = "readers"
AK, SECRET = "LTAItestkey0001", "s3cr3t-for-tests"

TOTAL_LOGS = 100_000
BATCH = 2500  # logs per PutLogs request (one LogGroup each)


# -- writing ----------------------------------------------------------------------------------


@dataclass
class Written:
    """What the test wrote: id -> hash key (None: load-balanced) and whether after a split."""

    key: dict[str, str | None] = field(default_factory=dict)
    after_split: dict[str, int] = field(default_factory=dict)  # id -> split generation
    generation: int = 0
    next_id: int = 0

    def ids(self) -> set[str]:
        return set(self.key)


def put_batch(
    client: LogClient, written: Written, n: int, key: str | None, tag: str = "old"
) -> list[str]:
    ids = [f"{tag}-{written.next_id + i:07d}" for i in range(n)]
    written.next_id += n
    now = int(time.time())
    items = [LogItem(timestamp=now, contents=[("id", i), ("tag", tag)]) for i in ids]
    req = PutLogsRequest(
        PROJECT, LOGSTORE, topic="sdk", source="loghubd-test", logitems=items, hashKey=key
    )
    client.put_logs(req)
    for i in ids:
        written.key[i] = key
        written.after_split[i] = written.generation
    return ids


def key_starting(rng: random.Random, first_hex: str) -> str:
    return first_hex + "".join(rng.choice("0123456789abcdef") for _ in range(31))


def shard_map(client: LogClient) -> dict[int, dict[str, Any]]:
    return {s["shardID"]: s for s in client.list_shards(PROJECT, LOGSTORE).get_shards_info()}


def key_in_shard(key: str, shard: dict[str, Any]) -> bool:
    k = int(key, 16)
    begin, end = int(shard["inclusiveBeginKey"], 16), int(shard["exclusiveEndKey"], 16)
    return begin <= k < end or (shard["exclusiveEndKey"] == "f" * 32 and k == end)


# -- reading ----------------------------------------------------------------------------------


def sdk_read_shard(client: LogClient, shard: int, page: int = 3) -> list[str]:
    """Every id of a shard via GetCursor + PullLogs paging (small pages on purpose)."""
    cursor = client.get_cursor(PROJECT, LOGSTORE, shard, "begin").get_cursor()
    end = client.get_cursor(PROJECT, LOGSTORE, shard, "end").get_cursor()
    ids: list[str] = []
    while cursor != end:
        resp = client.pull_logs(PROJECT, LOGSTORE, shard, cursor, count=page)
        groups = resp.get_loggroup_list().LogGroups
        assert 0 < len(groups) <= page, (shard, cursor, len(groups))
        assert resp.get_loggroup_count() == len(groups)
        for g in groups:
            ids.extend(c.Value for log in g.Logs for c in log.Contents if c.Key == "id")
        assert resp.get_next_cursor() != cursor
        cursor = resp.get_next_cursor()
    # at the end: 200, nothing, same cursor
    resp = client.pull_logs(PROJECT, LOGSTORE, shard, cursor, count=page)
    assert resp.get_loggroup_count() == 0
    assert resp.get_next_cursor() == cursor
    return ids


# -- consuming --------------------------------------------------------------------------------


class Recorder:
    """Thread-safe log of every batch any processor saw: (consumer, shard, ids)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[tuple[str, int, list[str]]] = []
        self.seen: set[str] = set()

    def add(self, consumer: str, shard: int, ids: list[str]) -> None:
        with self.lock:
            self.batches.append((consumer, shard, ids))
            self.seen.update(ids)

    def has_all(self, wanted: set[str]) -> bool:
        with self.lock:
            return wanted <= self.seen

    def snapshot(self) -> list[tuple[str, int, list[str]]]:
        with self.lock:
            return list(self.batches)


class IdProcessor(ConsumerProcessorBase):  # type: ignore[misc]
    def __init__(self, recorder: Recorder, consumer: str) -> None:
        super().__init__()
        self.recorder = recorder
        self.consumer = consumer

    def process(self, log_groups: Any, check_point_tracker: Any) -> None:
        ids = [
            c.Value
            for g in log_groups.LogGroups
            for log in g.Logs
            for c in log.Contents
            if c.Key == "id"
        ]
        self.recorder.add(self.consumer, self.shard_id, ids)
        self.save_checkpoint(check_point_tracker)


def make_worker(endpoint: str, name: str, recorder: Recorder) -> ConsumerWorker:
    option = LogHubConfig(
        endpoint,
        AK,
        SECRET,
        PROJECT,
        LOGSTORE,
        GROUP,
        name,
        cursor_position=CursorPosition.BEGIN_CURSOR,
        heartbeat_interval=1,
        data_fetch_interval=0.2,
        max_fetch_log_group_size=4,  # several batches (and checkpoints) per shard
    )
    return ConsumerWorker(IdProcessor, option, args=(recorder, name))


def stop_workers(*workers: ConsumerWorker) -> None:
    for w in workers:
        w.shutdown()
    for w in workers:
        w.join(timeout=30)
        assert not w.is_alive(), f"worker {w.option.consumer_name} did not stop"


def checkpoints(client: LogClient) -> dict[int, str]:
    resp = client.get_check_point(PROJECT, LOGSTORE, GROUP)
    return {int(c["shard"]): c["checkpoint"] for c in resp.get_consumer_group_check_points()}


# -- the end-to-end test ----------------------------------------------------------------------


def test_official_sdk_writes_reads_splits_and_consumes(
    loghubd_server: ServerProcess,
    sdk_via_proxy: Callable[[ServerProcess], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="aliyun")
    endpoint = sdk_via_proxy(loghubd_server)
    client = LogClient(endpoint, AK, SECRET, source="loghubd-test")
    rng = random.Random(20240601)

    client.create_project(PROJECT, "sdk compatibility")
    client.create_logstore(PROJECT, LOGSTORE, ttl=7, shard_count=4)
    assert client.get_logstore(PROJECT, LOGSTORE).get_shard_count() == 4
    assert sorted(shard_map(client)) == [0, 1, 2, 3]

    # 1. 100,000 logs: alternate load-balanced and hash-routed requests; split shard 1 halfway.
    written = Written()
    batches = TOTAL_LOGS // BATCH
    pre_digits = iter("048c159df6" * 4)
    post_digits = iter("465709cf2b" * 4)  # 4,5 -> left child [4.., 6..); 6,7 -> right child
    parent_end_at_split = ""
    for b in range(batches):
        if b == batches // 2:
            parent_end_at_split = client.get_cursor(PROJECT, LOGSTORE, 1, "end").get_cursor()
            resp = client.split_shard(PROJECT, LOGSTORE, 1, "6" + "0" * 31)
            split = {s["shardID"]: s for s in resp.get_shards_info()}
            assert sorted(split) == [1, 4, 5]
            assert split[1]["status"] == "readonly"
            assert split[4]["status"] == split[5]["status"] == "readwrite"
            assert split[4]["exclusiveEndKey"] == split[5]["inclusiveBeginKey"] == "6" + "0" * 31
            written.generation = 1
        if b % 2 == 0:
            key = None
        else:
            digit = next(pre_digits) if written.generation == 0 else next(post_digits)
            key = key_starting(rng, digit)
        put_batch(client, written, BATCH, key)
    assert len(written.key) == TOTAL_LOGS

    shards = shard_map(client)
    assert sorted(shards) == [0, 1, 2, 3, 4, 5]
    assert shards[1]["status"] == "readonly"
    # the sealed parent received nothing after the split
    assert client.get_cursor(PROJECT, LOGSTORE, 1, "end").get_cursor() == parent_end_at_split

    # 2. PullLogs over every shard returns exactly what was written, once, where it belongs.
    read: dict[str, int] = {}
    for sid in shards:
        for ident in sdk_read_shard(client, sid):
            assert ident not in read, f"{ident} read twice (shards {read[ident]} and {sid})"
            read[ident] = sid
    assert set(read) == written.ids()
    for ident, sid in read.items():
        key = written.key[ident]
        if key is not None:
            assert key_in_shard(key, shards[sid]), (ident, key, sid)
        if written.after_split[ident]:
            assert sid != 1, f"{ident} was written after the split but landed in the parent"
    per_shard = Counter(read.values())
    assert per_shard[4] > 0 and per_shard[5] > 0, per_shard  # writes continued to the children
    assert per_shard[1] > 0, per_shard

    # 3. Two ConsumerWorkers in one group consume everything; a second split happens while
    #    they run, and the writes that follow it must reach them too.
    recorder = Recorder()
    w1 = make_worker(endpoint, "w1", recorder)
    w2 = make_worker(endpoint, "w2", recorder)
    w1.start()
    w2.start()
    try:
        wait_until(lambda: recorder.seen, 30, "the consumers to receive their first logs")
        resp = client.split_shard(PROJECT, LOGSTORE, 2, "a" + "0" * 31)
        assert sorted(s["shardID"] for s in resp.get_shards_info()) == [2, 6, 7]
        written.generation = 2
        # 8,9 -> child 6 [8.., a..); a,b -> child 7 [a.., c..); "" -> load-balanced
        for digit in ("8", "a", "", "9", "b", "", "8", "a", "", "b"):
            put_batch(client, written, 500, key_starting(rng, digit) if digit else None)
        wanted = written.ids()
        wait_until(lambda: recorder.has_all(wanted), 60, "every id to be consumed")
        assert w1.is_alive() and w2.is_alive(), "a ConsumerWorker thread died"
        assert w1.heart_beat.is_alive() and w2.heart_beat.is_alive()

        # Checkpoints are stored for every shard that has data.
        with_data = {
            sid
            for sid, n in Counter(sid for _c, sid, ids in recorder.snapshot() for _ in ids).items()
            if n
        }
        assert with_data == {0, 1, 2, 3, 4, 5, 6, 7}
        wait_until(
            lambda: all(checkpoints(client).get(s) for s in with_data),
            20,
            "non-empty checkpoints for every shard with data",
        )
    finally:
        stop_workers(w1, w2)

    phase1 = recorder.snapshot()
    occurrences = Counter(i for _c, _s, ids in phase1 for i in ids)
    dups = {i for i, n in occurrences.items() if n > 1}
    # A duplicate is tolerated only across a handover: between two deliveries of an id, the
    # shard's batches must have gone to another consumer at least once.
    where: dict[str, list[int]] = defaultdict(list)
    for index, (_c, _s, ids) in enumerate(phase1):
        for i in ids:
            if i in dups:
                where[i].append(index)
    not_handover = []
    for i, indices in where.items():
        for a, b in itertools.pairwise(indices):
            shard, owner = phase1[a][1], phase1[a][0]
            if not any(c != owner for c, s, _ in phase1[a : b + 1] if s == shard):
                not_handover.append(i)
    assert not not_handover, f"{len(not_handover)} ids delivered twice without a handover"
    print(
        f"\nconsumer phase: {len(occurrences)} ids, {len(dups)} duplicated across handovers, "
        f"batches by consumer: {Counter(c for c, _s, _i in phase1)}"
    )
    assert set(occurrences) == written.ids()

    # After a graceful stop the workers flushed: each checkpoint is its shard's end.
    cps = checkpoints(client)
    for sid in with_data:
        end = client.get_cursor(PROJECT, LOGSTORE, sid, "end").get_cursor()
        assert cps[sid] == end, f"shard {sid}: checkpoint {cps[sid]} is not the end {end}"

    # 4. More logs, then a fresh worker in the same group resumes from the checkpoints.
    last_batch: dict[int, set[str]] = {}
    for _c, sid, ids in phase1:
        last_batch[sid] = set(ids)
    old_ids = written.ids()
    new_ids: set[str] = set()
    for i in range(12):
        key = None if i % 2 == 0 else key_starting(rng, "0123456789abcdef"[i])
        new_ids.update(put_batch(client, written, 400, key, tag="new"))

    resumed = Recorder()
    w3 = make_worker(endpoint, "w3", resumed)
    w3.start()
    try:
        wait_until(lambda: resumed.has_all(new_ids), 60, "the fresh worker to get the new logs")
    finally:
        stop_workers(w3)
    again = Counter(i for _c, _s, ids in resumed.snapshot() for i in ids)
    assert set(again) - old_ids == new_ids
    assert all(n == 1 for i, n in again.items() if i in new_ids), "new logs delivered twice"
    redelivered: dict[int, set[str]] = defaultdict(set)
    for _c, sid, ids in resumed.snapshot():
        redelivered[sid].update(i for i in ids if i in old_ids)
    for sid, ids in redelivered.items():
        assert ids <= last_batch.get(sid, set()), (
            f"shard {sid}: {len(ids)} checkpointed logs delivered again after resume"
        )
    print(
        f"resume: {len(new_ids)} new ids, "
        f"{sum(len(v) for v in redelivered.values())} old ids redelivered"
    )

    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage()[:300] for r in errors[:5]]


# -- signatures -------------------------------------------------------------------------------


@pytest.fixture
def keyed_server(
    loghubd_server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> ServerProcess:
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[keys]]\nid = "{AK}"\nsecret = "{SECRET}"\n\n'
        '[[keys]]\nid = "LTAIotherkey0002"\nsecret = "another-secret"\n'
    )
    return loghubd_server_factory("keyed", extra_args=["--access-keys", str(keys)])


AUTH_VERSIONS = [
    pytest.param({"auth_version": "v1"}, id="v1"),
    pytest.param({"auth_version": "v4", "region": "cn-hangzhou"}, id="v4"),
]


@pytest.mark.parametrize("auth", AUTH_VERSIONS)
def test_signed_requests_with_the_right_key_work(
    keyed_server: ServerProcess,
    sdk_via_proxy: Callable[[ServerProcess], str],
    auth: dict[str, str],
) -> None:
    endpoint = sdk_via_proxy(keyed_server)
    client = LogClient(endpoint, AK, SECRET, source="loghubd-test", **auth)
    project = "signed" + auth["auth_version"]
    client.create_project(project, "signed requests")
    assert client.get_project(project).get_projectname() == project
    client.create_logstore(project, "ls", ttl=3, shard_count=2)
    assert client.list_logstore(project, "ls").get_logstores() == ["ls"]
    items = [LogItem(contents=[("id", str(i)), ("text", "héllo wörld ∑")]) for i in range(50)]
    client.put_logs(PutLogsRequest(project, "ls", topic="t", logitems=items))
    client.put_logs(PutLogsRequest(project, "ls", topic="t", logitems=items, hashKey="f" * 32))
    got = []
    for sid in (0, 1):
        cursor = client.get_cursor(project, "ls", sid, "begin").get_cursor()  # '=' in values
        resp = client.pull_logs(project, "ls", sid, cursor, count=10)
        got.extend(log for g in resp.get_loggroup_list().LogGroups for log in g.Logs)
        client.get_cursor_time(project, "ls", sid, cursor)
    assert len(got) == 100
    # consumer-group calls carry query flags (forceSuccess=True) and JSON bodies
    client.create_consumer_group(project, "ls", "cg", 30)
    held = client.heart_beat(project, "ls", "cg", "c1", []).get_shards()
    assert held  # one consumer gets every shard
    cursor = client.get_cursor(project, "ls", held[0], "end").get_cursor()
    client.update_check_point(project, "ls", "cg", held[0], cursor, consumer="c1")
    cps = client.get_check_point(project, "ls", "cg", held[0]).get_consumer_group_check_points()
    assert cps[0]["checkpoint"] == cursor


@pytest.mark.parametrize("auth", AUTH_VERSIONS)
@pytest.mark.parametrize(
    ("ak", "secret", "code"),
    [
        pytest.param(AK, "not-the-secret", "SignatureNotMatch", id="wrong-secret"),
        pytest.param("LTAInosuchkey999", SECRET, "InvalidAccessKeyId", id="unknown-key"),
    ],
)
def test_signed_requests_with_a_wrong_key_are_refused(
    keyed_server: ServerProcess,
    sdk_via_proxy: Callable[[ServerProcess], str],
    auth: dict[str, str],
    ak: str,
    secret: str,
    code: str,
) -> None:
    endpoint = sdk_via_proxy(keyed_server)
    good = LogClient(endpoint, AK, SECRET, source="loghubd-test", **auth)
    good.create_project("refused", "")
    good.create_logstore("refused", "ls", shard_count=1)
    bad = LogClient(endpoint, ak, secret, source="loghubd-test", **auth)
    calls: list[Callable[[], object]] = [
        lambda: bad.create_project("other", ""),
        lambda: bad.list_shards("refused", "ls"),
        lambda: bad.put_logs(
            PutLogsRequest("refused", "ls", logitems=[LogItem(contents=[("id", "x")])])
        ),
        lambda: bad.get_cursor("refused", "ls", 0, "begin"),
    ]
    for call in calls:
        with pytest.raises(LogException) as info:
            call()
        assert info.value.get_error_code() == code
        assert info.value.resp_status == 401
        assert info.value.get_request_id()
    # nothing the refused client sent was stored
    cursor = good.get_cursor("refused", "ls", 0, "begin").get_cursor()
    assert good.pull_logs("refused", "ls", 0, cursor).get_loggroup_count() == 0
    with pytest.raises(LogException) as info:
        good.get_project("other")
    assert info.value.get_error_code() == "ProjectNotExist"


# -- an ordered group across a split of a shard already read to its end -------------------------


class CommittingProcessor(ConsumerProcessorBase):  # type: ignore[misc]
    """Records ids and persists the checkpoint after every batch."""

    def __init__(self, recorder: Recorder, consumer: str) -> None:
        super().__init__()
        self.recorder, self.consumer = recorder, consumer

    def process(self, log_groups: Any, check_point_tracker: Any) -> None:
        ids = [c.Value for g in log_groups.LogGroups for log in g.Logs for c in log.Contents]
        self.recorder.add(self.consumer, self.shard_id, ids)
        check_point_tracker.save_check_point(True)


def test_an_ordered_group_goes_on_after_a_split_of_a_shard_it_had_read_to_the_end(
    loghubd_server: ServerProcess, sdk_via_proxy: Callable[[ServerProcess], str]
) -> None:
    """The official consumer commits a checkpoint only when it changes. A shard it had read
    to the end and committed, then split, has that end as its checkpoint already: nobody
    commits it again, so the server itself must see the shard is drained, or the children of
    an ordered group wait for good (found by the serve + SDK audit)."""
    endpoint = sdk_via_proxy(loghubd_server)
    client = LogClient(endpoint, AK, SECRET)
    project, logstore, group = "sdkorder", "ordered", "in-order"
    client.create_project(project, "ordered consumption across a split")
    client.create_logstore(project, logstore, ttl=7, shard_count=1)

    def put(first: int) -> set[str]:
        items = []
        for i in range(first, first + 100):
            item = LogItem(timestamp=int(time.time()))
            item.push_back("id", str(i))
            items.append(item)
        client.put_logs(PutLogsRequest(project, logstore, "", "", items))
        return {str(i) for i in range(first, first + 100)}

    def worker(name: str, recorder: Recorder) -> ConsumerWorker:
        option = LogHubConfig(
            endpoint, AK, SECRET, project, logstore, group, name,
            cursor_position=CursorPosition.BEGIN_CURSOR, heartbeat_interval=1,
            data_fetch_interval=0.2, in_order=True,
        )  # fmt: skip
        return ConsumerWorker(CommittingProcessor, option, args=(recorder, name))

    def stored() -> str:
        resp = client.get_check_point(project, logstore, group, 0)
        return str(resp.get_consumer_group_check_points()[0]["checkpoint"])

    first = put(0)
    recorder = Recorder()
    w1 = worker("first", recorder)
    w1.start()
    try:
        end = client.get_cursor(project, logstore, 0, "end").get_cursor()
        wait_until(lambda: stored() == end, 60, "the end of shard 0 to be committed")
        assert recorder.has_all(first)
    finally:
        stop_workers(w1)
    client.split_shard(project, logstore, 0, "8" + "0" * 31)
    second = put(100)

    later = Recorder()
    w2 = worker("second", later)
    w2.start()
    try:
        wait_until(lambda: later.has_all(second), 60, "the split's children to be consumed")
    finally:
        stop_workers(w2)
    assert not later.seen & first, "logs before the committed end were delivered again"
