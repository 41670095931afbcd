"""Building blocks every family draws from: odd integers and text, JSON (valid, broken, of
the wrong shape), odd headers, log groups valid and not, compression bombs and lying
`x-log-bodyrawsize` bodies."""

from __future__ import annotations

import functools
import json
import zlib
from typing import Any

import lz4.block
import zstandard
from hypothesis import strategies as st

from loghubd.protocol import compress as codec
from loghubd.protocol import pb
from tests.reliability.fuzz.layout import MAX_BODY, SCRATCH_LOGSTORES


def is_hex_like_server(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def parses_as_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


ODD_INTS = st.one_of(
    st.integers(-5, 300),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30, -(2**63) - 1]),
)
ODD_INT_TEXT = st.one_of(
    ODD_INTS.map(str),
    st.sampled_from(
        ["", " 1", "1 ", "1.5", "1e3", "0x10", "\u0661", "+1", "-0", "9" * 5000, "nan", "1_0"]
    ),
    st.text(max_size=12),
)
WEIRD_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="latin-1"), max_size=40),
    st.sampled_from(["", "\x00", "../..", "%", "%%", "'", '"', "\\", "😀" * 10, "a" * 300]),
)
RAW_BYTES = st.binary(max_size=64)
_MOSTLY_EXISTING = st.sampled_from([*SCRATCH_LOGSTORES, *SCRATCH_LOGSTORES, "s3"])
SCRATCH_NAMES = st.one_of(  # mostly logstores that exist, so requests get past the lookup
    _MOSTLY_EXISTING, _MOSTLY_EXISTING, _MOSTLY_EXISTING, st.from_regex(r"\Az[a-z0-9_-]{1,3}\Z")
)
NEVER_NAMES = st.from_regex(r"\Anx[a-z0-9]{2,8}\Z")  # names nothing ever creates


