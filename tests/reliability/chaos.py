"""Chaos runs: N real `loghubd run` daemons on an M-shard logstore while `loghubd produce`
writes uniquely numbered logs, with random `kill -9`, SIGTERM and SIGSTOP/SIGCONT of the
daemons, `kill -9` and restart of `loghubd serve`, and shard splits and merges.

`ChaosRun(ChaosConfig(...)).run()` returns a report dict; `problems(report)` lists every way
the run broke the delivery promise (empty = passed). The short CI test
(tests/reliability/test_chaos.py) and the long run (bench/chaos_long.py) are this code with
different numbers.

How "written" is known. The producer runs `loghubd produce` in chunks (`--start/--count`);
a chunk that exits 0 had every PutLogs answered 200: its ids are *acked*. A chunk that fails
(the server was down longer than the client's deadline) is *uncertain*: some of its puts may
be stored, some not; those ids are counted apart, never as missing. After the run every shard
is read back from the server (begin to end), which gives the *stored* ids with their shard and
position, including copies stored twice because a put was retried after the server had stored
it but died before answering (write-side duplicates, reported apart).

The checks: every acked id is stored (a 200 is durable across `kill -9` of the server); every
stored id is delivered (0 missing); nothing is delivered that was never stored; and every
delivery beyond an id's stored copies (a duplicate) lies in an *un-committed interval of a
crashed daemon*: the id's shard was held by a daemon at the moment it was killed with
SIGKILL (or stopped with SIGSTOP past the group timeout), that daemon delivered the id, and
the id's position is at or after the shard's committed checkpoint at that moment. Per crash,
the duplicates it explains are bounded by what one checkpoint interval of the victim's
consumption plus one in-flight batch per held shard can amount to (`dup_bound`). SIGTERM,
server restarts, splits, merges and rebalancing must explain none.
"""

from __future__ import annotations

import json
import math
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from loghubd.protocol import cursor as cursors
from loghubd.testing import wait_until
from tests.integration.daemon_harness import (
    Daemon,
    LineCounter,
    Pool,
    read_records,
)
from tests.reliability.cluster import ClusterRun, retry

T = TypeVar("T")

LOGSTORE = "chaos"
GROUP = "chaos"
# What a daemon logs when it finds out it lost its shards (after SIGSTOP past the timeout).
LEASE = ("lease_expired", "heartbeat_rejoin", "lease_expired_batch_held", "shard_ownership_lost")


@dataclass
class ChaosConfig:
    workdir: Path
    daemons: int = 3
    shards: int = 8
    logs: int = 60_000
    rate: float = 1_500.0  # logs per second written (0: as fast as possible)
    chunk: int = 10_000  # logs per `loghubd produce` process
    group_size: int = 100  # logs per PutLogs
    kill9: int = 3
    sigterm: int = 2
    stop_long: int = 1  # SIGSTOP past the group timeout, then SIGCONT
    stop_short: int = 1  # SIGSTOP well within the lease, then SIGCONT
    server_restarts: int = 2
    splits: int = 1
    merges: int = 1
    seed: int = 1
    heartbeat: float = 1.0
    timeout: int = 6
    checkpoint: float = 1.0
    max_fetch_log_groups: int = 10  # small batches: a tight bound on in-flight work
    # Seconds the server stays dead. With the restart itself (~1 s) and up to a heartbeat
    # since the last one went through, the outage stays inside the lease (`timeout`): a
    # restarted server keeps every consumer's shards, so no daemon may lose its lease and
    # no duplicate may come of it. (An outage longer than the lease: see test_chaos.py.)
    server_down_min: float = 0.5
    server_down_max: float = 2.0
    restart_delay_max: float = 1.5  # seconds before a killed daemon's replacement starts
    drain_timeout: float = 120.0  # after the last write, for every shard to be committed
    progress: Callable[[str], None] | None = None  # running commentary (bench)

    def event_kinds(self) -> list[str]:
        return (
            ["kill9"] * self.kill9
            + ["sigterm"] * self.sigterm
            + ["stop_long"] * self.stop_long
            + ["stop_short"] * self.stop_short
            + ["server_restart"] * self.server_restarts
            + ["split"] * self.splits
            + ["merge"] * self.merges
        )


# -- the producer ---------------------------------------------------------------------------


