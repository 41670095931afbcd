"""The HTTP family: wrong methods, unknown and odd paths, APIs loghubd does not implement,
odd and huge headers and Host values, request bytes that are not valid HTTP."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.reliability.fuzz.layout import (
    KEEP,
    KEEP_PROJECT,
    SCRATCH_LOGSTORES,
    SCRATCH_PROJECT,
    Layout,
    q,
    seg,
)
from tests.reliability.fuzz.values import (
    JSON_TYPE,
    RAW_BYTES,
    WEIRD_TEXT,
    dumps,
    json_value,
    junk_query,
    log_group_bytes,
    many_headers,
    odd_headers,
)
from tests.reliability.fuzz.wire import Req

SHAPES = [
    "/",
    "/logstores",
    f"/logstores/{KEEP}",
    f"/logstores/{KEEP}/shards",
    f"/logstores/{KEEP}/shards/lb",
    f"/logstores/{KEEP}/shards/route",
    f"/logstores/{KEEP}/shards/0",
    f"/logstores/{KEEP}/consumergroups",
    f"/logstores/{KEEP}/consumergroups/kg",
]
ALLOWED = {  # methods a shape has a route for (see loghubd/server/routes.py)
    "/": {"GET", "POST", "PUT", "DELETE"},
    "/logstores": {"GET", "POST"},
    f"/logstores/{KEEP}": {"GET", "PUT", "DELETE"},
    f"/logstores/{KEEP}/shards": {"GET"},
    f"/logstores/{KEEP}/shards/lb": {"POST"},
    f"/logstores/{KEEP}/shards/route": {"POST"},
    f"/logstores/{KEEP}/shards/0": {"GET", "POST", "DELETE"},
    f"/logstores/{KEEP}/consumergroups": {"GET", "POST"},
    f"/logstores/{KEEP}/consumergroups/kg": {"GET", "POST", "PUT", "DELETE"},
}
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO", "HEAD"]


def http_oddities(layout: Layout) -> st.SearchStrategy[Req]:
    @st.composite
    def wrong_method(draw: st.DrawFn) -> Req:
        shape = draw(st.sampled_from(SHAPES))
        method = draw(st.sampled_from([m for m in METHODS if m not in ALLOWED[shape]]))
        body = draw(st.one_of(st.just(b""), RAW_BYTES))
        return Req("WrongMethod", method, shape, (), (), body, must_refuse=method != "HEAD")

    @st.composite
    def unknown_path(draw: st.DrawFn) -> Req:
        """Odd paths ("", "..", "%2F" segments...). The server may normalise them into a real
        route, so any method but GET goes to the scratch project only."""
        parts = draw(st.lists(st.one_of(WEIRD_TEXT, RAW_BYTES).map(seg), min_size=1, max_size=8))
        method = draw(st.sampled_from(METHODS[:5]))
        project = KEEP_PROJECT if method == "GET" else SCRATCH_PROJECT
        store = KEEP if method == "GET" else SCRATCH_LOGSTORES[1]
        path = "/" + "/".join(parts)
        if draw(st.booleans()):
            path = f"/logstores/{store}/" + "/".join(parts)
        if draw(st.integers(0, 5)) == 0:
            path = f"http://{project}.x{path}"  # absolute-form target
        return Req("UnknownPath", method, path, q(**draw(junk_query())), project=project)

    @st.composite
    def odd_header_reads(draw: st.DrawFn) -> Req:
        shape = draw(st.sampled_from([*SHAPES[:4], f"/logstores/{KEEP}/consumergroups/kg"]))
        headers = draw(st.one_of(odd_headers(), many_headers()))
        host: bytes | None = None
        no_host = False
        choice = draw(st.integers(0, 4))
        if choice == 1:
            host = draw(
                st.sampled_from(
                    [b"", b"\xff\xfe.sls.local", b"fzkeep", b"FZKEEP.x", b".", b"..", b"a..b",
                     b"[::1]", b"fzkeep.x:99999", b"\x00.x", b"fzkeep.x.", b"%66zkeep.x",
                     b"h" * 5000 + b".x"]
                )
            )  # fmt: skip
        elif choice == 2:
            no_host = True
        return Req("OddHeaders", "GET", shape, (), headers, host=host, no_host=no_host)

    @st.composite
    def malformed(draw: st.DrawFn) -> Req:
        kind = draw(st.integers(0, 10))
        if kind == 0:
            raw = draw(RAW_BYTES) + b"\r\n\r\n"
        elif kind == 1:
            raw = (
                b"GET / HTTP/"
                + draw(st.sampled_from([b"9.9", b"1", b"x", b"1.1.1", b"2.0", b"0.9"]))
                + b"\r\nHost: fzkeep.x\r\n\r\n"
            )
        elif kind == 2:
            raw = b"GET /\x00\xff HTTP/1.1\r\nHost: fzkeep.x\r\n\r\n"
        elif kind == 3:
            raw = b"GET / HTTP/1.1\nHost: fzkeep.x\n\n"
        elif kind == 4:
            raw = b"GET / HTTP/1.1\r\nHost: fzkeep.x\r\nno-colon-here\r\n\r\n"
        elif kind == 5:
            raw = b"GET / HTTP/1.1\r\nHost: fzkeep.x\r\nX-A: 1\r\n folded\r\n\r\n"
        elif kind == 6:
            raw = (
                b"POST /logstores/s1/shards/lb HTTP/1.1\r\nHost: fzscratch.x\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + draw(RAW_BYTES) + b"\r\n0\r\n\r\n"
            )
        elif kind == 7:
            raw = (
                b"POST /logstores/s1/shards/lb HTTP/1.1\r\nHost: fzscratch.x\r\n"
                b"Content-Length: 5\r\nContent-Length: 7\r\n\r\nabcde"
            )
        elif kind == 8:
            raw = (
                b"POST /logstores/s1/shards/lb HTTP/1.1\r\nHost: fzscratch.x\r\n"
                b"Content-Length: -3\r\n\r\n"
            )
        elif kind == 9:
            raw = (
                b"GET /" + b"a" * draw(st.integers(8000, 20_000)) + b" HTTP/1.1\r\nHost: x\r\n\r\n"
            )
        else:  # a body shorter than its Content-Length, then the client is gone
            body = draw(log_group_bytes())
            raw = (
                b"POST /logstores/s1/shards/lb HTTP/1.1\r\nHost: fzscratch.x\r\n"
                b"Content-Length: " + str(len(body) + draw(st.integers(1, 10_000))).encode()
                + b"\r\n\r\n" + body
            )  # fmt: skip
            return Req("TruncatedBody", "POST", raw=raw, half_close=True)
        return Req("Malformed", "GET", raw=raw)

    @st.composite
    def unimplemented(draw: st.DrawFn) -> Req:
        """SLS APIs the route table names but loghubd does not implement: refused, naming
        the API (the old GetLogs form was answered with the logstore's description)."""
        method, path, query = draw(st.sampled_from(UNIMPLEMENTED))
        body = draw(st.one_of(st.just(b""), json_value(2).map(dumps), RAW_BYTES))
        query += q(**{k: v for k, v in draw(junk_query()).items() if k != "type"})
        return Req("Unimplemented", method, path, query, (JSON_TYPE,), body, must_refuse=True)

    return st.one_of(
        wrong_method(), unknown_path(), odd_header_reads(), malformed(), unimplemented()
    )


UNIMPLEMENTED = [
    ("GET", f"/logstores/{KEEP}", q(type="log")),
    ("GET", f"/logstores/{KEEP}", q(type="histogram")),
    ("POST", f"/logstores/{KEEP}/logs", ()),
    ("GET", f"/logstores/{KEEP}/index", ()),
    ("POST", f"/logstores/{KEEP}/index", ()),
    ("GET", "/logs", ()),
]
