"""A scripted stand-in for the SLS client in consumer unit tests (the loops' logic is under
test here; the wire is covered end to end against real `loghubd serve` processes).

It implements the calls a shard task and the heartbeat loop make, answers from scripts, and
records every call so a test can assert what was sent."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.sls import Pulled


def log_groups(count: int, logs_per_group: int = 2) -> bytes:
    """A LogGroupList of `count` groups of `logs_per_group` logs each."""
    groups = []
    for g in range(count):
        group = pb.LogGroup(Topic="t")
        for i in range(logs_per_group):
            log = group.Logs.add()
            log.Time = 1_700_000_000
            content = log.Contents.add()
            content.Key, content.Value = "n", f"{g}-{i}"
        groups.append(group.SerializeToString())
    return pb.frame_log_groups(groups)


def at(seq: int) -> str:
    return cursors.encode(seq)


Answer = list[int] | Exception


class ScriptedClient:
    """Shard data: `shard_data[shard]` is the number of log groups stored (all are served in
    one pull from a position; the shard is read-only when `readonly`). Heartbeats answer
    `heartbeats` in order (an Exception is raised); once it is empty, `on_exhausted` is
    called and the last list answer repeats. Commits raise the next of `commit_errors`,
    checkpoint lookups the next of `checkpoint_errors`. ListConsumerGroup answers group `g`
    with the next of `group_timeouts` (the last one repeats; none: 5 s). Pulls raise the next
    of `pull_errors` first."""

    def __init__(
        self,
        *,
        shard_data: dict[int, int] | None = None,
        checkpoints: dict[int, str] | None = None,
        readonly: bool = False,
        heartbeats: Iterable[Answer] = (),
        commit_errors: Iterable[Exception | None] = (),
        checkpoint_errors: Iterable[Exception] = (),
        group_timeouts: Iterable[float] = (),
        pull_errors: Iterable[Exception] = (),
        on_exhausted: Callable[[], None] = lambda: None,
    ) -> None:
        self.shard_data = dict(shard_data or {})
        self.saved = dict(checkpoints or {})
        self.readonly = readonly
        self.heartbeats: deque[Answer] = deque(heartbeats)
        self.commit_errors: deque[Exception | None] = deque(commit_errors)
        self.checkpoint_errors: deque[Exception] = deque(checkpoint_errors)
        self.group_timeouts: deque[float] = deque(group_timeouts)
        self.pull_errors: deque[Exception] = deque(pull_errors)
        self.group_timeout = 5.0
        self.on_exhausted = on_exhausted
        self.last_answer: list[int] = []
        self.calls: list[tuple[str, Any]] = []

    # -- shard data ----------------------------------------------------------------------------

    async def checkpoints(self, logstore: str, group: str, shard: int | None = None) -> Any:
        self.calls.append(("checkpoints", shard))
        if self.checkpoint_errors:
            raise self.checkpoint_errors.popleft()
        return [{"shard": s, "checkpoint": c} for s, c in self.saved.items() if s == shard]

    async def get_cursor(self, logstore: str, shard: int, where: str) -> str:
        self.calls.append(("get_cursor", (shard, where)))
        return at(self.shard_data.get(shard, 0) if where == "end" else 0)

    async def list_shards(self, logstore: str) -> list[dict[str, Any]]:
        status = "readonly" if self.readonly else "readwrite"
        return [{"shardID": s, "status": status} for s in self.shard_data]

    async def cursor_time(self, logstore: str, shard: int, cursor: str) -> int:
        return 1_700_000_000

    async def pull(self, logstore: str, shard: int, cursor: str, count: int, **_: Any) -> Pulled:
        self.calls.append(("pull", (shard, cursor)))
        if self.pull_errors:
            raise self.pull_errors.popleft()
        start, end = cursors.decode(cursor), self.shard_data.get(shard, 0)
        n = max(0, min(count, end - start))
        data = log_groups(n) if n else b""
        return Pulled(data, n, at(start + n), len(data), self.readonly and n == 0, n, len(data))

    async def commit(
        self, logstore: str, group: str, consumer: str, shard: int, cursor: str, **_: Any
    ) -> None:
        self.calls.append(("commit", (shard, cursor)))
        error = self.commit_errors.popleft() if self.commit_errors else None
        if error is not None:
            raise error
        self.saved[shard] = cursor

    def commits(self, shard: int) -> list[str]:
        return [args[1] for name, args in self.calls if name == "commit" and args[0] == shard]

    # -- heartbeats ----------------------------------------------------------------------------

    async def heartbeat(
        self,
        logstore: str,
        group: str,
        consumer: str,
        held: list[int],
        timeout: float | None = None,
        allowed: Any = None,
    ) -> list[int]:
        self.calls.append(("heartbeat", (list(held), allowed)))
        if not self.heartbeats:
            self.on_exhausted()
            return list(self.last_answer)
        answer = self.heartbeats.popleft()
        if isinstance(answer, Exception):
            raise answer
        self.last_answer = answer
        return list(answer)

    async def list_groups(self, logstore: str) -> list[dict[str, Any]]:
        self.calls.append(("list_groups", None))
        if self.group_timeouts:
            self.group_timeout = self.group_timeouts.popleft()
        return [{"name": "other", "timeout": 60}, {"name": "g", "timeout": self.group_timeout}]

    def sent(self) -> list[tuple[list[int], Any]]:
        return [args for name, args in self.calls if name == "heartbeat"]