def json_value(depth: int = 2) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        ODD_INTS,
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
    )
    if depth <= 0:
        return scalars
    inner = json_value(depth - 1)
    return st.one_of(
        scalars,
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=10), inner, max_size=4),
    )


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def broken_json(draw: st.DrawFn, template: st.SearchStrategy[dict[str, Any]]) -> bytes:
    """Not valid JSON, whatever the template: a strict prefix of an object's text, bytes
    that are not UTF-8 inside it, or JSON-ish garbage."""
    text = dumps(draw(template))
    kind = draw(st.sampled_from(["prefix", "not-utf8", "garbage", "trailing"]))
    if kind == "prefix":
        return text[: draw(st.integers(1, len(text) - 1))]
    if kind == "not-utf8":
        at = draw(st.integers(0, len(text)))
        return (
            text[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"])) + text[at:]
        )
    if kind == "trailing":
        return text + draw(st.sampled_from([b"}", b",", b"x", b"{"]))
    return draw(
        st.sampled_from(
            [b"{", b"[", b'{"a":}', b"{'a': 1}", b"{a: 1}", b"[1,]", b"NaNx", b"\x00", b"tru"]
        )
    )


def non_dict_json() -> st.SearchStrategy[bytes]:
    """Valid JSON that is not an object (and not null, which means "no body")."""
    return st.one_of(
        st.lists(json_value(1), max_size=3).map(dumps),
        st.one_of(ODD_INTS, st.text(max_size=10), st.booleans()).map(dumps),
    )


def odd_headers() -> st.SearchStrategy[tuple[tuple[bytes, bytes], ...]]:
    name = st.one_of(
        st.sampled_from(
            [
                b"x-log-bodyrawsize",
                b"x-log-compresstype",
                b"accept-encoding",
                b"content-type",
                b"authorization",
                b"x-log-signaturemethod",
                b"x-acs-security-token",
                b"date",
                b"user-agent",
                b"x-log-apiversion",
            ]
        ),
        st.from_regex(rb"\Ax-[a-z0-9-]{1,20}\Z"),
    )
    value = st.one_of(
        st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
        st.sampled_from([b"", b" ", b"\xff\xfe", b"lz4, zstd", b"-1", b"99999999999999999999"]),
        st.integers(100, 12_000).map(lambda n: b"v" * n),  # past aiohttp's 8 KB line limit
    )
    return st.lists(st.tuples(name, value), max_size=6).map(tuple)


def many_headers() -> st.SearchStrategy[tuple[tuple[bytes, bytes], ...]]:
    return st.integers(50, 400).map(lambda n: tuple((f"x-h{i}".encode(), b"v") for i in range(n)))


# -- log groups -------------------------------------------------------------------------------


@st.composite
def log_group_bytes(draw: st.DrawFn) -> bytes:
    """A valid LogGroup, values possibly not UTF-8 (the server stores bytes as they are)."""
    group = pb.LogGroupRaw()
    for _ in range(draw(st.integers(1, 4))):
        log = group.Logs.add(Time=draw(st.integers(0, 2**32 - 1)))
        if draw(st.booleans()):
            log.Time_ns = draw(st.integers(0, 999_999_999))
        for _ in range(draw(st.integers(0, 4))):
            log.Contents.add(Key=draw(st.text(max_size=8)), Value=draw(st.binary(max_size=40)))
    if draw(st.booleans()):
        group.Topic = draw(st.text(max_size=10))
    if draw(st.booleans()):
        group.Source = draw(st.text(max_size=10))
    for _ in range(draw(st.integers(0, 2))):
        group.LogTags.add(Key=draw(st.text(max_size=6)), Value=draw(st.text(max_size=6)))
    data: bytes = group.SerializeToString()
    return data


@st.composite
def invalid_log_group(draw: st.DrawFn) -> bytes:
    """Bytes that are surely not an acceptable LogGroup."""
    kind = draw(st.sampled_from(["bad-wire", "truncated", "no-logs", "no-time", "no-value"]))
    if kind == "bad-wire":  # wire types 6/7, or field number 0: never parse
        return draw(st.sampled_from([b"\x0e", b"\x0f", b"\x07", b"\x06", b"\x00"])) + draw(
            RAW_BYTES
        )
    if kind == "truncated":  # cut inside the first field (Logs): its length overruns
        good = draw(log_group_bytes())
        size, pos = pb.decode_varint(good, 1)
        return good[: draw(st.integers(1, pos + size - 1))]
    if kind == "no-logs":
        g = pb.LogGroup(Topic=draw(st.text(max_size=10)), Source="fuzz")
        data: bytes = g.SerializeToString()
        return data
    if kind == "no-time":  # Log without its required Time
        content = _field(1, b"k") + _field(2, draw(RAW_BYTES))
        return _field(1, _field(2, content))
    content = _field(1, b"k")  # Content without its required Value
    log = b"\x08" + pb.encode_varint(1_700_000_000) + _field(2, content)
    return _field(1, log)


def _field(num: int, payload: bytes) -> bytes:
    return bytes([num << 3 | 2]) + pb.encode_varint(len(payload)) + payload


@functools.cache
def bombs() -> list[tuple[str, bytes, int]]:
    """(codec, compressed bytes, true size): small bodies that inflate to 10-50 MB."""
    zeros = bytes(50 * 1024 * 1024)
    out = [
        ("zstd", zstandard.ZstdCompressor(level=3).compress(zeros), len(zeros)),
        (
            "zstd",
            zstandard.ZstdCompressor(level=3, write_content_size=False).compress(zeros),
            len(zeros),
        ),
        ("deflate", zlib.compress(zeros, 9), len(zeros)),
        ("lz4", lz4.block.compress(zeros[: 10 * 1024 * 1024], store_size=False), 10 * 1024 * 1024),
    ]
    return out


@st.composite
def lying_body(draw: st.DrawFn) -> tuple[tuple[tuple[bytes, bytes], ...], bytes]:
    """(headers, body): compressed, with an `x-log-bodyrawsize` that is not its size."""
    if draw(st.integers(0, 4)) == 0:
        ctype, body, true = draw(st.sampled_from(bombs()))
    else:
        raw = draw(log_group_bytes())
        ctype = draw(st.sampled_from(["lz4", "zstd", "deflate"]))
        body, true = codec.compress(ctype, raw), len(raw)
        if draw(st.booleans()):  # corrupt the compressed bytes too
            at = draw(st.integers(0, max(0, len(body) - 1)))
            body = body[:at] + draw(RAW_BYTES) + body[at + 1 :]
    declared = draw(
        st.one_of(
            st.integers(0, 2 * true + 10),
            st.integers(-(2**40), -1),
            st.integers(MAX_BODY + 1, 2**63),
            st.sampled_from([true - 1, true + 1, 0, MAX_BODY]),
        ).filter(lambda n: n != true)
    )
    headers = (
        (b"x-log-compresstype", ctype.encode()),
        (b"x-log-bodyrawsize", str(declared).encode()),
    )
    return headers, body


PB_TYPE = (b"content-type", b"application/x-protobuf")
JSON_TYPE = (b"content-type", b"application/json")


def junk_query() -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(
        st.sampled_from(["offset", "size", "logstoreName", "shard", "type", "x", "\xff"]),
        st.one_of(ODD_INT_TEXT, WEIRD_TEXT),
        max_size=3,
    )
