"""Request fuzzing against a real `loghubd serve`: hypothesis strategies for every route of
`loghubd/server/api.py` (and its `type=` / `action=` variants), a raw-socket HTTP sender, the
protected data set and its checksum.

Two kinds of requests:

- aimed at the **protected** project (`fzkeep`: logstore `keep`, groups `kg`, `kg2`, data in
  every shard, a read-only shard from a split, forced checkpoints). Reads may be anything
  (any answer below 500). Every request that could change something is built so that it
  *must* be refused (`Req.must_refuse`): malformed and truncated protobuf, compressed bodies
  with a lying `x-log-bodyrawsize` (bombs included), broken or ill-typed JSON, invalid and
  foreign cursors, out-of-range shard ids and keys, names that do not exist, heartbeats of
  unknown consumers. They must get a 4xx, and the checksum of the protected data (every
  stored byte, cursors, shards, groups, checkpoints, project and logstore settings) must not
  change.
- aimed at the **scratch** project (`fzscratch`): anything, valid or not, including valid
  writes with non-UTF-8 content, splits, deletes. Only "no 5xx" applies; what it stored must
  still be readable afterwards (`Target.read_back_scratch`).

Plus raw HTTP oddities (wrong methods, unknown paths, huge and odd headers, odd Host headers,
malformed request lines), where an unanswered (closed) connection is allowed only for
requests that are not valid HTTP.

`examples(share)` reads LOGHUBD_FUZZ_EXAMPLES (total examples over all families, default
3000) so that the long run (bench/fuzz_long.py) is this code with a bigger number.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import json
import os
import socket
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote_from_bytes

import lz4.block
import zstandard
from hypothesis import strategies as st

from loghubd.protocol import compress as codec
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.testing.process import ServerProcess
from tests.integration.sls_http import RawClient, log_group

KEEP_PROJECT = "fzkeep"
KEEP = "keep"
KEEP_GROUPS = ("kg", "kg2")
SCRATCH_PROJECT = "fzscratch"
SCRATCH_LOGSTORES = ("s1", "s2")
SCRATCH_GROUP = "sg"
MAX_BODY = 1_000_000  # the fuzz server's --max-body-bytes
HOST_SUFFIX = "sls.local"
SCRATCH_MAX_SHARDS = 48  # a scratch logstore split beyond this is dropped and made again
RAW_TIMEOUT_S = 1.0  # how long a request that is not valid HTTP may wait for an answer

# Families and their share of the examples.
FAMILIES = {
    "putlogs": 0.25,
    "shards": 0.25,
    "groups": 0.2,
    "projects": 0.15,
    "http": 0.15,
}


def examples(family: str) -> int:
    total = int(os.environ.get("LOGHUBD_FUZZ_EXAMPLES", "3000"))
    return max(20, round(total * FAMILIES[family]))


# -- requests and the wire -------------------------------------------------------------------


@dataclass(frozen=True)
class Req:
    api: str  # label for statistics, e.g. "PutLogs" or "GetShard:log"
    method: str = "GET"
    path: str = "/"  # already percent-encoded
    query: tuple[tuple[bytes, bytes], ...] = ()
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body: bytes = b""
    project: str = KEEP_PROJECT  # Host: <project>.sls.local ("" = bare sls.local)
    host: bytes | None = None  # an explicit Host value instead (None: from project)
    no_host: bool = False
    must_refuse: bool = False  # aimed at protected data: a 4xx is the only right answer
    raw: bytes | None = None  # the whole request as bytes (not valid HTTP)
    half_close: bool = False  # raw: shut our side down after sending (a truncated body)

    def target(self) -> bytes:
        path = self.path.encode("latin-1")
        if not self.query:
            return path
        q = "&".join(
            f"{quote_from_bytes(k, safe='')}={quote_from_bytes(v, safe='')}" for k, v in self.query
        )
        return path + b"?" + q.encode()

    def encode(self) -> bytes:
        if self.raw is not None:
            return self.raw
        lines = [self.method.encode() + b" " + self.target() + b" HTTP/1.1"]
        if not self.no_host:
            host = self.host
            if host is None:
                host = (f"{self.project}.{HOST_SUFFIX}" if self.project else HOST_SUFFIX).encode()
            lines.append(b"Host: " + host)
        names = {k.lower() for k, _v in self.headers}
        lines += [k + b": " + v for k, v in self.headers]
        if b"content-length" not in names and b"transfer-encoding" not in names:
            lines.append(b"Content-Length: " + str(len(self.body)).encode())
        if b"x-log-apiversion" not in names:
            lines.append(b"x-log-apiversion: 0.6.0")
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body

    def short(self) -> str:
        head = self.raw[:200] if self.raw is not None else self.encode()[:300]
        return f"{self.api} must_refuse={self.must_refuse} body={len(self.body)}B: {head!r}"


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


class Wire:
    """Sends `Req`s over one keep-alive socket (a fresh one after any trouble)."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.port = port
        self.timeout = timeout
        self.sock: socket.socket | None = None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, req: Req) -> Reply | None:
        """The answer, or None when the server closed the connection without one."""
        if req.raw is not None:
            return self._send_raw(req)
        for _attempt in range(2):
            fresh = self.sock is None
            try:
                return self._send(req)
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                self.close()
                if fresh:
                    return None
            # A kept-alive socket may have been closed by the server meanwhile: once more.
        return None

    def _send_raw(self, req: Req) -> Reply | None:
        """Not valid HTTP: only the status line of an answer is read (it may be any version)."""
        assert req.raw is not None
        with socket.create_connection(("127.0.0.1", self.port), timeout=RAW_TIMEOUT_S) as sock:
            try:
                sock.sendall(req.raw)
                if req.half_close:
                    sock.shutdown(socket.SHUT_WR)
                data = b""
                while b"\r\n" not in data and len(data) < 65536:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except (TimeoutError, ConnectionError):
                return None
        line = data.split(b"\r\n", 1)[0].split()
        if len(line) < 2 or not line[0].startswith(b"HTTP/") or not line[1].isdigit():
            return None
        return Reply(int(line[1]), {}, data)

    def _send(self, req: Req) -> Reply:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        sock = self.sock
        sock.sendall(req.encode())
        resp = http.client.HTTPResponse(sock, method=req.method)
        try:
            resp.begin()
            body = resp.read()
        except BaseException:
            self.close()
            raise
        headers = {k.lower(): v for k, v in resp.getheaders()}
        if resp.will_close or headers.get("connection") == "close":
            self.close()
        return Reply(resp.status, headers, body)


