"""The real `loghubd serve` a fuzz run attacks: the protected and scratch data it sets up,
the checksum of the protected data, the per-request checks and the figures it writes."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.testing.process import ServerProcess
from tests.integration.sls_http import RawClient, log_group
from tests.reliability.fuzz.layout import (
    HOST_SUFFIX,
    KEEP,
    KEEP_GROUPS,
    KEEP_PROJECT,
    MAX_BODY,
    SCRATCH_GROUP,
    SCRATCH_LOGSTORES,
    SCRATCH_MAX_SHARDS,
    SCRATCH_PROJECT,
    Layout,
)
from tests.reliability.fuzz.wire import Reply, Req, Wire


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
            extra_args=["--max-body-bytes", str(MAX_BODY), "--service-host", HOST_SUFFIX],
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

    def settle(self, before: str) -> dict[str, Any]:
        """What changed in the protected data since its checksum was `before` ({} nothing);
        a change becomes the new baseline, so the next check sees only its own changes."""
        if self.checksum() == before:
            return {}
        changed = self.changes()
        self.baseline = self.snapshot()
        self.baseline_checksum = self.checksum()
        return changed

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
