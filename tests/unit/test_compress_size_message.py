"""`compress.decompress`'s message when a body decodes to another size than
`x-log-bodyrawsize` says: it names both numbers (it used to say "more than bytes")."""

from __future__ import annotations

import pytest

from loghubd.protocol import compress

CASES = [
    # codec, data, declared raw size, message
    (compress.NONE, b"hello", 3, "body decodes to more than 3 bytes, x-log-bodyrawsize says 3"),
    (compress.NONE, b"he", 3, "body decodes to 2 bytes, x-log-bodyrawsize says 3"),
    (
        compress.DEFLATE,
        compress.compress(compress.DEFLATE, b"x" * 100),
        10,
        "body decodes to more than 10 bytes, x-log-bodyrawsize says 10",
    ),
    (
        compress.DEFLATE,
        compress.compress(compress.DEFLATE, b"x" * 100),
        101,
        "body decodes to 100 bytes, x-log-bodyrawsize says 101",
    ),
    (
        compress.ZSTD,
        compress.compress(compress.ZSTD, b"x" * 100),
        50,
        "body decodes to more than 50 bytes, x-log-bodyrawsize says 50",
    ),
]


@pytest.mark.parametrize(("codec", "data", "raw_size", "message"), CASES)
def test_size_mismatch_message(codec: str, data: bytes, raw_size: int, message: str) -> None:
    with pytest.raises(compress.CompressionError) as refused:
        compress.decompress(codec, data, raw_size)
    assert str(refused.value) == message