# -- the target: protected and scratch data ----------------------------------------------------


@dataclass
class Layout:
    """What the strategies need to know about the protected data."""

    shards: list[dict[str, Any]] = field(default_factory=list)  # ListShards of keep
    cursors: dict[int, list[str]] = field(default_factory=dict)  # shard → begin, middle, end

    @property
    def shard_ids(self) -> list[int]:
        return [int(s["shardID"]) for s in self.shards]

    def readwrite(self) -> list[dict[str, Any]]:
        return [s for s in self.shards if s["status"] == "readwrite"]

    def last_readwrite(self) -> int:
        """The readwrite shard with no readwrite right-hand neighbour (cannot be merged)."""
        rw = self.readwrite()
        begins = {s["inclusiveBeginKey"] for s in rw}
        return next(int(s["shardID"]) for s in rw if s["exclusiveEndKey"] not in begins)


def rss_kb(pid: int, field_name: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field_name} for {pid}")


class Target:
    """One real server with the protected and scratch data, and the checks around a run."""

    def __init__(self, workdir: Path) -> None:
        self.server = ServerProcess(
            workdir / "fuzz-data",
            extra_args=["--max-body-bytes", str(MAX_BODY)],
            log_path=workdir / "fuzz-server.log",
        )
        self.layout = Layout()
        self.stats: Counter[tuple[str, int]] = Counter()
        self.requests = 0
        self.refused_as_required = 0  # requests aimed at protected data, all refused (4xx)
        self.repairs = 0
        self.baseline: dict[str, Any] = {}  # snapshot of the protected data, once set up
        self.baseline_checksum = ""
        self.baseline_rss_kb = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Target:
        self.server.start()
        self._protected()
        self.repair_scratch()
        self.wire = Wire(self.server.port)
        self.baseline = self.snapshot()
        self.baseline_checksum = self.checksum()
        self.baseline_rss_kb = rss_kb(self.pid)
        return self

    def close(self) -> None:
        self.wire.close()
        self.server.kill()

    @property
    def pid(self) -> int:
        assert self.server.proc is not None
        return self.server.proc.pid

    def alive(self) -> bool:
        return self.server.proc is not None and self.server.proc.poll() is None

    def client(self, project: str) -> RawClient:
        return RawClient(self.server.port, project, timeout=30)

    def _protected(self) -> None:
        c = self.client(KEEP_PROJECT)
        try:
            c.create_project()
            c.create_logstore(KEEP, shards=3)
            for i in range(12):
                extra = {"n": str(i), "text": "ünïcødé ✓" * (i % 3)}
                key = None if i % 2 else f"{i * 0x15:x}".rjust(32, "0")
                compress = ("lz4", "zstd", "deflate", "")[i % 4]
                raw = log_group([f"keep-{i}-{j}" for j in range(i + 1)], extra=extra)
                assert c.put_raw(KEEP, raw, key=key, compress=compress).status == 200
            raw_value = pb.LogGroupRaw()
            log = raw_value.Logs.add(Time=1_700_000_000)
            log.Contents.add(Key="id", Value=b"keep-raw")
            log.Contents.add(Key="bytes", Value=bytes(range(256)))
            assert c.put_raw(KEEP, raw_value.SerializeToString()).status == 200
            # A read-only shard (split), with data on both sides of the split.
            c.ok(
                "POST",
                f"/logstores/{KEEP}/shards/1",
                query={"action": "split", "key": "6" + "0" * 31},
            )
            for i in range(6):
                raw = log_group([f"keep-after-{i}"])
                assert c.put_raw(KEEP, raw, key=f"{i * 0x2A:x}".rjust(32, "0")).status == 200
            for name, order in zip(KEEP_GROUPS, (False, True), strict=True):
                body = json.dumps({"consumerGroup": name, "timeout": 30, "order": order})
                c.ok("POST", f"/logstores/{KEEP}/consumergroups", body=body.encode())
            shards = c.list_shards(KEEP)
            for s in shards:
                sid = int(s["shardID"])
                begin, end = c.cursor(KEEP, sid, "begin"), c.cursor(KEEP, sid, "end")
                b, e = cursors.to_seq(sid, begin), cursors.to_seq(sid, end)
                middle = cursors.from_seq(sid, (b + e) // 2)
                self.layout.cursors[sid] = [begin, middle, end]
                if e > b:
                    commit = json.dumps({"shard": sid, "checkpoint": middle}).encode()
                    c.ok(
                        "POST",
                        f"/logstores/{KEEP}/consumergroups/kg",
                        query={"type": "checkpoint", "forceSuccess": "true"},
                        body=commit,
                    )
            self.layout.shards = shards
        finally:
            c.close()

    def repair_scratch(self) -> None:
        """Make sure the scratch project, logstores and group exist (the fuzz may delete
        them) and that no scratch logstore has been split beyond `SCRATCH_MAX_SHARDS`."""
        self.repairs += 1
        c = self.client(SCRATCH_PROJECT)
        try:
            if c.request("GET", "/").status == 404:
                c.create_project()
            for ls in SCRATCH_LOGSTORES:
                got = c.request("GET", f"/logstores/{ls}/shards")
                if got.status == 200 and len(got.json()) > SCRATCH_MAX_SHARDS:
                    c.ok("DELETE", f"/logstores/{ls}")
                    got = c.request("GET", f"/logstores/{ls}/shards")
                if got.status == 404:
                    c.create_logstore(ls, shards=2)
                    c.put_raw(ls, log_group([f"{ls}-seed"]))
            groups = c.ok("GET", f"/logstores/{SCRATCH_LOGSTORES[0]}/consumergroups").json()
            if not any(g["name"] == SCRATCH_GROUP for g in groups):
                body = json.dumps({"consumerGroup": SCRATCH_GROUP, "timeout": 5, "order": False})
                c.request(
                    "POST", f"/logstores/{SCRATCH_LOGSTORES[0]}/consumergroups", body=body.encode()
                )
        finally:
            c.close()

    # -- checks ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything stored under the protected project, as the API shows it: project and
        logstore settings, shards, every pulled LogGroupList (bytes) with its cursors,
        consumer groups, checkpoints and the coordinator's status of each group."""
        out: dict[str, Any] = {}
        c = self.client(KEEP_PROJECT)
        try:
            out["project"] = c.ok("GET", "/").json()
            out["logstores"] = c.ok("GET", "/logstores").json()
            out["logstore"] = c.ok("GET", f"/logstores/{KEEP}").json()
            shards = c.list_shards(KEEP)
            out["shards"] = shards
            for s in shards:
                sid = int(s["shardID"])
                begin, end = c.cursor(KEEP, sid, "begin"), c.cursor(KEEP, sid, "end")
                out[f"cursors {sid}"] = [begin, end]
                pulled = hashlib.sha256()
                cursor = begin
                while cursor != end:
                    got = c.pull(KEEP, sid, cursor, count=5)
                    assert got.status == 200, got.body[:200]
                    pulled.update(cursor.encode() + b"\0" + got.body)
                    cursor = got.headers["x-log-cursor"]
                out[f"data {sid}"] = pulled.hexdigest()
            out["groups"] = c.ok("GET", f"/logstores/{KEEP}/consumergroups").json()
            for g in KEEP_GROUPS:
                base = f"/logstores/{KEEP}/consumergroups/{g}"
                out[f"checkpoints {g}"] = c.ok("GET", base).json()
                out[f"status {g}"] = c.ok("GET", base, query={"type": "status"}).json()
        finally:
            c.close()
        return out

    def checksum(self) -> str:
        """sha256 of `snapshot()`."""
        return hashlib.sha256(json.dumps(self.snapshot(), sort_keys=True).encode()).hexdigest()

    def changes(self) -> dict[str, Any]:
        """What differs from the baseline snapshot: {part: (before, now)}."""
        now = self.snapshot()
        return {
            k: (self.baseline.get(k), now.get(k))
            for k in sorted(set(now) | set(self.baseline))
            if now.get(k) != self.baseline.get(k)
        }

    def read_back_scratch(self) -> int:
        """Every scratch shard reads back from begin to end (whatever the fuzz stored there);
        returns the number of log groups read."""
        total = 0
        c = self.client(SCRATCH_PROJECT)
        try:
            if c.request("GET", "/").status != 200:
                return 0
            names = c.ok("GET", "/logstores").json()["logstores"]
            for ls in names:
                for s in c.list_shards(ls):
                    groups, _ = c.pull_all(ls, int(s["shardID"]))
                    for g in groups:
                        pb.LogGroupRaw.FromString(g)
                    total += len(groups)
        finally:
            c.close()
        return total

    def error_log_lines(self) -> list[str]:
        text = self.server.log_path.read_text(errors="replace")
        return [line for line in text.splitlines() if "request_failed" in line]

    # -- one request -------------------------------------------------------------------------

    def check(self, req: Req) -> Reply | None:
        """Send one request and assert on the answer (used inside hypothesis tests)."""
        self.requests += 1
        reply = self.wire.send(req)
        status = reply.status if reply is not None else 0
        self.stats[(req.api, status)] += 1
        if reply is None:
            assert self.alive(), f"the server died on {req.short()}"
            # Only requests that are not valid HTTP may go unanswered.
            assert req.raw is not None, f"no answer to {req.short()}"
            return None
        assert status < 500, (
            f"{status} for {req.short()}\n-> {reply.body[:500]!r}\n{self.error_log_lines()[-1:]}"
        )
        if req.must_refuse:
            self.refused_as_required += 1
            assert 400 <= status < 500, (
                f"{status}: a request aimed at protected data was not refused: "
                f"{req.short()}\n-> {reply.body[:300]!r}"
            )
        changed_scratch = req.method == "DELETE" or b"action=split" in req.target()
        if status == 200 and req.project == SCRATCH_PROJECT and changed_scratch:
            self.repair_scratch()
        return reply


# -- building blocks --------------------------------------------------------------------------


def q(**kw: str | bytes) -> tuple[tuple[bytes, bytes], ...]:
    return tuple(
        (k.encode(), v if isinstance(v, bytes) else v.encode("utf-8", "surrogateescape"))
        for k, v in kw.items()
    )


def seg(value: str | bytes) -> str:
    """A path segment, percent-encoded (bytes may be any, also not UTF-8)."""
    raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
    return quote_from_bytes(raw, safe="")


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
        size, pos = _varint(good, 1)
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


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


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


# -- families ---------------------------------------------------------------------------------

PB_TYPE = (b"content-type", b"application/x-protobuf")
JSON_TYPE = (b"content-type", b"application/json")


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


def _cursor_values(layout: Layout, shard: int) -> st.SearchStrategy[str]:
    own = layout.cursors.get(shard, [])
    foreign = [c for s, cs in layout.cursors.items() if s != shard for c in cs]
    return st.one_of(
        st.sampled_from(own or ["x"]),
        st.sampled_from(foreign or ["y"]),
        st.text(max_size=30),
        ODD_INTS.map(lambda n: cursors.encode(abs(n))),
        ODD_INTS.map(lambda n: cursors.from_seq(shard, abs(n)) if 0 <= shard < 10**6 else "z"),
        st.sampled_from(["", "@@@", "MA==", "LTE=", "MDA=", "=" * 8, "\u00ff\u00fe"]),
    )


SPL = st.one_of(
    st.sampled_from(
        [
            "*",
            "* | where id = 'keep-1-0'",
            "* | where",
            "* | extend a = ",
            "* | project -wildcard",
            "* | where " + "(" * 3000 + "1" + ")" * 3000,
            "* | where " + "not " * 3000 + "true",
            "* | where a like '%%%'",
            "* | where cast(a as bigint) > 1",
            "* | where a in ()",
            "* | extend x = 1/0",
            "* | extend x = 9999999999999999999999 * 99999999999999999",
            "* | where __time__ between 1 and 'a'",
            '* | where "\xff" = 1',
        ]
    ),
    st.text(alphabet="*|()'\"=<>!%-+/ aAnwhereotxildbc0123456789,.", max_size=60).map(
        lambda t: "* | " + t
    ),
    st.text(max_size=30),
)


def shards(layout: Layout) -> st.SearchStrategy[Req]:
    ids = st.one_of(st.sampled_from(layout.shard_ids), ODD_INTS)

    @st.composite
    def reads(draw: st.DrawFn) -> Req:
        shard = draw(ids)
        shard_seg = draw(st.one_of(st.just(str(shard)), ODD_INT_TEXT.map(seg)))
        kind = draw(st.sampled_from(["cursor", "cursor_time", "log", "logs", "other", "list"]))
        path = f"/logstores/{KEEP}/shards/{shard_seg}"
        if kind == "list":
            return Req("ListShards", "GET", f"/logstores/{KEEP}/shards", q(**draw(_junk_query())))
        if kind == "cursor":
            where = draw(st.one_of(st.sampled_from(["begin", "end"]), ODD_INT_TEXT))
            return Req("GetShard:cursor", "GET", path, q(type="cursor", **{"from": where}))
        if kind == "cursor_time":
            cur = draw(_cursor_values(layout, shard))
            return Req("GetShard:cursor_time", "GET", path, q(type="cursor_time", cursor=cur))
        if kind in ("log", "logs"):
            params = {"type": kind, "cursor": draw(_cursor_values(layout, shard))}
            if draw(st.booleans()):
                params["count"] = draw(ODD_INT_TEXT)
            if draw(st.booleans()):
                params["end_cursor"] = draw(_cursor_values(layout, shard))
            if draw(st.integers(0, 3)) == 0:
                params["query"] = draw(SPL)
                params["pullMode"] = draw(st.sampled_from(["scan_on_stream", "", "x"]))
            if draw(st.integers(0, 10)) == 0:
                params["processor"] = draw(st.text(max_size=8))
            headers = (
                (
                    b"accept-encoding",
                    draw(st.sampled_from([b"lz4", b"zstd", b"deflate", b"", b"gzip", b"\xff"])),
                ),
            )
            return Req(f"GetShard:{kind}", "GET", path, q(**params), headers)
        other = draw(st.one_of(st.none(), st.text(max_size=10)))
        return Req("GetShard:other", "GET", path, () if other is None else q(type=other))

    @st.composite
    def protected_changes(draw: st.DrawFn) -> Req:
        kind = draw(st.sampled_from(["split", "merge", "action", "delete"]))
        rw = layout.readwrite()
        rw_ids = {int(s["shardID"]) for s in rw}
        if kind == "split":
            how = draw(st.sampled_from(["missing-shard", "readonly", "bad-key", "outside"]))
            shard, key = int(rw[0]["shardID"]), "8" + "0" * 31
            if how == "missing-shard":
                shard = draw(ODD_INTS.filter(lambda n: n not in layout.shard_ids))
                key = draw(st.from_regex(r"\A[0-9a-f]{32}\Z"))
            elif how == "readonly":
                shard = draw(st.sampled_from([i for i in layout.shard_ids if i not in rw_ids]))
                key = draw(st.from_regex(r"\A[0-9a-f]{32}\Z"))
            elif how == "bad-key":
                s = draw(st.sampled_from(rw))
                shard = int(s["shardID"])
                key = draw(
                    st.text(max_size=40).filter(
                        lambda k: not (len(k) == 32 and is_hex_like_server(k))
                    )
                )
            else:  # 32 hex digits, at or outside the shard's range
                s = draw(st.sampled_from(rw))
                shard = int(s["shardID"])
                begin, end = int(s["inclusiveBeginKey"], 16), int(s["exclusiveEndKey"], 16)
                k = draw(
                    st.one_of(
                        st.integers(0, begin),
                        st.integers(min(end, 2**128 - 1), 2**128 - 1),
                    )
                )
                key = f"{k:032x}"
            return Req(
                "SplitShard",
                "POST",
                f"/logstores/{KEEP}/shards/{shard}",
                q(action="split", key=key),
                must_refuse=True,
            )
        if kind == "merge":
            shard = draw(
                st.one_of(
                    st.sampled_from([i for i in layout.shard_ids if i not in rw_ids]),
                    st.just(layout.last_readwrite()),
                    ODD_INTS.filter(lambda n: n not in layout.shard_ids),
                )
            )
            return Req(
                "MergeShard",
                "POST",
                f"/logstores/{KEEP}/shards/{shard}",
                q(action="merge"),
                must_refuse=True,
            )
        if kind == "action":
            shard = draw(ids)
            action = draw(
                st.one_of(
                    st.none(), st.text(max_size=10).filter(lambda a: a not in ("split", "merge"))
                )
            )
            return Req(
                "SplitOrMergeShard",
                "POST",
                f"/logstores/{KEEP}/shards/{shard}",
                () if action is None else q(action=action, key="8" + "0" * 31),
                must_refuse=True,
            )
        # DeleteShard: readwrite shards and missing ones only (a read-only one would go)
        shard = draw(
            st.one_of(
                st.sampled_from(sorted(rw_ids)),
                ODD_INTS.filter(lambda n: n not in layout.shard_ids),
            )
        )
        return Req("DeleteShard", "DELETE", f"/logstores/{KEEP}/shards/{shard}", must_refuse=True)

    @st.composite
    def scratch(draw: st.DrawFn) -> Req:
        ls = draw(SCRATCH_NAMES)
        shard = draw(st.one_of(st.integers(0, 12), ODD_INTS))
        method = draw(st.sampled_from(["GET", "POST", "DELETE"]))
        params: dict[str, str] = {}
        if method == "POST":
            params["action"] = draw(st.sampled_from(["split", "merge", "split", "x"]))
            params["key"] = draw(
                st.one_of(st.from_regex(r"\A[0-9a-f]{32}\Z"), st.text(max_size=34))
            )
        elif method == "GET":
            params["type"] = draw(st.sampled_from(["cursor", "log", "cursor_time"]))
            params["from"] = draw(st.one_of(st.just("begin"), ODD_INT_TEXT))
            params["cursor"] = draw(_cursor_values(layout, shard))
        return Req(
            "Shards:scratch",
            method,
            f"/logstores/{seg(ls)}/shards/{shard}",
            q(**params),
            project=SCRATCH_PROJECT,
        )

    return st.one_of(reads(), protected_changes(), scratch())


def _junk_query() -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(
        st.sampled_from(["offset", "size", "logstoreName", "shard", "type", "x", "\xff"]),
        st.one_of(ODD_INT_TEXT, WEIRD_TEXT),
        max_size=3,
    )


def groups(layout: Layout) -> st.SearchStrategy[Req]:
    base = f"/logstores/{KEEP}/consumergroups"
    group_def = st.fixed_dictionaries(
        {"consumerGroup": st.text(max_size=10), "timeout": ODD_INTS, "order": st.booleans()}
    )

    @st.composite
    def protected_changes(draw: st.DrawFn) -> Req:
        kind = draw(
            st.sampled_from(
                ["create", "update", "delete", "heartbeat", "checkpoint", "type", "leave"]
            )
        )
        if kind == "create":
            body = draw(
                st.one_of(
                    broken_json(group_def),
                    non_dict_json(),
                    st.builds(  # an existing name, or a bad name, or bad settings
                        lambda name, timeout, order: dumps(
                            {"consumerGroup": name, "timeout": timeout, "order": order}
                        ),
                        st.one_of(
                            st.sampled_from(KEEP_GROUPS),
                            st.text(max_size=3).filter(lambda n: len(n) < 2),
                            st.text(min_size=2, max_size=8).filter(
                                lambda n: (
                                    not (n.isascii() and all(c.isalnum() or c in "-_" for c in n))
                                )
                            ),
                            st.integers(0, 5),
                        ),
                        st.one_of(st.integers(1, 60), st.integers(-5, 0), st.text(max_size=3)),
                        st.booleans(),
                    ),
                    st.builds(
                        lambda timeout, order: dumps(
                            {"consumerGroup": "nxgroup", "timeout": timeout, "order": order}
                        ),
                        st.one_of(
                            st.integers(-(2**40), 0),
                            st.integers(2**31, 2**80),  # more seconds than SQLite can hold
                            st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
                            st.text(max_size=4),
                            st.none(),
                            st.booleans(),
                        ),
                        st.one_of(
                            st.booleans(),
                            st.integers(0, 2),
                            st.text(max_size=4).filter(
                                lambda t: t.lower() not in ("true", "false")
                            ),
                        ),
                    ),
                )
            )
            return Req(
                "CreateConsumerGroup", "POST", base, (), (JSON_TYPE,), body, must_refuse=True
            )
        if kind == "update":
            name = draw(st.one_of(st.sampled_from(KEEP_GROUPS), NEVER_NAMES))
            bad = st.one_of(
                broken_json(st.fixed_dictionaries({"timeout": ODD_INTS})),
                non_dict_json(),
                st.dictionaries(
                    st.text(max_size=5).filter(lambda k: k not in ("timeout", "order")),
                    json_value(1),
                    max_size=3,
                ).map(dumps),
                st.fixed_dictionaries(
                    {
                        "timeout": st.one_of(
                            st.integers(-(2**40), 0),
                            st.integers(2**31, 2**80),
                            st.text(max_size=3),
                            st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
                            st.booleans(),
                            st.none(),
                        )
                    }
                ).map(dumps),
                st.fixed_dictionaries(
                    {
                        "order": st.one_of(
                            st.integers(),
                            st.text(max_size=4).filter(
                                lambda t: t.lower() not in ("true", "false")
                            ),
                            st.none(),
                        )
                    }
                ).map(dumps),
            )
            body = draw(bad) if name in KEEP_GROUPS else draw(st.one_of(bad, group_def.map(dumps)))
            return Req(
                "UpdateConsumerGroup",
                "PUT",
                f"{base}/{seg(name)}",
                (),
                (JSON_TYPE,),
                body,
                must_refuse=True,
            )
        if kind == "delete":
            name = draw(NEVER_NAMES)
            return Req("DeleteConsumerGroup", "DELETE", f"{base}/{seg(name)}", must_refuse=True)
        group = draw(st.sampled_from(KEEP_GROUPS))
        consumer = draw(st.from_regex(r"\Afz[a-z0-9]{1,10}\Z"))
        if kind == "heartbeat":
            body = draw(
                st.one_of(
                    broken_json(st.just({"x": [0, 1]})),
                    st.dictionaries(st.text(max_size=4), json_value(1), max_size=2).map(dumps),
                    st.lists(
                        st.one_of(st.text(max_size=3), st.booleans(), st.floats(), st.none()),
                        min_size=1,
                        max_size=4,
                    ).map(lambda v: json.dumps(v).encode()),
                    st.lists(ODD_INTS, min_size=1, max_size=5).map(dumps),  # unknown consumer
                )
            )
            params = {"type": "heartbeat", "consumer": consumer}
            if draw(st.booleans()):
                params["shards"] = draw(st.one_of(st.text(max_size=10), st.just("0,1,99")))
            return Req(
                "ConsumerGroupHeartBeat",
                "POST",
                f"{base}/{group}",
                q(**params),
                (JSON_TYPE,),
                body,
                must_refuse=True,
            )
        if kind == "checkpoint":
            how = draw(st.sampled_from(["broken", "cursor", "force", "owner", "shard"]))
            shard = draw(st.sampled_from(layout.shard_ids))
            good = layout.cursors[shard][0]
            params = {"type": "checkpoint", "consumer": consumer, "forceSuccess": "true"}
            payload: Any = {"shard": shard, "checkpoint": good}
            if how == "broken":
                body = draw(st.one_of(broken_json(st.just(payload)), non_dict_json()))
            else:
                if how == "cursor":  # not a canonical cursor at all
                    payload["checkpoint"] = draw(
                        st.one_of(
                            st.text(min_size=1, max_size=20).map(lambda t: t + "!"),
                            st.sampled_from(["", "MDA=", "LTE=", "MA", "=MA=", " MA=="]),
                        )
                    )
                elif how == "force":
                    params["forceSuccess"] = draw(
                        st.text(max_size=6).filter(lambda t: t.lower() not in ("true", "false"))
                    )
                elif how == "owner":  # not forced, and not the owner (an unknown consumer)
                    params["forceSuccess"] = draw(st.sampled_from(["false", "FALSE", "False"]))
                    if draw(st.booleans()):
                        del params["consumer"]
                else:
                    payload["shard"] = draw(
                        st.one_of(
                            ODD_INTS.filter(lambda n: n not in layout.shard_ids),
                            st.text(max_size=3),
                            st.none(),
                            st.floats(),
                        )
                    )
                body = json.dumps(payload).encode()
            return Req(
                "ConsumerGroupUpdateCheckPoint",
                "POST",
                f"{base}/{group}",
                q(**params),
                (JSON_TYPE,),
                body,
                must_refuse=True,
            )
        if kind == "leave":  # of consumers the group does not know: accepted or not, no change
            params = {"type": "leave"}
            if draw(st.booleans()):
                params["consumer"] = consumer
            return Req("ConsumerGroupLeave", "POST", f"{base}/{group}", q(**params))
        kind_value = draw(
            st.text(max_size=10).filter(lambda t: t not in ("heartbeat", "checkpoint", "leave"))
        )
        return Req(
            "ConsumerGroupPost:other",
            "POST",
            f"{base}/{group}",
            q(type=kind_value, consumer=consumer),
            (JSON_TYPE,),
            b"[]",
            must_refuse=True,
        )

    @st.composite
    def reads(draw: st.DrawFn) -> Req:
        if draw(st.booleans()):
            return Req("ListConsumerGroup", "GET", base, q(**draw(_junk_query())))
        name = draw(st.one_of(st.sampled_from(KEEP_GROUPS), NEVER_NAMES, WEIRD_TEXT.filter(bool)))
        params: dict[str, str] = {}
        if draw(st.booleans()):
            params["type"] = draw(st.sampled_from(["status", "", "x"]))
        if draw(st.booleans()):
            params["shard"] = draw(ODD_INT_TEXT)
        return Req("GetCheckPoint", "GET", f"{base}/{seg(name)}", q(**params))

    @st.composite
    def scratch(draw: st.DrawFn) -> Req:
        ls = draw(st.one_of(*[st.just(SCRATCH_LOGSTORES[0])] * 3, SCRATCH_NAMES))
        sbase = f"/logstores/{seg(ls)}/consumergroups"
        name = draw(st.one_of(st.just(SCRATCH_GROUP), st.just(SCRATCH_GROUP), SCRATCH_NAMES))
        method = draw(st.sampled_from(["POST", "POST", "PUT", "DELETE", "GET"]))
        kind = draw(st.sampled_from(["heartbeat", "checkpoint", "leave", "create"]))
        consumer = draw(st.one_of(st.sampled_from(["a", "b", "c"]), WEIRD_TEXT))
        body = draw(
            st.one_of(
                st.lists(st.one_of(st.integers(-3, 20), ODD_INTS), max_size=5).map(dumps),
                json_value(2).map(dumps),
                group_def.map(dumps),
                st.fixed_dictionaries(
                    {
                        "shard": st.one_of(st.integers(0, 10), ODD_INTS),
                        "checkpoint": _cursor_values(layout, 0),
                    }
                ).map(dumps),
                broken_json(group_def),
            )
        )
        if method == "POST" and kind == "create":
            return Req(
                "Groups:scratch", "POST", sbase, (), (JSON_TYPE,), body, project=SCRATCH_PROJECT
            )
        params = {
            "type": kind,
            "consumer": consumer,
            "forceSuccess": draw(st.sampled_from(["true", "false", "x"])),
        }
        if draw(st.booleans()):
            params["shards"] = draw(st.one_of(st.just("0,1"), st.text(max_size=8)))
        return Req(
            "Groups:scratch",
            method,
            f"{sbase}/{seg(name)}",
            q(**params),
            (JSON_TYPE,),
            body,
            project=SCRATCH_PROJECT,
        )

    return st.one_of(protected_changes(), reads(), scratch())


def projects(layout: Layout) -> st.SearchStrategy[Req]:
    logstore_def = st.fixed_dictionaries(
        {"logstoreName": st.text(max_size=10), "ttl": ODD_INTS, "shardCount": ODD_INTS}
    )

    def bad_name(n: str) -> bool:
        return not (2 <= len(n) <= 128 and n.isascii() and all(c.isalnum() or c in "-_" for c in n))

    @st.composite
    def protected_changes(draw: st.DrawFn) -> Req:
        kind = draw(
            st.sampled_from(
                ["create-project", "update-project", "delete-project", "create-logstore",
                 "update-logstore", "delete-logstore"]
            )
        )  # fmt: skip
        if kind == "create-project":  # it exists: refused whatever the body
            body = draw(st.one_of(json_value(2).map(dumps), RAW_BYTES))
            return Req("CreateProject", "POST", "/", (), (JSON_TYPE,), body, must_refuse=True)
        if kind == "update-project":
            body = draw(
                st.one_of(
                    broken_json(st.fixed_dictionaries({"description": st.text(max_size=10)})),
                    non_dict_json(),
                )
            )
            return Req("UpdateProject", "PUT", "/", (), (JSON_TYPE,), body, must_refuse=True)
        if kind == "delete-project":  # only projects that do not exist
            name = draw(NEVER_NAMES)
            return Req("DeleteProject", "DELETE", "/", project=name, must_refuse=True)
        if kind == "create-logstore":
            body = draw(
                st.one_of(
                    broken_json(logstore_def),
                    non_dict_json(),
                    st.builds(
                        lambda name, ttl, count: dumps(
                            {"logstoreName": name, "ttl": ttl, "shardCount": count}
                        ),
                        st.one_of(st.just(KEEP), st.text(max_size=12).filter(bad_name)),
                        st.integers(1, 30),
                        st.integers(1, 4),
                    ),
                    st.builds(
                        lambda ttl, count: dumps(
                            {"logstoreName": "nxstore", "ttl": ttl, "shardCount": count}
                        ),
                        st.one_of(
                            st.integers(-(2**70), 0),
                            st.integers(3651, 2**70),
                            st.text(max_size=4).filter(lambda t: not parses_as_int(t)),
                            st.none(),
                            st.lists(st.integers(), max_size=2),
                        ),
                        st.integers(1, 4),
                    ),
                    st.builds(
                        lambda count: dumps(
                            {"logstoreName": "nxstore", "ttl": 7, "shardCount": count}
                        ),
                        st.one_of(
                            st.integers(-(2**70), 0),
                            st.integers(257, 2**70),
                            st.text(max_size=4).filter(lambda t: not parses_as_int(t)),
                            st.none(),
                        ),
                    ),
                    st.fixed_dictionaries({"ttl": st.integers(1, 5)}).map(dumps),  # no name
                )
            )
            return Req(
                "CreateLogStore", "POST", "/logstores", (), (JSON_TYPE,), body, must_refuse=True
            )
        if kind == "update-logstore":
            name = draw(st.one_of(st.just(KEEP), NEVER_NAMES))
            bad = st.one_of(
                broken_json(st.fixed_dictionaries({"ttl": ODD_INTS})),
                st.fixed_dictionaries(
                    {
                        "ttl": st.one_of(
                            st.integers(-(2**70), 0),
                            st.integers(3651, 2**70),
                            st.text(max_size=4).filter(lambda t: not parses_as_int(t)),
                            st.lists(st.integers(), max_size=2),
                        )
                    }
                ).map(dumps),
            )
            body = draw(bad) if name == KEEP else draw(st.one_of(bad, logstore_def.map(dumps)))
            return Req(
                "UpdateLogStore",
                "PUT",
                f"/logstores/{seg(name)}",
                (),
                (JSON_TYPE,),
                body,
                must_refuse=True,
            )
        name = draw(NEVER_NAMES)
        return Req("DeleteLogStore", "DELETE", f"/logstores/{seg(name)}", must_refuse=True)

    @st.composite
    def reads(draw: st.DrawFn) -> Req:
        kind = draw(
            st.sampled_from(["get-project", "list-projects", "list-logstores", "get-logstore"])
        )
        if kind == "get-project":
            return Req(
                "GetProject",
                "GET",
                "/",
                q(**draw(_junk_query())),
                project=draw(st.one_of(st.just(KEEP_PROJECT), NEVER_NAMES)),
            )
        if kind == "list-projects":
            host = draw(
                st.sampled_from(
                    [b"127.0.0.1", HOST_SUFFIX.encode(), b"localhost", b"[::1]:7100", b"sls"]
                )
            )
            return Req("ListProject", "GET", "/", q(**draw(_junk_query())), host=host)
        if kind == "list-logstores":
            return Req("ListLogStores", "GET", "/logstores", q(**draw(_junk_query())))
        name = draw(st.one_of(st.just(KEEP), NEVER_NAMES, WEIRD_TEXT.filter(bool)))
        return Req("GetLogStore", "GET", f"/logstores/{seg(name)}", q(**draw(_junk_query())))

    @st.composite
    def scratch(draw: st.DrawFn) -> Req:
        method = draw(st.sampled_from(["POST", "PUT", "DELETE", "GET"]))
        body = draw(
            st.one_of(logstore_def.map(dumps), json_value(2).map(dumps), broken_json(logstore_def))
        )
        if draw(st.booleans()):
            path = "/"
            project = draw(
                st.one_of(st.just(SCRATCH_PROJECT), st.from_regex(r"\Azp[a-z0-9]{0,3}\Z"))
            )
            api = "Project:scratch"
        else:
            name = draw(SCRATCH_NAMES)
            path = "/logstores" if method == "POST" else f"/logstores/{seg(name)}"
            project = SCRATCH_PROJECT
            api = "LogStore:scratch"
        return Req(api, method, path, (), (JSON_TYPE,), body, project=project)

    return st.one_of(protected_changes(), reads(), scratch())


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
ALLOWED = {  # methods a shape has a route for (see api.ROUTES)
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
        return Req("UnknownPath", method, path, q(**draw(_junk_query())), project=project)

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

    return st.one_of(wrong_method(), unknown_path(), odd_header_reads(), malformed())


STRATEGIES: dict[str, Callable[[Layout], st.SearchStrategy[Req]]] = {
    "putlogs": putlogs,
    "shards": shards,
    "groups": groups,
    "projects": projects,
    "http": http_oddities,
}


def write_stats(target: Target, family: str, extra: dict[str, Any]) -> None:
    """Append this family's figures to $LOGHUBD_FUZZ_STATS (JSON lines), if set."""
    path = os.environ.get("LOGHUBD_FUZZ_STATS")
    if not path:
        return
    row = {
        "family": family,
        "time": time.time(),
        "requests": target.requests,
        "refused_as_required": target.refused_as_required,
        "by_api_status": {
            f"{api} {status}": n for (api, status), n in sorted(target.stats.items())
        },
        **extra,
    }
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
