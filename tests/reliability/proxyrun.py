"""Daemons behind the fault proxy: `loghubd run` processes whose `source.endpoint` is a
`FaultProxy` in front of `loghubd serve`, while `loghubd produce` writes straight to the
server. `ProxyRun(ProxyRunConfig(...)).run()` returns a report; `problems(report)` lists what
broke. The CI test (tests/reliability/test_faultproxy.py) and the long run
(bench/faultproxy_long.py) are this code with different numbers.

Phases:

1. **baseline**: the daemons join and balance; logs flow.
2. **faults**: every request is held back 0..`delay` seconds, `drop` of the connections and
   requests are dropped and `reset` of the responses are cut in half and reset, for
   `fault_seconds`. The lease (the group timeout) is longer than any delay, so the daemons
   must ride it out by retrying: no shard may change hands (holdings are sampled every half
   second from each daemon's /status and from the coordinator), no lease may be lost, and
   logs keep being delivered.
3. **refused** for `refuse_seconds` (less than the group timeout): every connection is closed
   at once, the fast way of being unreachable. CPU under 5 % of a core per daemon, no shard
   changes hands, delivery resumes afterwards (how soon is reported).
4. **black-hole** for `blackhole_seconds` (longer than the group timeout): connections are
   accepted and never answered. The daemons' CPU over the window (utime+stime from
   /proc/<pid>/stat) must stay under 5 % of a core: retries back off, nothing spins. Their
   leases run out and the server releases the shards.
5. **recovery**: the path returns. Within one heartbeat interval (plus slack) every shard must
   be held again and delivery must resume, without help.
6. the writing ends, every shard is committed to its end, the daemons stop (SIGTERM, exit
   0), and the output is compared with what was stored: 0 missing; duplicates only where the
   black-hole cost the daemons their lease (positions at or after the checkpoint the shard
   had when the black-hole began).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loghubd.testing import wait_until
from tests.integration.daemon_harness import (
    Daemon,
    LineCounter,
    Pool,
    Producer,
    counts,
    disjoint_cover,
    holdings,
    read_records,
)
from tests.reliability.cluster import ClusterRun
from tests.reliability.faultproxy import FaultProxy

LOGSTORE = "proxied"
GROUP = "proxied"
CLK_TCK = os.sysconf("SC_CLK_TCK")
LEASE_EVENTS = ("lease_expired", "heartbeat_rejoin", "shard_ownership_lost")


@dataclass
class ProxyRunConfig:
    workdir: Path
    daemons: int = 2
    shards: int = 4
    rate: float = 1_000.0  # logs per second, written straight to the server
    group_size: int = 100
    heartbeat: float = 2.0
    timeout: int = 10
    checkpoint: float = 1.0
    baseline_seconds: float = 3.0
    fault_seconds: float = 20.0
    delay: float = 2.0
    drop: float = 0.05
    reset: float = 0.02
    settle_seconds: float = 3.0
    refuse_seconds: float = 6.0  # every connection dropped at once; less than the lease
    blackhole_seconds: float = 15.0
    tail_seconds: float = 5.0  # writing goes on this long after the recovery
    seed: int = 7
    cpu_limit: float = 0.05  # of one core, per daemon, over the black-hole
    recovery_slack: float = 1.5  # seconds allowed on top of one heartbeat interval

    def planned_seconds(self) -> float:
        return (
            self.baseline_seconds
            + self.fault_seconds
            + 2 * self.settle_seconds
            + self.refuse_seconds
            + self.blackhole_seconds
            + 2 * self.heartbeat
            + self.tail_seconds
        )


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class ProxyRun(ClusterRun):
    def __init__(self, cfg: ProxyRunConfig, progress: Any = None) -> None:
        super().__init__(cfg.workdir, LOGSTORE, GROUP, progress)
        self.cfg = cfg
        self.proxy: FaultProxy | None = None
        self.daemons: list[Daemon] = []
        self.producer: Producer | None = None

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        super().close()

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:
            self.close()

    # -- helpers -----------------------------------------------------------------------------

    def _owners(self) -> dict[int, str]:
        return self.admin.owners(LOGSTORE, GROUP)

    def _lease_events(self) -> dict[str, int]:
        return {
            d.name: sum(1 for e in d.events() if e.get("event") in LEASE_EVENTS)
            for d in self.daemons
        }

    def _safe_holdings(self) -> dict[str, frozenset[int]] | None:
        try:
            return holdings(self.daemons)
        except (OSError, ValueError):
            return None

    # -- the scenario ------------------------------------------------------------------------

    def _run(self) -> dict[str, Any]:
        cfg = self.cfg
        all_shards = frozenset(range(cfg.shards))
        self.server.start()
        self.proxy = FaultProxy(self.server.port, seed=cfg.seed).start()
        self.admin.create_logstore(LOGSTORE, cfg.shards)
        self.admin.create_group(LOGSTORE, GROUP, cfg.timeout, False)
        self.pool = Pool(self.dir / "pool", self.proxy.endpoint)
        consumer = {
            "heartbeat_interval": cfg.heartbeat,
            "timeout": float(cfg.timeout),
            "checkpoint_interval": cfg.checkpoint,
        }
        self.daemons = [
            self.pool.daemon(LOGSTORE, GROUP, f"p{i}", consumer=consumer)
            for i in range(cfg.daemons)
        ]
        for d in self.daemons:
            d.wait_ready(30)
        want = sorted(
            [cfg.shards // cfg.daemons + (1 if i < cfg.shards % cfg.daemons else 0)
             for i in range(cfg.daemons)]
        )  # fmt: skip
        wait_until(
            lambda: (
                (h := self._safe_holdings()) is not None
                and counts(h) == want
                and disjoint_cover(h, all_shards)
            ),
            6 * cfg.heartbeat + 5,
            lambda: f"not balanced: {self._safe_holdings()}",
            interval=0.1,
        )
        count = int(cfg.rate * (cfg.planned_seconds() + 5))
        self.producer = Producer(
            self.server.endpoint,
            LOGSTORE,
            count=count,
            rate=cfg.rate,
            group_size=cfg.group_size,
            prefix="p",
        ).start()
        lines = LineCounter(d.output for d in self.daemons)
        report: dict[str, Any] = {
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()}
        }
        report["written"] = count

        # 1. baseline
        self.say("baseline")
        time.sleep(cfg.baseline_seconds)
        wait_until(lambda: lines.count() > 0, 20, "nothing delivered in the baseline")

        # 2. faults while the lease holds
        before = self._safe_holdings()
        owners_before = self._owners()
        leases_before = self._lease_events()
        n0 = lines.count()
        self.proxy.set_delay(cfg.delay)
        self.proxy.set_drop_rate(cfg.drop)
        self.proxy.reset_mid_response(cfg.reset)
        self.say(f"faults: delay <= {cfg.delay}s, drop {cfg.drop:.0%}, reset {cfg.reset:.0%}")
        changes: list[dict[str, Any]] = []
        owner_changes: list[dict[str, Any]] = []
        samples = 0
        end = time.monotonic() + cfg.fault_seconds
        next_owner_check = 0.0
        while time.monotonic() < end:
            held = self._safe_holdings()
            samples += 1
            if held is not None and held != before:
                changes.append({"t": round(time.monotonic() - self.t0, 1), "held": str(held)})
            if time.monotonic() >= next_owner_check:
                next_owner_check = time.monotonic() + 1.0
                owners = self._owners()
                if owners != owners_before:
                    owner_changes.append(
                        {"t": round(time.monotonic() - self.t0, 1), "owners": owners}
                    )
            time.sleep(0.5)
        delivered_in_faults = lines.count() - n0
        fault_stats = self.proxy.stats()
        self.proxy.clear()
        report["faults"] = {
            "seconds": cfg.fault_seconds,
            "holding_samples": samples,
            "holding_changes": changes,
            "owner_changes": owner_changes,
            "lease_events": {
                k: v - leases_before.get(k, 0) for k, v in self._lease_events().items()
            },
            "delivered": delivered_in_faults,
            "proxy": fault_stats,
        }
        self.say(f"faults over: {report['faults']}")

        # 3. refused: every connection dropped at once, for less than the lease
        time.sleep(cfg.settle_seconds)
        report["refused"] = self._refused(lines)
        self.say(f"refused over: {report['refused']}")

        # 4. black-hole
        time.sleep(cfg.settle_seconds)
        at_blackhole = self.positions()
        cpu0 = {d.name: cpu_seconds(d.pid) for d in self.daemons}
        connections0 = self.proxy.stats()["blackholed_connections"]
        t_bh = time.monotonic()
        self.proxy.blackhole(True)
        self.say(f"black-hole for {cfg.blackhole_seconds}s")
        while time.monotonic() - t_bh < cfg.blackhole_seconds:
            time.sleep(1.0)
            self._safe_holdings()  # what an operator's monitoring would do meanwhile
        window = time.monotonic() - t_bh
        cpu = {d.name: (cpu_seconds(d.pid) - cpu0[d.name]) / window for d in self.daemons}
        held_at_end = self._safe_holdings()
        n_heal = lines.count()
        self.proxy.blackhole(False)
        t_heal = time.monotonic()
        self.say(f"path back; CPU over the black-hole {cpu}")

        # 5. recovery
        t_cover = t_progress = None
        deadline = t_heal + 6 * cfg.heartbeat + 20
        while time.monotonic() < deadline and (t_cover is None or t_progress is None):
            held = self._safe_holdings()
            now = time.monotonic()
            if t_cover is None and held is not None and disjoint_cover(held, all_shards):
                t_cover = now - t_heal
            if t_progress is None and lines.count() > n_heal:
                t_progress = now - t_heal
            time.sleep(0.05)
        t_balanced = None
        with contextlib.suppress(AssertionError):  # reported as None
            t_balanced = wait_until(
                lambda: (
                    (h := self._safe_holdings()) is not None
                    and counts(h) == want
                    and disjoint_cover(h, all_shards)
                    and time.monotonic() - t_heal
                ),
                6 * cfg.heartbeat + 10,
                "not balanced again",
                interval=0.1,
            )
        report["blackhole"] = {
            "seconds": round(window, 1),
            "cpu_fraction_of_a_core": {k: round(v, 4) for k, v in cpu.items()},
            "held_at_end": str(held_at_end),
            "connections_blackholed": self.proxy.stats()["blackholed_connections"] - connections0,
            "lease_events": self._lease_events(),
            "recovery_all_shards_held_s": None if t_cover is None else round(t_cover, 2),
            "recovery_delivery_resumed_s": None if t_progress is None else round(t_progress, 2),
            "recovery_balanced_s": None if t_balanced is None else round(t_balanced, 2),
        }
        self.say(f"recovered: {report['blackhole']}")

        # 6. the end
        self.producer.wait(cfg.planned_seconds() + 120)
        wait_until(self.all_committed, 120, "not everything committed", interval=0.5)
        exits = {}
        for d in self.daemons:
            d.signal(signal.SIGTERM)
        for d in self.daemons:
            exits[d.name] = d.wait(60)
        report["exit_codes"] = exits
        report["shutdown_unclean"] = {  # the daemon's own account of a non-zero exit
            d.name: [e.get("unflushed_shards") for e in d.events("shutdown_unclean")]
            for d in self.daemons
            if d.events("shutdown_unclean")
        }
        report.update(self._delivery(at_blackhole))
        return report

    def _refused(self, lines: LineCounter) -> dict[str, Any]:
        """The service unreachable the fast way (every connection closed at once) for less
        than the lease: the daemons must retry without spinning and keep their shards."""
        assert self.proxy is not None
        cfg = self.cfg
        before = self._safe_holdings()
        leases_before = self._lease_events()
        cpu0 = {d.name: cpu_seconds(d.pid) for d in self.daemons}
        dropped0 = self.proxy.stats()
        t0 = time.monotonic()
        self.proxy.set_drop_rate(1.0)
        changed = False
        while time.monotonic() - t0 < cfg.refuse_seconds:
            time.sleep(0.5)
            held = self._safe_holdings()
            changed = changed or (held is not None and held != before)
        window = time.monotonic() - t0
        cpu = {d.name: (cpu_seconds(d.pid) - cpu0[d.name]) / window for d in self.daemons}
        stats = self.proxy.stats()
        n_back = lines.count()
        self.proxy.set_drop_rate(0.0)
        t_back = time.monotonic()
        resumed = None
        while time.monotonic() - t_back < 60:
            if lines.count() > n_back:
                resumed = time.monotonic() - t_back
                break
            time.sleep(0.05)
        leases = self._lease_events()
        return {
            "seconds": round(window, 1),
            "cpu_fraction_of_a_core": {k: round(v, 4) for k, v in cpu.items()},
            "connections_dropped": (stats["dropped_connections"] + stats["dropped_requests"])
            - (dropped0["dropped_connections"] + dropped0["dropped_requests"]),
            "holdings_changed": changed or self._safe_holdings() != before,
            "lease_events": {k: v - leases_before.get(k, 0) for k, v in leases.items()},
            "delivery_resumed_s": None if resumed is None else round(resumed, 2),
        }

    def _delivery(self, at_blackhole: dict[int, tuple[int, int]]) -> dict[str, Any]:
        stored = self.stored()
        delivered: Counter[tuple[str, int]] = Counter()
        for d in self.daemons:
            for shard, rec in read_records([d.output]):
                delivered[(str(rec["id"]), shard)] += 1
        delivered_ids = {i for i, _s in delivered}
        duplicates = 0
        outside: list[dict[str, Any]] = []
        for (ident, shard), n in delivered.items():
            copies = [p for s, p in stored.get(ident, []) if s == shard]
            extra = n - len(copies)
            if extra <= 0:
                continue
            duplicates += extra
            cp, end = at_blackhole.get(shard, (-1, 0))
            if not any(cp <= p < end for p in copies):
                outside.append({"id": ident, "shard": shard, "positions": copies})
        missing = sorted(set(stored) - delivered_ids)
        return {
            "stored_unique": len(stored),
            "delivered_lines": sum(delivered.values()),
            "missing": len(missing),
            "missing_sample": missing[:20],
            "unexpected": len(delivered_ids - set(stored)),
            "duplicates": duplicates,
            "duplicates_outside_blackhole_interval": len(outside),
            "duplicates_outside_sample": outside[:10],
        }


def problems(report: dict[str, Any], cfg: ProxyRunConfig) -> list[str]:
    out = []
    f, b = report["faults"], report["blackhole"]
    if f["holding_changes"] or f["owner_changes"]:
        out.append(f"shards changed hands while the lease held: {f['holding_changes'][:5]} "
                   f"{f['owner_changes'][:5]}")  # fmt: skip
    if any(f["lease_events"].values()):
        out.append(f"a lease was lost during the delay/drop phase: {f['lease_events']}")
    if f["delivered"] <= 0:
        out.append("nothing was delivered during the delay/drop phase")
    for phase in ("refused", "blackhole"):
        cpu = report[phase]["cpu_fraction_of_a_core"]
        hot = {k: v for k, v in cpu.items() if v >= cfg.cpu_limit}
        if hot:
            out.append(f"{phase}: CPU while unreachable >= {cfg.cpu_limit:.0%} of a core: {hot}")
    r = report["refused"]
    if r["holdings_changed"] or any(r["lease_events"].values()):
        out.append(f"shards moved while the service refused connections within the lease: {r}")
    if r["delivery_resumed_s"] is None:
        out.append("delivery did not resume after the connections were accepted again")
    limit = cfg.heartbeat + cfg.recovery_slack
    for key in ("recovery_all_shards_held_s", "recovery_delivery_resumed_s"):
        if b[key] is None or b[key] > limit:
            out.append(f"{key} = {b[key]} (limit: one heartbeat + slack = {limit}s)")
    if report["missing"]:
        out.append(f"{report['missing']} logs missing: {report['missing_sample']}")
    if report["unexpected"]:
        out.append(f"{report['unexpected']} unknown ids delivered")
    if report["duplicates_outside_blackhole_interval"]:
        out.append(
            f"{report['duplicates_outside_blackhole_interval']} duplicates outside the "
            f"black-hole's un-committed interval: {report['duplicates_outside_sample']}"
        )
    bad = {k: v for k, v in report["exit_codes"].items() if v != 0}
    if bad:
        out.append(f"exit codes after SIGTERM: {bad}")
    return out
