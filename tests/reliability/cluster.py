"""What the chaos run (chaos.py) and the fault-proxy run (proxyrun.py) share: one real
`loghubd serve`, a pool of real `loghubd run` daemons on one logstore and consumer group, a
producer, progress lines, clean-up, and the server-side views the analyses read (committed
and end positions per shard, "everything committed", every stored copy of every id).

Each run subclasses `ClusterRun` and adds its own faults and its own report.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from loghubd.protocol import cursor as cursors
from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import Admin, Pool
from tests.integration.sls_http import RawClient, ids_in_group

T = TypeVar("T")


def retry(fn: Callable[[], T], timeout: float = 30.0, what: str = "call") -> T:
    """`fn()` until it does not raise (the server may be coming back), within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Exception as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} kept failing for {timeout}s: {exc!r}") from exc
            time.sleep(0.2)


class ClusterRun:
    def __init__(
        self, workdir: Path, logstore: str, group: str, progress: Callable[[str], Any] | None
    ) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logstore = logstore
        self.group = group
        self.progress = progress
        self.server = ServerProcess(self.dir / "server-data", log_path=self.dir / "server.log")
        self.pool: Pool | None = None
        self.producer: Any = None  # anything with kill()
        self.t0 = time.monotonic()

    @property
    def admin(self) -> Admin:
        """Set-up and inspection calls, straight to the server (never through a proxy)."""
        return Admin(self.server.endpoint)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(f"[{self.now():7.1f}s] {text}")

    def close(self) -> None:
        if self.producer is not None:
            self.producer.kill()
        if self.pool is not None:
            self.pool.close()
        self.server.kill()

    # -- what the server holds ---------------------------------------------------------------

    def positions(self) -> dict[int, tuple[int, int]]:
        """shard → (committed position or -1, end position) as the server holds them now."""
        admin = self.admin
        status = retry(lambda: admin.group_status(self.logstore, self.group), what="group status")
        out = {}
        for s in status["shards"]:
            cp = s["checkpoint"]
            out[s["shard"]] = (cursors.to_seq(s["shard"], cp) if cp else -1, s["endCursorSeq"])
        return out

    def all_committed(self) -> bool:
        """Every shard's checkpoint is its end (a shard never written to needs none)."""
        try:
            status = self.admin.group_status(self.logstore, self.group)
        except Exception:
            return False
        shards = status["shards"]
        for s in shards:
            end, begin = s["endCursorSeq"], s["beginCursorSeq"]
            if not s["checkpoint"]:
                if end == begin:
                    continue
                return False
            if cursors.to_seq(s["shard"], s["checkpoint"]) != end:
                return False
        return bool(shards)

    def stored(self) -> dict[str, list[tuple[int, int]]]:
        """id → [(shard, position)] of every stored copy, read back from the server."""
        out: dict[str, list[tuple[int, int]]] = defaultdict(list)
        client = RawClient(self.server.port, self.admin.project, timeout=60)
        try:
            for s in client.list_shards(self.logstore):
                shard = int(s["shardID"])
                begin = client.cursor(self.logstore, shard, "begin")
                first = cursors.to_seq(shard, begin)
                groups, _ = client.pull_all(self.logstore, shard, begin=begin)
                for i, raw in enumerate(groups):
                    for ident in ids_in_group(raw):
                        out[ident].append((shard, first + i))
        finally:
            client.close()
        return out
