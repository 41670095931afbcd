"""The http processor's request bodies: cut by log count and by bytes, nothing lost, nothing
reordered, and the same cuts every time for the same batch."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd import Batch
from loghubd.processors.http import bodies
from loghubd.testing import make_batch


def _batch(sizes: list[int]) -> Batch:
    # A fixed time: two batches built across a second boundary must still be equal.
    return make_batch(
        [{"__time__": "1700000000", "id": str(i), "msg": "x" * n} for i, n in enumerate(sizes)]
    )


LINE = len(_batch([10]).jsonl())  # one log of the table below, newline included


@pytest.mark.parametrize(
    ("sizes", "size", "max_bytes", "counts"),
    [
        ([10] * 5, 2, 0, [2, 2, 1]),  # by count only
        ([10] * 5, 10, 0, [5]),
        ([10] * 5, 10, 3 * LINE - 1, [2, 2, 1]),  # 2 lines fit, not 3
        ([10] * 5, 10, 3 * LINE, [3, 2]),  # exactly 3 lines: the limit is inclusive
        ([10] * 5, 2, 100 * LINE, [2, 2, 1]),  # the count cuts first
        ([10, 900, 10], 10, 2 * LINE, [1, 1, 1]),  # a line past the limit goes alone
        ([900, 10, 10], 10, 2 * LINE, [1, 2]),
    ],
)
def test_cuts(sizes: list[int], size: int, max_bytes: int, counts: list[int]) -> None:
    batch = _batch(sizes)
    parts = bodies(batch, size, False, max_bytes)
    assert [n for _, n in parts] == counts
    assert b"".join(body for body, _ in parts) == batch.jsonl()


@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=60),
    size=st.integers(1, 20),
    max_bytes=st.sampled_from([0, 1024, 2048, 1100, 4096]),
    compress=st.booleans(),
)
def test_every_log_once_in_order_within_both_limits(
    sizes: list[int], size: int, max_bytes: int, compress: bool
) -> None:
    batch = _batch(sizes)
    parts = bodies(batch, size, compress, max_bytes)
    texts = [gzip.decompress(b) if compress else b for b, _ in parts]
    assert b"".join(texts) == batch.jsonl()
    for text, n in zip(texts, (n for _, n in parts), strict=True):
        assert text.count(b"\n") == n and 1 <= n <= size
        assert not max_bytes or len(text) <= max_bytes or n == 1
    again = bodies(batch, size, False, max_bytes)  # a retried batch is cut the same way
    assert again == list(zip(texts, (n for _, n in parts), strict=True))
