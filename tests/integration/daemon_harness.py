"""Harness for the end-to-end tests of `loghubd run`: real daemon processes, real signals.

This module is process control; the other concerns have their own modules, re-exported here
so a test imports everything from one place:

- `Daemon` (here): writes a TOML config under its own directory and runs
  `python -m loghubd run -c FILE` (JSON logs to `daemon.log`), with short heartbeat, timeout
  and checkpoint intervals; `/status` and `/metrics` come from its ops listener on a port
  reserved for it (`PortReservation`: the daemon cannot tell us a port it chose itself). With
  `sources=[...]` it writes the `[[sources]]` form instead of `[source]` (see `source_entry`).
- `Producer` (here): `loghubd produce` as a background process (unique ids `<prefix><n>`).
- `Pool` (here): makes daemons and producers for one test and kills whatever is left.
- `harness_sls`: `Admin`, a synchronous face of `SlsClient` for set-up and inspection.
- `harness_output`: `read_ids`, `read_records`, `LineCounter`, `assert_delivered_exactly`.
- `harness_toml`: `dump_toml`, `source_entry`.
- `harness_processors`: the test processors (`record`, `flaky`, `stuck`), a plugin the
  daemons load through an entry point (`plugin_env`).
- `wait_until` (from `loghubd.testing`): polling.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from loghubd.testing import BackgroundProducer, PortReservation, free_port, wait_until
from loghubd.testing.process import log_events
from tests.integration.harness_output import (
    LineCounter,
    assert_delivered_exactly,
    count_lines,
    delivery_report,
    expected_ids,
    output_files,
    read_ids,
    read_records,
    shard_of,
    short,
)
from tests.integration.harness_processors import (
    REPO_ROOT,
    TEST_PROCESSORS,
    AsyncStuck,
    FlakyFactory,
    FlakyProcessor,
    RecordFactory,
    RecordProcessor,
    StuckFactory,
    StuckProcessor,
    SyncStuck,
    plugin_env,
)
from tests.integration.harness_sls import PROJECT, Admin, seq_of
from tests.integration.harness_toml import dump_toml, source_entry

# Short intervals so that rebalancing, time-outs and commits happen within seconds.
HEARTBEAT = 1.0
TIMEOUT = 4.0
CHECKPOINT = 1.0
FETCH_INTERVAL = 0.05

__all__ = [
    "CHECKPOINT",
    "FETCH_INTERVAL",
    "HEARTBEAT",
    "PROJECT",
    "REPO_ROOT",
    "TEST_PROCESSORS",
    "TIMEOUT",
    "Admin",
    "AsyncStuck",
    "Daemon",
    "FlakyFactory",
    "FlakyProcessor",
    "LineCounter",
    "Pool",
    "Producer",
    "RecordFactory",
    "RecordProcessor",
    "StuckFactory",
    "StuckProcessor",
    "SyncStuck",
    "assert_delivered_exactly",
    "count_lines",
    "counts",
    "delivery_report",
    "disjoint_cover",
    "dump_toml",
    "expected_ids",
    "free_port",
    "holdings",
    "output_files",
    "plugin_env",
    "read_ids",
    "read_records",
    "seq_of",
    "shard_of",
    "short",
    "source_entry",
    "wait_until",
]


class Daemon:
    """One real `loghubd run` process with its own directory, config, output and log."""

    def __init__(
        self,
        directory: Path,
        endpoint: str,
        logstore: str,
        group: str,
        name: str,
        *,
        project: str = PROJECT,
        processor: str = "jsonl",
        processor_options: Mapping[str, Any] | None = None,
        consumer: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        sources: list[dict[str, Any]] | None = None,
    ) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.group = group
        self.logstore = logstore
        self.output = self.dir / "out"
        self.dead_letter = self.dir / "dead-letter"
        self.config_path = self.dir / "loghubd.toml"
        self.log_path = self.dir / "daemon.log"
        # Kept bound (not listening) for the daemon's life, restarts included: a port only
        # picked with free_port could be taken before the daemon binds it.
        self._ops_reservation = PortReservation()
        self.ops_port = self._ops_reservation.port
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        options = (
            dict(processor_options)
            if processor_options is not None
            else ({"path": str(self.output)} if processor == "jsonl" else {})
        )
        consumer_table: dict[str, Any] = {
            "group": group,
            "name": name,
            "heartbeat_interval": HEARTBEAT,
            "timeout": TIMEOUT,
            "checkpoint_interval": CHECKPOINT,
            "fetch_interval": FETCH_INTERVAL,
            "idle_fetch_interval": FETCH_INTERVAL,  # no idle back-off: prompt, as tests expect
            "shutdown_grace": 10.0,
            "dead_letter_dir": str(self.dead_letter),
        }
        consumer_table.update(consumer or {})
        self.config: dict[str, Any] = {
            "source": {"endpoint": endpoint, "project": project, "logstore": logstore},
            "consumer": consumer_table,
            "processor": {"name": processor, processor: options},
            "ops": {"listen": f"127.0.0.1:{self.ops_port}"},
            "log": {"level": "info", "format": "json"},
        }
        # [[sources]]: [consumer] and [processor] above are the shared defaults; each entry
        # without a processor of its own writes jsonl to `out-<name>` (see `outputs`).
        self.outputs: dict[str, Path] = {}
        if sources is not None:
            del self.config["source"]
            entries = []
            for entry in sources:
                entry = dict(entry)
                if "processor" not in entry:
                    out = self.dir / f"out-{entry['name']}"
                    entry["processor"] = {"name": "jsonl", "jsonl": {"path": str(out)}}
                proc = entry["processor"]
                if proc.get("name") == "jsonl" and "path" in proc.get("jsonl", {}):
                    self.outputs[entry["name"]] = Path(proc["jsonl"]["path"])
                entries.append(entry)
            self.config = {"sources": entries, **self.config}

    # -- process control ---------------------------------------------------------------------

    def start(self) -> Daemon:
        self.config_path.write_text(dump_toml(self.config))
        env = {**os.environ, **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "loghubd", "run", "-c", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                env=env,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout: float = 30.0) -> int:
        """Exit code (a negative number for a signal), or AssertionError after `timeout`."""
        assert self.proc is not None, "not started"
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"daemon {self.name} still running after {timeout}s:\n{self.log_tail()}"
            ) from None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then the exit code."""
        if self.alive():
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.alive():
            self.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(10)

    # -- what it says ------------------------------------------------------------------------

    def _get(self, path: str, timeout: float = 2.0) -> bytes:
        url = f"http://127.0.0.1:{self.ops_port}{path}"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data: bytes = resp.read()
            return data

    def status(self) -> dict[str, Any]:
        """GET /status, with the first source's fields (`held`, what the heartbeat reports,
        per-shard `shards` ...) merged in at the top level for single-source tests."""
        doc: dict[str, Any] = json.loads(self._get("/status"))
        return {**doc["sources"][0], **doc}

    def held(self) -> frozenset[int]:
        return frozenset(self.status()["held"])

    def source_status(self, name: str) -> dict[str, Any]:
        """One source's entry of `/status` (`sources` list)."""
        for entry in self.status()["sources"]:
            if entry["name"] == name:
                result: dict[str, Any] = entry
                return result
        raise KeyError(name)

    def readiness(self) -> tuple[int, dict[str, Any]]:
        """GET /readyz: (HTTP status, body)."""
        try:
            return 200, json.loads(self._get("/readyz"))
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def metrics(self) -> str:
        """GET /metrics (Prometheus text)."""
        return self._get("/metrics").decode()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0 if none)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            metric, _, label_text = head.partition("{")
            if metric != name:
                continue
            if all(f'{k}="{v}"' in label_text for k, v in labels.items()):
                total += float(value)
        return total

    def wait_ready(self, timeout: float = 20.0) -> Daemon:
        """Until the ops listener answers and the first heartbeat went through."""

        def joined() -> bool:
            if not self.alive():
                raise AssertionError(
                    f"daemon {self.name} exited with {self.proc and self.proc.returncode}:\n"
                    f"{self.log_tail()}"
                )
            try:
                return bool(self.status().get("joined"))
            except (OSError, urllib.error.URLError, ValueError):
                return False

        wait_until(joined, timeout, lambda: f"{self.name} not joined:\n{self.log_tail()}")
        return self

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The daemon's JSON log lines (optionally only those whose `event` is `name`)."""
        return log_events(self.log_path, name)


