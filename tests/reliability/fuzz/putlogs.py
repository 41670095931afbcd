"""The PutLogs family: load-balanced and hash-routed writes, valid and not, to the protected
logstore (each must be refused) and to the scratch one."""

from __future__ import annotations

from hypothesis import strategies as st

from loghubd.protocol import compress as codec
from tests.integration.sls_http import log_group
from tests.reliability.fuzz.layout import (
    KEEP,
    MAX_BODY,
    SCRATCH_LOGSTORES,
    SCRATCH_PROJECT,
    Layout,
    q,
    seg,
)
from tests.reliability.fuzz.values import (
    PB_TYPE,
    RAW_BYTES,
    SCRATCH_NAMES,
    invalid_log_group,
    is_hex_like_server,
    log_group_bytes,
    lying_body,
    odd_headers,
    parses_as_int,
)
from tests.reliability.fuzz.wire import Req


def putlogs(layout: Layout) -> st.SearchStrategy[Req]:
    @st.composite
    def protected(draw: st.DrawFn) -> Req:
        route = draw(st.sampled_from(["lb", "route"]))
        path = f"/logstores/{KEEP}/shards/{route}"
        query: tuple[tuple[bytes, bytes], ...] = ()
        if route == "route":  # a routing key is allowed; the body or headers are not
            query = q(key=draw(st.one_of(st.text(max_size=40), st.from_regex(r"\A[0-9a-f]{32}\Z"))))
        kind = draw(
            st.sampled_from(
                ["lying", "invalid-pb", "bad-ctype", "bad-rawsize", "too-large", "bad-key"]
            )
        )
        headers: tuple[tuple[bytes, bytes], ...] = (PB_TYPE,)
        if kind == "lying":
            extra, body = draw(lying_body())
            headers += extra
        elif kind == "invalid-pb":
            body = draw(invalid_log_group())
            ctype = draw(st.sampled_from(["", "lz4", "zstd", "deflate"]))
            if ctype:
                headers += (
                    (b"x-log-compresstype", ctype.encode()),
                    (b"x-log-bodyrawsize", str(len(body)).encode()),
                )
                body = codec.compress(ctype, body)
        elif kind == "bad-ctype":
            body = draw(log_group_bytes())
            ctype = draw(st.text(max_size=12).filter(lambda t: t.lower() not in codec.SUPPORTED))
            headers += (
                (b"x-log-compresstype", ctype.encode("utf-8", "surrogatepass")),
                (b"x-log-bodyrawsize", str(len(body)).encode()),
            )
        elif kind == "bad-rawsize":
            raw = draw(log_group_bytes())
            ctype = draw(st.sampled_from(["lz4", "zstd", "deflate"]))
            body = codec.compress(ctype, raw)
            size = draw(
                st.one_of(st.none(), st.text(max_size=12).filter(lambda t: not parses_as_int(t)))
            )
            headers += ((b"x-log-compresstype", ctype.encode()),)
            if size is not None:
                headers += ((b"x-log-bodyrawsize", size.encode("utf-8", "surrogatepass")),)
        elif kind == "too-large":
            pad = "x" * (MAX_BODY + draw(st.integers(1, 3000)))
            body = log_group(["too-large"], extra={"pad": pad})
            if draw(st.booleans()):
                headers += (
                    (b"x-log-compresstype", b"lz4"),
                    (b"x-log-bodyrawsize", str(len(body)).encode()),
                )
                body = codec.compress("lz4", body)
        else:  # a valid body routed by a key that is not 32 hex digits (as the server reads it)
            body = draw(log_group_bytes())
            path = f"/logstores/{KEEP}/shards/route"
            key = draw(
                st.one_of(
                    st.none(),
                    st.text(max_size=40).filter(
                        lambda k: not (len(k) == 32 and is_hex_like_server(k))
                    ),
                )
            )
            query = () if key is None else q(key=key)
        return Req("PutLogs", "POST", path, query, headers, body, must_refuse=True)

    @st.composite
    def scratch(draw: st.DrawFn) -> Req:
        ls = draw(SCRATCH_NAMES)
        route = draw(st.sampled_from(["lb", "route"]))
        query = q(key=draw(st.one_of(st.from_regex(r"\A[0-9a-fA-F]{32}\Z"), st.text(max_size=34))))
        body = draw(
            st.one_of(
                log_group_bytes(),
                invalid_log_group(),
                RAW_BYTES,
                log_group_bytes().flatmap(
                    lambda b: st.integers(0, max(0, len(b) - 1)).map(lambda i: b[:i] + b[i + 1 :])
                ),
            )
        )
        headers: tuple[tuple[bytes, bytes], ...] = (PB_TYPE,)
        ctype = draw(st.sampled_from(["", "lz4", "zstd", "deflate", "LZ4", "snappy"]))
        if ctype:
            size = len(body) + draw(st.sampled_from([0, 0, 0, -1, 1]))
            if ctype.lower() in codec.SUPPORTED:
                body = codec.compress(ctype.lower(), body)
            headers += (
                (b"x-log-compresstype", ctype.encode()),
                (b"x-log-bodyrawsize", str(size).encode()),
            )
        return Req(
            "PutLogs",
            "POST",
            f"/logstores/{seg(ls)}/shards/{route}",
            query if route == "route" else (),
            headers + draw(odd_headers()),
            body,
            project=SCRATCH_PROJECT,
        )

    @st.composite
    def scratch_valid(draw: st.DrawFn) -> Req:
        """A write that should be stored (values may be any bytes): it must read back."""
        raw = draw(log_group_bytes())
        ctype = draw(st.sampled_from(["", "lz4", "zstd", "deflate"]))
        headers: tuple[tuple[bytes, bytes], ...] = (PB_TYPE,)
        if ctype:
            headers += (
                (b"x-log-compresstype", ctype.encode()),
                (b"x-log-bodyrawsize", str(len(raw)).encode()),
            )
        ls = draw(st.sampled_from(SCRATCH_LOGSTORES))
        return Req(
            "PutLogs",
            "POST",
            f"/logstores/{ls}/shards/lb",
            (),
            headers,
            codec.compress(ctype, raw),
            project=SCRATCH_PROJECT,
        )

    return st.one_of(protected(), protected(), scratch(), scratch_valid())