class ChunkedProducer(threading.Thread):
    """`loghubd produce` one chunk after another until `target` logs were acked."""

    def __init__(
        self,
        directory: Path,
        endpoint: str,
        project: str,
        *,
        target: int,
        chunk: int,
        rate: float,
        group_size: int,
        prefix: str = "x",
    ) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.endpoint, self.project = endpoint, project
        self.target, self.chunk, self.rate, self.group_size = target, chunk, rate, group_size
        self.prefix = prefix
        self.acked: list[tuple[int, int]] = []  # (start, count)
        self.uncertain: list[dict[str, Any]] = []  # {start, count, code, error}
        self.next = 0
        self.acked_count = 0
        self.stopping = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while self.acked_count < self.target and not self.stopping.is_set():
                count = min(self.chunk, self.target - self.acked_count)
                self._one(self.next, count)
                self.next += count
        except BaseException as exc:
            self.error = exc

    def _one(self, start: int, count: int) -> None:
        out = self.dir / f"produce-{start}.out"
        args = [
            sys.executable, "-m", "loghubd", "produce",
            "--endpoint", self.endpoint, "--project", self.project, "--logstore", LOGSTORE,
            "--count", str(count), "--rate", str(self.rate), "--group-size",
            str(self.group_size), "--prefix", self.prefix, "--start", str(start),
        ]  # fmt: skip
        with open(out, "wb") as f:
            self.proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT)
        code = self.proc.wait()
        text = out.read_text(errors="replace")
        if code == 0:
            summary = json.loads(text.strip().splitlines()[-1])
            assert summary["written"] == count, summary
            self.acked.append((start, count))
            self.acked_count += count
        else:
            self.uncertain.append(
                {"start": start, "count": count, "code": code, "error": text[-500:]}
            )

    def ids(self, ranges: list[tuple[int, int]]) -> set[str]:
        return {f"{self.prefix}{n}" for start, count in ranges for n in range(start, start + count)}

    def kill(self) -> None:
        self.stopping.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()


# -- the run --------------------------------------------------------------------------------


@dataclass
class Event:
    kind: str
    t: float  # seconds since the start of production
    target: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


