"""SLS body compression (PROTOCOL.md §6): raw LZ4 blocks, zstd frames, zlib deflate, none.

Every decoder is bounded by the declared raw size, so a small body that claims to be small but
inflates to gigabytes (a "bomb" with a lying `x-log-bodyrawsize`) is refused before memory is
spent on it.

LZ4 bodies are decoded by the C extension `loghubd._fastlz4` straight into the bytes object
that is returned (python-lz4 decodes into a buffer of its own and copies that), with the lz4
wheel's own LZ4_decompress_safe. The python-lz4 path is taken when LOGHUBD_NO_C is set, when the
extension was not built, or when the installed lz4 does not export that symbol;
`LZ4_DECODER` says which ("c" or "python").
"""

from __future__ import annotations

import functools
import io
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import lz4.block

if TYPE_CHECKING:
    import zstandard

from loghubd.native import load_extension

LZ4: Final = "lz4"
ZSTD: Final = "zstd"
DEFLATE: Final = "deflate"
NONE: Final = ""

SUPPORTED: Final = frozenset({LZ4, ZSTD, DEFLATE, NONE})


@functools.cache
def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    """zstd's codec pair, made on first use: pulls are answered in LZ4 unless asked otherwise,
    so most daemons never need zstandard, whose import took 16-34 ms in `python -X importtime`
    here (bench/README.md, "Seventeenth session: start-up imports")."""
    import zstandard

    return zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor()


def _python_lz4(data: bytes, raw_size: int) -> bytes:
    out: bytes = lz4.block.decompress(data, uncompressed_size=raw_size)
    return out


def _pick_lz4() -> tuple[str, Callable[[bytes, int], bytes]]:
    """The LZ4 block decoder: the C one if built, allowed and bound to the lz4 wheel's code."""
    extension = load_extension("loghubd._fastlz4")
    if extension is not None and extension.bind(lz4.block._block.__file__):
        return "c", extension.decompress
    return "python", _python_lz4


LZ4_DECODER, _lz4_decompress = _pick_lz4()


class CompressionError(ValueError):
    """The body cannot be decoded as declared (bad data, wrong size, unknown codec)."""


def compress(codec: str, data: bytes) -> bytes:
    if codec == LZ4:
        # SLS frames LZ4 as a raw block: the python binding's 4-byte size prefix is dropped.
        return bytes(lz4.block.compress(data, store_size=False))
    if codec == ZSTD:
        return _zstd()[0].compress(data)
    if codec == DEFLATE:
        return zlib.compress(data, 1)
    if codec == NONE:
        return data
    raise CompressionError(f"unsupported compress type {codec!r}")


def decompress(codec: str, data: bytes, raw_size: int) -> bytes:
    """Decode `data` that must inflate to exactly `raw_size` bytes."""
    if raw_size < 0:
        raise CompressionError("negative raw size")
    try:
        if codec == LZ4:
            if raw_size == 0:
                out = b""
            else:
                out = _lz4_decompress(data, raw_size)
        elif codec == ZSTD:
            # stream_reader honours our bound even when the frame header lies about its size
            with _zstd()[1].stream_reader(io.BytesIO(data)) as reader:
                out = reader.read(raw_size + 1)
        elif codec == DEFLATE:
            d = zlib.decompressobj()
            out = d.decompress(data, raw_size + 1)
        elif codec == NONE:
            out = data
        else:
            raise CompressionError(f"unsupported compress type {codec!r}")
    except CompressionError:
        raise
    except Exception as exc:  # each codec raises its own error types
        raise CompressionError(f"{codec or 'none'} body does not decode: {exc}") from exc
    if len(out) != raw_size:
        # a decoder stops one byte past raw_size: how much more there was is not known
        got = str(len(out)) if len(out) < raw_size else f"more than {raw_size}"
        raise CompressionError(f"body decodes to {got} bytes, x-log-bodyrawsize says {raw_size}")
    return bytes(out)


def pick_response_codec(accept_encoding: str | None) -> str:
    """The codec for a PullLogs answer, from the request's `Accept-Encoding` (SLS, not HTTP)."""
    if accept_encoding is None:
        return LZ4
    for token in accept_encoding.split(","):
        name = token.strip().lower()
        if name in (LZ4, ZSTD, DEFLATE):
            return name
    return NONE
