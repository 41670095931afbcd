"""A deliberately small raw-HTTP SLS client for the integration tests.

It speaks to a real `loghubd serve` process with `http.client`, addressing the project through
the `Host` header (`<project>.sls.local`), and builds/parses bodies with loghubd's own protocol
modules. It has no retries and no cleverness: tests see exactly what the server answered.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from loghubd.protocol import compress as codec
from loghubd.protocol import pb, signing
from loghubd.testing import wait_until as wait_until  # re-exported: tests poll through here

ENDPOINT_HOST = "sls.local"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))

    @property
    def error_code(self) -> str | None:
        try:
            data = self.json()
        except ValueError:
            return None
        return data.get("errorCode") if isinstance(data, dict) else None


class RawClient:
    """One keep-alive connection to a server on 127.0.0.1:`port`; reconnects after errors."""

    def __init__(
        self,
        port: int,
        project: str = "proj",
        timeout: float = 10.0,
        creds: signing.Credentials | None = None,
    ) -> None:
        self.port = port
        self.project = project
        self.timeout = timeout
        self.creds = creds  # set: every request is v1-signed with these keys
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
        project: str | None = None,
        host: str | None = None,
    ) -> Answer:
        project = self.project if project is None else project
        target = path + ("?" + urlencode(query) if query else "")
        hdrs = {
            "Host": host
            if host is not None
            else (f"{project}.{ENDPOINT_HOST}" if project else ENDPOINT_HOST),
            "x-log-apiversion": "0.6.0",
            "Content-Length": str(len(body)),
        }
        hdrs.update(headers or {})
        if self.creds is not None:  # signed as the server reads values: without blanks
            lower = {k.lower(): v.strip() for k, v in hdrs.items()}
            params = {k: v if isinstance(v, str) else v.decode() for k, v in (query or {}).items()}
            signing.sign_v1(self.creds, method, path, params, lower, body)
            hdrs = {**lower, **{k.lower(): v for k, v in hdrs.items()}}
        if self._conn is None:
            self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            self._conn.request(method, target, body=body, headers=hdrs)
            resp = self._conn.getresponse()
            data = resp.read()
        except BaseException:
            self.close()
            raise
        answer = Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        if resp.will_close:
            self.close()
        return answer

    # -- SLS calls ------------------------------------------------------------------------------

    def ok(self, method: str, path: str, **kw: Any) -> Answer:
        answer = self.request(method, path, **kw)
        assert answer.status == 200, (method, path, answer.status, answer.body[:500])
        return answer

    def create_project(self, name: str | None = None) -> None:
        name = name or self.project
        body = json.dumps({"projectName": name, "description": ""}).encode()
        self.ok("POST", "/", body=body, project=name, headers={"Content-Type": "application/json"})

    def create_logstore(self, name: str, shards: int = 2, ttl: int = 30) -> None:
        body = json.dumps({"logstoreName": name, "ttl": ttl, "shardCount": shards}).encode()
        self.ok("POST", "/logstores", body=body, headers={"Content-Type": "application/json"})

    def list_shards(self, logstore: str) -> list[dict[str, Any]]:
        shards: list[dict[str, Any]] = self.ok("GET", f"/logstores/{logstore}/shards").json()
        return shards

    def put_raw(
        self, logstore: str, raw: bytes, *, key: str | None = None, compress: str = "lz4"
    ) -> Answer:
        headers = {"Content-Type": "application/x-protobuf", "x-log-bodyrawsize": str(len(raw))}
        body = raw
        if compress:
            headers["x-log-compresstype"] = compress
            body = codec.compress(compress, raw)
        if key is None:
            return self.request(
                "POST", f"/logstores/{logstore}/shards/lb", headers=headers, body=body
            )
        return self.request(
            "POST",
            f"/logstores/{logstore}/shards/route",
            query={"key": key},
            headers=headers,
            body=body,
        )

    def cursor(self, logstore: str, shard: int, where: str = "begin") -> str:
        answer = self.ok(
            "GET", f"/logstores/{logstore}/shards/{shard}", query={"type": "cursor", "from": where}
        )
        cursor: str = answer.json()["cursor"]
        return cursor

    def pull(
        self,
        logstore: str,
        shard: int,
        cursor: str,
        *,
        count: int = 1000,
        end_cursor: str | None = None,
    ) -> Answer:
        query = {"type": "log", "cursor": cursor, "count": str(count)}
        if end_cursor is not None:
            query["end_cursor"] = end_cursor
        return self.request(
            "GET",
            f"/logstores/{logstore}/shards/{shard}",
            query=query,
            headers={"Accept": "application/x-protobuf", "Accept-Encoding": ""},
        )

    def pull_all(
        self, logstore: str, shard: int, *, begin: str | None = None, end: str | None = None
    ) -> tuple[list[bytes], str]:
        """Every serialized LogGroup of a shard in [begin, end) (uncompressed), and the cursor
        after the last one. The groups are re-split out of the LogGroupList bytes exactly as
        the server framed them, so callers can compare bytes."""
        cursor = begin if begin is not None else self.cursor(logstore, shard, "begin")
        stop = end if end is not None else self.cursor(logstore, shard, "end")
        groups: list[bytes] = []
        while cursor != stop:
            answer = self.pull(logstore, shard, cursor, end_cursor=stop)
            assert answer.status == 200, (answer.status, answer.body[:300])
            count = int(answer.headers["x-log-count"])
            assert count > 0, f"pull stalled at {cursor} before {stop}"
            assert int(answer.headers["x-log-bodyrawsize"]) == len(answer.body)
            chunk = split_log_group_list(answer.body)
            assert len(chunk) == count
            groups.extend(chunk)
            cursor = answer.headers["x-log-cursor"]
        return groups, cursor


# -- protobuf helpers -------------------------------------------------------------------------


def log_group(
    ids: Iterable[str],
    *,
    topic: str = "t",
    extra: Mapping[str, str] | None = None,
    when: int | None = None,
) -> bytes:
    """A serialized LogGroup with one log per id (content `id=<id>` plus `extra`)."""
    group = pb.LogGroup()
    group.Topic = topic
    group.Source = "integration-test"
    now = int(time.time()) if when is None else when
    for ident in ids:
        log = group.Logs.add()
        log.Time = now
        c = log.Contents.add()
        c.Key, c.Value = "id", ident
        for k, v in (extra or {}).items():
            c = log.Contents.add()
            c.Key, c.Value = k, v
    data: bytes = group.SerializeToString()
    return data


def split_log_group_list(data: bytes) -> list[bytes]:
    """The serialized LogGroups inside LogGroupList bytes (field 1, length-delimited)."""
    out, pos = [], 0
    while pos < len(data):
        tag, pos = pb.decode_varint(data, pos)
        assert tag == 0x0A, f"unexpected tag {tag} in LogGroupList"
        size, pos = pb.decode_varint(data, pos)
        out.append(data[pos : pos + size])
        pos += size
    return out


def ids_in_group(raw: bytes) -> list[str]:
    group = pb.LogGroupRaw.FromString(raw)
    return [
        c.Value.decode("utf-8", "replace")
        for log in group.Logs
        for c in log.Contents
        if c.Key == "id"
    ]


def raw_exchange(port: int, head: bytes, *, wait: float = 5.0) -> bytes:
    """Send `head` (and nothing more) and return what the server answers within `wait`."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(head)
        data = b""
        deadline = time.monotonic() + wait
        while b"\r\n\r\n" not in data or not _complete(data):
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
        return data


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return True