class ChaosRun(ClusterRun):
    def __init__(self, cfg: ChaosConfig) -> None:
        super().__init__(cfg.workdir, LOGSTORE, GROUP, cfg.progress)
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.slots: list[Daemon] = []
        self.incarnations: list[Daemon] = []
        self.generation = [0] * cfg.daemons
        self.events: list[Event] = []
        self.t0 = 0.0  # set when the scenario starts
        self.t0_wall = 0.0
        self.producer: ChunkedProducer | None = None
        self.unexpected_exits: list[dict[str, Any]] = []

    def now(self) -> float:
        return time.monotonic() - self.t0 if self.t0 else 0.0

    # -- set-up ------------------------------------------------------------------------------

    def _consumer_settings(self) -> dict[str, Any]:
        c = self.cfg
        return {
            "heartbeat_interval": c.heartbeat,
            "timeout": float(c.timeout),
            "checkpoint_interval": c.checkpoint,
            "max_fetch_log_groups": c.max_fetch_log_groups,
            "shutdown_grace": 10.0,
        }

    def _new_daemon(self, slot: int) -> Daemon:
        assert self.pool is not None
        self.generation[slot] += 1
        name = f"c{slot}g{self.generation[slot]}"
        d = self.pool.daemon(LOGSTORE, GROUP, name, consumer=self._consumer_settings())
        self.incarnations.append(d)
        if slot < len(self.slots):
            self.slots[slot] = d
        else:
            self.slots.append(d)
        return d

    def setup(self) -> None:
        self.server.start()
        self.pool = Pool(self.dir / "pool", self.server.endpoint)
        admin = self.pool.admin
        admin.create_logstore(LOGSTORE, self.cfg.shards)
        admin.create_group(LOGSTORE, GROUP, self.cfg.timeout, False)
        for slot in range(self.cfg.daemons):
            self._new_daemon(slot)
        for d in self.slots:
            d.wait_ready(30)

    # -- faults ------------------------------------------------------------------------------

    def _rate(self, d: Daemon, seconds: float = 1.0) -> float:
        """The daemon's delivery rate (lines/s of its jsonl output) over `seconds`."""
        lines = LineCounter([d.output])
        n0, t0 = lines.count(), time.monotonic()
        time.sleep(seconds)
        return (lines.count() - n0) / (time.monotonic() - t0)

    def _held(self, d: Daemon) -> list[int]:
        try:
            return sorted(d.held())
        except (OSError, ValueError):
            return []

    def _pick_daemon(self) -> int:
        alive = [i for i, d in enumerate(self.slots) if d.alive()]
        holding = [i for i in alive if self._held(self.slots[i])]
        return self.rng.choice(holding or alive)

    def _crash(self, kind: str) -> Event:
        """kill -9, or SIGSTOP past the timeout (crash-like) or within the lease."""
        slot = self._pick_daemon()
        d = self.slots[slot]
        rate = self._rate(d)
        held = self._held(d)
        sig = signal.SIGKILL if kind == "kill9" else signal.SIGSTOP
        d.signal(sig)
        t = self.now()
        time.sleep(0.3)  # a commit already on the wire lands; the victim sends no more
        at = self.positions()
        ev = Event(kind, t, d.name, {"held": held, "rate": round(rate, 1)})
        # The victim's un-committed interval per held shard: [checkpoint, end of the data then)
        ev.detail["interval"] = {s: at.get(s, (-1, 0)) for s in held}
        if kind == "kill9":
            d.wait(10)
            time.sleep(self.rng.uniform(0, self.cfg.restart_delay_max))
            self._new_daemon(slot).wait_ready(30)
            ev.detail["replacement"] = self.slots[slot].name
        else:
            if kind == "stop_long":
                paused = self.cfg.timeout + 2 * self.cfg.heartbeat + 0.5
            else:
                paused = 0.4 * self.cfg.timeout
            time.sleep(max(0.0, paused - 0.3))
            d.signal(signal.SIGCONT)
            ev.detail["paused_s"] = round(paused, 2)
        return ev

    def _sigterm(self) -> Event:
        slot = self._pick_daemon()
        d = self.slots[slot]
        held = self._held(d)
        t = self.now()
        d.signal(signal.SIGTERM)
        started = time.monotonic()
        code = d.wait(60)
        ev = Event("sigterm", t, d.name, {"held": held, "exit_code": code})
        ev.detail["exit_s"] = round(time.monotonic() - started, 2)
        self._new_daemon(slot).wait_ready(30)
        ev.detail["replacement"] = self.slots[slot].name
        return ev

    def _server_restart(self) -> Event:
        t = self.now()
        self.server.kill(signal.SIGKILL)
        down = self.rng.uniform(self.cfg.server_down_min, self.cfg.server_down_max)
        time.sleep(down)
        self.server.start(timeout=30)
        return Event("server_restart", t, "loghubd serve", {"down_s": round(down, 2)})

    def _split(self) -> Event:
        assert self.pool is not None
        admin = self.pool.admin
        shards = retry(lambda: admin.list_shards(LOGSTORE), what="ListShards")
        rw = [s for s in shards if s["status"] == "readwrite"]
        s = self.rng.choice(rw)
        begin, end = int(s["inclusiveBeginKey"], 16), int(s["exclusiveEndKey"], 16)
        key = f"{(begin + end) // 2:032x}"
        t = self.now()
        result = admin.split(LOGSTORE, int(s["shardID"]), key)
        new = [r["shardID"] for r in result[1:]]
        return Event("split", t, f"shard {s['shardID']}", {"key": key, "children": new})

    def _merge(self) -> Event:
        assert self.pool is not None
        admin = self.pool.admin
        shards = retry(lambda: admin.list_shards(LOGSTORE), what="ListShards")
        rw = [s for s in shards if s["status"] == "readwrite"]
        begins = {s["inclusiveBeginKey"] for s in rw}
        left = [s for s in rw if s["exclusiveEndKey"] in begins]
        s = self.rng.choice(left)
        t = self.now()
        result = admin.merge(LOGSTORE, int(s["shardID"]))
        return Event(
            "merge",
            t,
            f"shard {s['shardID']}",
            {"merged": [r["shardID"] for r in result[1:]], "child": result[0]["shardID"]},
        )

    def _apply(self, kind: str) -> Event:
        if kind in ("kill9", "stop_long", "stop_short"):
            return self._crash(kind)
        if kind == "sigterm":
            return self._sigterm()
        if kind == "server_restart":
            return self._server_restart()
        if kind == "split":
            return self._split()
        assert kind == "merge"
        return self._merge()

    def _check_alive(self) -> None:
        for d in self.slots:
            if not d.alive() and not any(u["daemon"] == d.name for u in self.unexpected_exits):
                code = d.proc.returncode if d.proc else None
                self.unexpected_exits.append(
                    {"daemon": d.name, "code": code, "t": round(self.now(), 1), "log": d.log_tail()}
                )
                self.say(f"daemon {d.name} exited by itself with {code}; replacing it")
                slot = self.slots.index(d)
                self._new_daemon(slot).wait_ready(30)

    # -- the scenario ------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        try:
            self.setup()
            setup_s = time.monotonic() - started
            self.say(f"set up: server, {self.cfg.daemons} daemons, {self.cfg.shards} shards")
            report = self._scenario()
            report["seconds"]["setup"] = round(setup_s, 1)
            report["seconds"]["total"] = round(time.monotonic() - started, 1)
            return report
        finally:
            self.close()

    def _scenario(self) -> dict[str, Any]:
        cfg = self.cfg
        assert self.pool is not None
        kinds = cfg.event_kinds()
        self.rng.shuffle(kinds)
        produce_s = cfg.logs / cfg.rate if cfg.rate else 30.0
        # Spread the faults over the first 90 % of the writing, so that the last one still
        # meets traffic; they run one after another (each waits for its own effect).
        spacing = 0.9 * produce_s / (len(kinds) + 1)
        self.producer = ChunkedProducer(
            self.dir / "producer",
            self.server.endpoint,
            self.pool.admin.project,
            target=cfg.logs,
            chunk=cfg.chunk,
            rate=cfg.rate,
            group_size=cfg.group_size,
        )
        self.t0 = time.monotonic()
        self.t0_wall = time.time()
        self.producer.start()
        for i, kind in enumerate(kinds):
            due = (i + 1) * spacing
            if self.now() < due:
                time.sleep(due - self.now())
            self._check_alive()
            ev = self._apply(kind)
            self.events.append(ev)
            self.say(f"{ev.kind} {ev.target} {ev.detail}")
        faults_done = self.now()
        while self.producer.is_alive():
            self._check_alive()
            self.producer.join(1.0)
        if self.producer.error is not None:
            raise self.producer.error
        written_done = self.now()
        self.say(f"writing done: {self.producer.acked_count} acked")
        self._check_alive()
        wait_until(
            self.all_committed,
            cfg.drain_timeout,
            lambda: f"not everything committed: {self._group_summary()}",
            interval=0.5,
        )
        drained = self.now()
        self.say("every shard committed to its end")
        exits = {}
        for d in self.slots:
            if d.alive():
                d.signal(signal.SIGTERM)
        for d in self.slots:
            if d.proc is not None and d.proc.returncode is None:
                exits[d.name] = d.wait(60)
            elif d.proc is not None:
                exits[d.name] = d.proc.returncode
        stopped = self.now()
        report = self.analyse()
        report["final_exit_codes"] = exits
        report["seconds"] = {
            "faults": round(faults_done, 1),
            "writing": round(written_done, 1),
            "drain_after_writing": round(drained - written_done, 1),
            "stop": round(stopped - drained, 1),
            "analysis": round(self.now() - stopped, 1),
        }
        return report

    def _group_summary(self) -> str:
        assert self.pool is not None
        try:
            status = self.pool.admin.group_status(LOGSTORE, GROUP)
        except Exception as exc:
            return repr(exc)
        rows = []
        for s in status["shards"]:
            cp = cursors.to_seq(s["shard"], s["checkpoint"]) if s["checkpoint"] else None
            rows.append(f"{s['shard']}:{s['state']}:{s['owner']}:{cp}/{s['endCursorSeq']}")
        return f"consumers {status['consumers']}; " + " ".join(rows)

    # -- analysis ----------------------------------------------------------------------------

    def _lease_losses(self) -> list[dict[str, Any]]:
        """Every time a daemon found its lease gone (`lease_expired`: heartbeats failed for
        longer than the timeout; `heartbeat_rejoin`: the service no longer knew it), with the
        SIGSTOP past the timeout that explains it, if any."""
        out = []
        for d in self.incarnations:
            for ev in d.events():
                if ev.get("event") not in ("lease_expired", "heartbeat_rejoin"):
                    continue
                wall = datetime.fromisoformat(ev["timestamp"].replace("Z", "+00:00"))
                t = wall.timestamp() - self.t0_wall
                stops = [
                    e
                    for e in self.events
                    if e.kind == "stop_long"
                    and e.target == d.name
                    and e.t <= t <= e.t + e.detail["paused_s"] + 2 * self.cfg.timeout
                ]
                out.append(
                    {
                        "daemon": d.name,
                        "event": ev["event"],
                        "t": round(t, 1),
                        "explained_by": f"stop_long at {stops[0].t:.1f}s"
                        if stops
                        else self._stacked_silence(d.name, t),
                    }
                )
        return out

    def _stacked_silence(self, daemon: str, t: float) -> str:
        """A short SIGSTOP and a server restart each stay inside the lease, but one right
        after the other add up: the daemon cannot heartbeat while stopped, and then not while
        the server is down. Such a lease loss is explained by the two faults together."""
        timeout = self.cfg.timeout
        for stop in self.events:
            if stop.kind != "stop_short" or stop.target != daemon:
                continue
            silent_until = stop.t + stop.detail["paused_s"]
            for restart in self.events:
                if (
                    restart.kind == "server_restart"
                    and stop.t <= restart.t <= silent_until + timeout
                    and stop.t <= t <= restart.t + restart.detail["down_s"] + 2 * timeout
                ):
                    return f"stop_short at {stop.t:.1f}s + server_restart at {restart.t:.1f}s"
        return ""

    def analyse(self) -> dict[str, Any]:
        cfg = self.cfg
        assert self.producer is not None
        acked = self.producer.ids(self.producer.acked)
        uncertain = self.producer.ids([(u["start"], u["count"]) for u in self.producer.uncertain])
        stored = self.stored()
        # (id, shard) → [incarnation that delivered it, once per delivery]
        deliveries: dict[tuple[str, int], list[str]] = defaultdict(list)
        lines = 0
        # Only an incarnation killed with kill -9 may leave part of a line at the end of a file
        # (read_records): it has a directory of its own, which no replacement writes to.
        killed = {e.target for e in self.events if e.kind == "kill9"}
        for d in self.incarnations:
            for shard, rec in read_records([d.output], torn_tail_ok=d.name in killed):
                deliveries[(str(rec["id"]), shard)].append(d.name)
                lines += 1
        delivered_ids = {i for i, _s in deliveries}
        stored_ids = set(stored)
        stored_per_shard: dict[tuple[str, int], list[int]] = defaultdict(list)
        for ident, copies in stored.items():
            for shard, pos in copies:
                stored_per_shard[(ident, shard)].append(pos)

        crashes = [e for e in self.events if e.kind in ("kill9", "stop_long")]
        per_event: Counter[int] = Counter()
        unattributed: list[dict[str, Any]] = []
        extra_total = 0
        duplicated_ids: set[str] = set()
        for (ident, shard), who in deliveries.items():
            extra = len(who) - len(stored_per_shard.get((ident, shard), []))
            if extra <= 0:
                continue
            extra_total += extra
            duplicated_ids.add(ident)
            positions = stored_per_shard.get((ident, shard), [])
            matching = [
                i
                for i, e in enumerate(crashes)
                if e.target in who
                and shard in e.detail["held"]
                and any(_inside(p, e.detail["interval"][shard]) for p in positions)
            ]
            for i in matching[:extra]:
                per_event[i] += 1
            if len(matching) < extra:
                unattributed.append(
                    {"id": ident, "shard": shard, "positions": positions, "delivered_by": who}
                )
        crash_rows = []
        for i, e in enumerate(crashes):
            bound = dup_bound(
                e.detail["rate"],
                cfg.checkpoint,
                len(e.detail["held"]),
                cfg.max_fetch_log_groups * cfg.group_size,
            )
            victim = next(d for d in self.incarnations if d.name == e.target)
            noticed = sorted({ev["event"] for ev in victim.events() if ev.get("event") in LEASE})
            crash_rows.append(
                {
                    "kind": e.kind,
                    "lease_events": noticed,
                    "t": round(e.t, 1),
                    "daemon": e.target,
                    "held": e.detail["held"],
                    "rate": e.detail["rate"],
                    "duplicates": per_event[i],
                    "bound": bound,
                }
            )
        lease_losses = self._lease_losses()
        counts = Counter(e.kind for e in self.events)
        write_dups = {i: len(c) for i, c in stored.items() if len(c) > 1}
        return {
            "config": {
                k: (str(v) if isinstance(v, Path) else v)
                for k, v in asdict(cfg).items()
                if k != "progress"
            },
            "events": [
                {"kind": e.kind, "t": round(e.t, 2), "target": e.target, **e.detail}
                for e in self.events
            ],
            "event_counts": dict(counts),
            "written_acked": len(acked),
            "uncertain": len(uncertain),
            "uncertain_stored": len(uncertain & stored_ids),
            "uncertain_chunks": self.producer.uncertain,
            "stored_copies": sum(len(c) for c in stored.values()),
            "stored_unique": len(stored_ids),
            "write_side_duplicates": len(write_dups),
            "delivered_lines": lines,
            "delivered_unique": len(delivered_ids),
            **_counted("lost_acked", acked - stored_ids),
            **_counted("missing", stored_ids - delivered_ids),
            **_counted("unexpected", delivered_ids - stored_ids),
            "duplicates": extra_total,
            "duplicated_ids": len(duplicated_ids),
            "duplicates_attributed": extra_total - len(unattributed),
            "unattributed_duplicates": unattributed[:50],
            "unattributed_count": len(unattributed),
            "crashes": crash_rows,
            "sigterm_exit_codes": [
                e.detail["exit_code"] for e in self.events if e.kind == "sigterm"
            ],
            "unexpected_exits": self.unexpected_exits,
            "lease_losses": lease_losses,
            "unexplained_lease_losses": [x for x in lease_losses if not x["explained_by"]],
            "incarnations": len(self.incarnations),
        }


