"""loghubd._fastlz4, the C decoder of LZ4 bodies behind compress.decompress(): for any body and
any declared raw size, compress.decompress() returns the same bytes or raises CompressionError
with the same message whether it runs the C path or the python-lz4 path. These tests call the
extension directly, whatever LOGHUBD_NO_C says."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import lz4.block
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loghubd.protocol import compress
from tests.unit.fresh_python import fresh_python

fastlz4: Any = pytest.importorskip("loghubd._fastlz4", reason="built without a C compiler")
assert fastlz4.bind(lz4.block._block.__file__), "the lz4 wheel does not export its decoder"

Decoder = Callable[[bytes, int], bytes]


def outcome(
    data: bytes, raw_size: int, decoder: Decoder, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, Any]:
    """What compress.decompress() returns with `decoder` as its LZ4 path, or its error text."""
    monkeypatch.setattr(compress, "_lz4_decompress", decoder)
    try:
        return ("ok", compress.decompress(compress.LZ4, data, raw_size))
    except compress.CompressionError as e:
        return ("raised", str(e))


def same(data: bytes, raw_size: int, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    """The common outcome of both paths (asserted equal)."""
    c = outcome(data, raw_size, fastlz4.decompress, monkeypatch)
    python = outcome(data, raw_size, compress._python_lz4, monkeypatch)
    assert c == python
    return c


def block(data: bytes) -> bytes:
    """An SLS LZ4 body: a raw block, as compress.compress() makes it."""
    return compress.compress(compress.LZ4, data)


# -- table-driven ---------------------------------------------------------------------------

_TEXT = b"2026-11-25T23:59:59Z level=info msg=pulled shard=3 cursor=MTcwMDAwMDAwMDAwMDAwMA==\n"

CASES: list[tuple[str, bytes, int, tuple[str, Any]]] = [
    ("empty body, no size", b"", 0, ("ok", b"")),
    ("garbage body, no size", b"\xff\xff", 0, ("ok", b"")),  # raw_size 0 never decodes
    ("text", block(_TEXT * 3), len(_TEXT) * 3, ("ok", _TEXT * 3)),
    ("one byte", block(b"x"), 1, ("ok", b"x")),
    (
        "empty body, some size",
        b"",
        5,
        (
            "raised",
            "lz4 body does not decode: Decompression failed: corrupt input or insufficient "
            "space in destination buffer. Error code: 1",  # the offset of the error
        ),
    ),
    (
        "an empty block for 5 bytes",
        b"\x00",
        5,
        ("raised", "body decodes to 0 bytes, x-log-bodyrawsize says 5"),
    ),
    (
        "declared one byte short",
        block(_TEXT),
        len(_TEXT) - 1,
        (
            "raised",
            "lz4 body does not decode: Decompression failed: corrupt input or insufficient "
            "space in destination buffer. Error code: ",  # an offset: lz4 version dependent
        ),
    ),
    (
        "declared one byte long",
        block(_TEXT),
        len(_TEXT) + 1,
        ("raised", f"body decodes to {len(_TEXT)} bytes, x-log-bodyrawsize says {len(_TEXT) + 1}"),
    ),
    (
        "size beyond LZ4's int",
        block(_TEXT),
        2**31,
        ("raised", "lz4 body does not decode: signed integer is greater than maximum"),
    ),
    ("negative size", block(_TEXT), -1, ("raised", "negative raw size")),
]


@pytest.mark.parametrize(
    ("data", "raw_size", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_table(
    data: bytes, raw_size: int, expected: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, result = same(data, raw_size, monkeypatch)
    assert kind == expected[0]
    assert result.startswith(expected[1]) if kind == "raised" else result == expected[1]


def test_bomb_is_refused_at_the_declared_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 MiB of zeros in a ~32 KiB body that says it is 1 MiB: refused, by both paths."""
    kind, message = same(block(bytes(8 << 20)), 1 << 20, monkeypatch)
    assert kind == "raised" and message.startswith("lz4 body does not decode: Decompression failed")