class Producer(BackgroundProducer):
    """What `loghubd produce` writes, from a thread of the test process (the kit's
    `BackgroundProducer`: no process start per call); `wait()` returns its summary and
    checks that every log was written. The command itself is tested in test_cli_errors.py."""

    def __init__(
        self,
        endpoint: str,
        logstore: str,
        *,
        count: int,
        project: str = PROJECT,
        group_size: int = 200,
        start: int = 0,
        prefix: str = "",
        **options: Any,
    ) -> None:
        super().__init__(
            endpoint, project, logstore, count, group_size=group_size, start=start,
            prefix=prefix, **options,
        )  # fmt: skip
        self.prefix, self.count, self.first = prefix, count, start

    def wait(self, timeout: float = 60.0) -> dict[str, Any]:
        summary = super().wait(timeout)
        assert summary["written"] == self.count, summary
        return summary

    @property
    def ids(self) -> list[str]:
        return expected_ids(self.prefix, self.count, self.first)

    def kill(self) -> None:
        self.stop()


class Pool:
    """Daemons and producers of one test, all killed at teardown (the `daemon_pool` fixture)."""

    def __init__(self, directory: Path, endpoint: str) -> None:
        self.dir = directory
        self.endpoint = endpoint
        self.admin = Admin(endpoint)
        self.daemons: list[Daemon] = []
        self.producers: list[Producer] = []
        self.site = directory / "plugin-site"

    def daemon(
        self, logstore: str, group: str, name: str, *, start: bool = True, **kwargs: Any
    ) -> Daemon:
        if kwargs.get("processor", "jsonl") in TEST_PROCESSORS:
            kwargs["env"] = {**plugin_env(self.site), **kwargs.get("env", {})}
        d = Daemon(self.dir / f"daemon-{name}", self.endpoint, logstore, group, name, **kwargs)
        self.daemons.append(d)
        return d.start() if start else d

    def committed_to_end(self, logstore: str, group: str, shards: int) -> bool:
        """The group has a checkpoint on each of the logstore's `shards` shards, each at the
        shard's end: everything written so far is consumed and committed."""
        cps = self.admin.checkpoints(logstore, group)

        def at_end(shard: int, checkpoint: str) -> bool:
            end = self.admin.cursor(logstore, shard, "end")
            return bool(checkpoint) and seq_of(checkpoint) == seq_of(end)

        return len(cps) == shards and all(at_end(s, cp["checkpoint"]) for s, cp in cps.items())

    def produce(self, logstore: str, *, start: bool = True, **kwargs: Any) -> Producer:
        p = Producer(self.endpoint, logstore, **kwargs)
        self.producers.append(p)
        return p.start() if start else p

    def close(self) -> None:
        for p in self.producers:
            p.kill()
        for d in self.daemons:
            d.kill()


def holdings(daemons: Iterable[Daemon]) -> dict[str, frozenset[int]]:
    """name → held shards, for the daemons that are alive."""
    return {d.name: d.held() for d in daemons if d.alive()}


def counts(holding: Mapping[str, frozenset[int]]) -> list[int]:
    return sorted(len(s) for s in holding.values())


def disjoint_cover(holding: Mapping[str, frozenset[int]], shards: Iterable[int]) -> bool:
    """Every shard held by exactly one daemon."""
    every = [s for held in holding.values() for s in held]
    return sorted(every) == sorted(shards)