def _inside(position: int, interval: tuple[int, int]) -> bool:
    committed, end = interval
    return committed <= position < end


def _counted(key: str, ids: set[str]) -> dict[str, Any]:
    return {key: len(ids), f"{key}_sample": sorted(ids)[:100]}


def dup_bound(rate: float, checkpoint: float, held: int, batch_logs: int) -> int:
    """What one crash may re-deliver: the victim's un-committed work, i.e. up to one
    checkpoint interval of its consumption (doubled: a commit takes time, and the rate is
    sampled over one second), plus the batch in hand on every shard it held."""
    return math.ceil(2 * rate * checkpoint + held * batch_logs + 100)


def problems(report: dict[str, Any]) -> list[str]:
    """Every way the run broke the delivery promise; empty when it passed."""
    out = []
    for key, what in (
        ("lost_acked", "acked logs not stored"),
        ("missing", "stored logs never delivered"),
        ("unexpected", "unknown ids delivered"),
    ):
        if report[key]:
            out.append(f"{report[key]} {what}: {report[key + '_sample'][:10]}")
    if report["unattributed_count"]:
        out.append(
            f"{report['unattributed_count']} duplicates outside every crashed daemon's "
            f"un-committed interval: {report['unattributed_duplicates'][:5]}"
        )
    for row in report["crashes"]:
        if row["duplicates"] > row["bound"]:
            out.append(f"crash of {row['daemon']} at {row['t']}s: {row['duplicates']} > {row}")
    bad_terms = [c for c in report["sigterm_exit_codes"] if c != 0]
    if bad_terms:
        out.append(f"SIGTERM exit codes {report['sigterm_exit_codes']}")
    bad_final = {k: v for k, v in report["final_exit_codes"].items() if v != 0}
    if bad_final:
        out.append(f"final SIGTERM exit codes {bad_final}")
    if report["unexplained_lease_losses"]:
        out.append(
            "daemons lost their lease with no SIGSTOP to explain it: "
            f"{report['unexplained_lease_losses'][:5]}"
        )
    if report["unexpected_exits"]:
        out.append(f"daemons exited by themselves: {report['unexpected_exits']}")
    return out


def summary(report: dict[str, Any]) -> str:
    """A few lines for humans (bench output, assertion messages)."""
    keys = [
        "written_acked", "uncertain", "uncertain_stored", "stored_copies", "stored_unique",
        "write_side_duplicates", "delivered_lines", "delivered_unique", "duplicates",
        "duplicated_ids", "duplicates_attributed", "unattributed_count", "incarnations",
    ]  # fmt: skip
    head = {k: report[k] for k in keys}
    head["missing"] = report["missing"]
    head["lost_acked"] = report["lost_acked"]
    head["unexpected"] = report["unexpected"]
    lines = [json.dumps(head), json.dumps(report["event_counts"]), json.dumps(report["seconds"])]
    for row in report["crashes"]:
        lines.append(
            f"  {row['kind']:9} {row['daemon']:8} t={row['t']:6.1f}s held={len(row['held']):2} "
            f"rate={row['rate']:8.0f}/s dups={row['duplicates']:6} bound={row['bound']}"
        )
    return "\n".join(lines)