def test_large_blocks_decode_with_the_gil_released() -> None:
    """Sizes at the GIL hand-over threshold (64 KiB) decode alike on both sides of it."""
    for size in (65535, 65536, 65537, 3 << 20):
        data = (_TEXT * (size // len(_TEXT) + 1))[:size]
        assert fastlz4.decompress(block(data), size) == data


def test_decompress_accepts_any_buffer() -> None:
    data = _TEXT * 10
    body = block(data)
    for wrapped in (bytearray(body), memoryview(body)):
        assert fastlz4.decompress(wrapped, len(data)) == data


# -- hypothesis: both paths agree on every body ---------------------------------------------

_sizes = st.one_of(
    st.integers(0, 40),  # LZ4's short-input limits (MINMATCH 4, LASTLITERALS 5, MFLIMIT 12)
    st.integers(65536 - 20, 65536 + 20),  # the 64 KiB window and the GIL threshold
    st.integers(0, 200_000),
)


@st.composite
def payloads(draw: st.DrawFn) -> bytes:
    """Compressible (a few distinct chunks, repeated) or not (random bytes), of varied sizes,
    made from a drawn seed (shown in a failure's example) as they are too large to draw."""
    size = draw(_sizes)
    rng = random.Random(draw(st.integers(0, 2**32)))
    if draw(st.booleans()):
        return rng.randbytes(size)
    chunks = [rng.randbytes(rng.randint(1, 24)) for _ in range(rng.randint(1, 4))]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(chunks)
    return bytes(out[:size])


_fuzz = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])


@_fuzz
@given(data=payloads(), delta=st.sampled_from([0, 0, 0, -1, 1, -7, 7]))
def test_valid_blocks_agree(data: bytes, delta: int) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        result = same(block(data), max(len(data) + delta, 0), monkeypatch)
    if delta == 0:
        assert result == ("ok", data)


@_fuzz
@given(data=payloads(), cut=st.integers(0, 1 << 20), delta=st.integers(-3, 3))
def test_truncated_blocks_agree(data: bytes, cut: int, delta: int) -> None:
    body = block(data)
    with pytest.MonkeyPatch.context() as monkeypatch:
        same(body[: cut % (len(body) + 1)], max(len(data) + delta, 0), monkeypatch)


@_fuzz
@given(data=payloads(), where=st.integers(0, 1 << 20), xor=st.integers(1, 255))
def test_corrupted_blocks_agree(data: bytes, where: int, xor: int) -> None:
    body = bytearray(block(data))
    body[where % len(body)] ^= xor
    with pytest.MonkeyPatch.context() as monkeypatch:
        same(bytes(body), len(data), monkeypatch)


@_fuzz
@given(body=st.binary(max_size=300), raw_size=st.integers(0, 5000))
def test_random_bodies_agree(body: bytes, raw_size: int) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        same(body, raw_size, monkeypatch)


# -- binding and choice of path -------------------------------------------------------------


def test_bind_refuses_libraries_without_the_symbol_and_keeps_its_binding(tmp_path: Any) -> None:
    assert fastlz4.bind(fastlz4.__file__) is False  # loaded, but no LZ4 in it
    assert fastlz4.bind(str(tmp_path / "not-loaded.so")) is False
    assert fastlz4.decompress(block(_TEXT), len(_TEXT)) == _TEXT


def test_decoder_choice_is_visible() -> None:
    """The C path by default (asserted, so a broken binding does not go unnoticed), python-lz4
    with LOGHUBD_NO_C=1 or when the lz4 build does not export LZ4_decompress_safe."""
    show = "from loghubd.protocol import compress; print(compress.LZ4_DECODER)"
    assert fresh_python(show) == fresh_python(show, LOGHUBD_NO_C="0") == "c"
    assert fresh_python(show, LOGHUBD_NO_C="1") == "python"
    # another lz4 build: its extension is a library that does not export the symbol
    other_lz4 = (
        "import lz4.block._block as b\nfrom loghubd import _fastlz4\n"
        "b.__file__ = _fastlz4.__file__\n"
        "from loghubd.protocol import compress as c\n"
        "d = b'abc' * 1000\n"
        "print(c.LZ4_DECODER, c.decompress('lz4', c.compress('lz4', d), len(d)) == d)"
    )
    assert fresh_python(other_lz4) == "python True"


def test_decompress_before_bind_is_refused() -> None:
    code = (
        "from loghubd import _fastlz4\n"
        "try:\n    _fastlz4.decompress(b'\\x10x', 1)\nexcept RuntimeError as e:\n    print(e)"
    )
    assert fresh_python(code) == "LZ4_decompress_safe is not bound: call bind()"
