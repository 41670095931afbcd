"""Harness for the end-to-end tests of `loghubd run`: real daemon processes, real signals.

- `Daemon`: writes a TOML config under its own directory and runs
  `python -m loghubd run -c FILE` (JSON logs to `daemon.log`), with short heartbeat, timeout
  and checkpoint intervals; `/status` and `/metrics` come from its ops listener on a port
  picked with `free_port` (the daemon cannot tell us a port it chose itself). With
  `sources=[...]` it writes the `[[sources]]` form instead of `[source]` (see `source_entry`).
- `Producer`: `loghubd produce` as a background process (unique ids `<prefix><n>`).
- `Admin`: a small synchronous face of `SlsClient` for set-up and inspection (logstores,
  split/merge, group status, checkpoints, cursors).
- `Pool`: makes daemons and producers for one test and kills whatever is left at teardown.
- `read_ids`, `read_records`, `LineCounter`, `assert_delivered_exactly`: reading the outputs.
- `wait_until` (from `loghubd.testing`, re-exported here): polling.

Test processors. This module is also a loghubd plugin (see `loghubd_register_processors`
below): `plugin_env()` writes a `.dist-info` with a `loghubd` entry point naming this module
into a directory that goes on the daemon's PYTHONPATH, so the daemon loads it through the
ordinary entry-point mechanism, with nothing installed into the virtualenv. Its processors:

- `record`: one JSON line per log (`shard`, `id`, `key`, `seq`) appended to ONE file shared
  by all shards of the daemon, so the file order is the order in which that daemon delivered.
- `flaky`: like `jsonl`, but the batch holding the log `fail_id` raises on its first
  `fail_times` attempts; every attempt at it is appended to `attempts` (time, cursors).
- `stuck`: like `jsonl`, but one shard's `process()` (sync or async) never returns.

Keep the module importable without pytest: the daemon process imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import anyio

from loghubd import hookimpl
from loghubd.models import Batch
from loghubd.plugins.api import ProcessorSpec, Tracker
from loghubd.processors.jsonl import JsonlProcessor
from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E
from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient
from loghubd.testing import free_port, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
PROJECT = "daemontest"

# Short intervals so that rebalancing, time-outs and commits happen within seconds.
HEARTBEAT = 1.0
TIMEOUT = 4.0
CHECKPOINT = 1.0
FETCH_INTERVAL = 0.05

T = TypeVar("T")


# -- the SLS side ---------------------------------------------------------------------------


class Admin:
    """Synchronous set-up and inspection calls against a `loghubd serve` (no retries hidden:
    each call is one `SlsClient` call with a fresh session)."""

    def __init__(self, endpoint: str, project: str = PROJECT) -> None:
        self.endpoint = endpoint
        self.project = project

    def _run(self, fn: Callable[[SlsClient], Awaitable[T]]) -> T:
        async def main() -> T:
            async with aiohttp.ClientSession() as session:
                client = SlsClient(
                    session,
                    self.endpoint,
                    self.project,
                    lambda: Credentials("", ""),
                    request_timeout=10.0,
                )
                return await fn(client)

        return anyio.run(main)

    def create_logstore(self, logstore: str, shards: int, ttl: int = 30) -> None:
        async def go(c: SlsClient) -> None:
            with contextlib.suppress(E.ProjectAlreadyExist):
                await c.create_project("daemon tests")
            await c.create_logstore(logstore, shards, ttl=ttl)

        self._run(go)

    def create_group(self, logstore: str, group: str, timeout: int, order: bool) -> None:
        self._run(lambda c: c.create_group(logstore, group, timeout, order))

    def list_shards(self, logstore: str) -> list[dict[str, Any]]:
        return self._run(lambda c: c.list_shards(logstore))

    def split(self, logstore: str, shard: int, key: str) -> list[dict[str, Any]]:
        return self._run(lambda c: c.split_shard(logstore, shard, key))

    def merge(self, logstore: str, shard: int) -> list[dict[str, Any]]:
        return self._run(lambda c: c.merge_shard(logstore, shard))

    def cursor(self, logstore: str, shard: int, where: str) -> str:
        return self._run(lambda c: c.get_cursor(logstore, shard, where))

    def group_status(self, logstore: str, group: str) -> dict[str, Any]:
        return self._run(lambda c: c.group_status(logstore, group))

    def checkpoints(self, logstore: str, group: str) -> dict[int, dict[str, Any]]:
        """shard → {checkpoint, consumer, updateTime} as the server holds them."""
        rows = self._run(lambda c: c.checkpoints(logstore, group))
        return {int(r["shard"]): r for r in rows}

    def owners(self, logstore: str, group: str) -> dict[int, str]:
        """shard → owning consumer, from the coordinator's status (loghubd extension)."""
        return {s["shard"]: s["owner"] for s in self.group_status(logstore, group)["shards"]}


def seq_of(cursor: str) -> int:
    """A loghubd cursor as a comparable integer ("" → -1: no checkpoint yet)."""
    return cursors.decode(cursor) if cursor else -1


# -- outputs --------------------------------------------------------------------------------


def output_files(dirs: Iterable[Path]) -> list[Path]:
    return sorted(p for d in dirs for p in Path(d).glob("shard-*.jsonl"))


def shard_of(path: Path) -> int:
    return int(path.stem.split("-", 1)[1])


def read_records(dirs: Iterable[Path]) -> list[tuple[int, dict[str, Any]]]:
    """(shard, record) for every line of every `shard-*.jsonl` under `dirs`."""
    out: list[tuple[int, dict[str, Any]]] = []
    for path in output_files(dirs):
        shard = shard_of(path)
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    out.append((shard, json.loads(line)))
    return out


def read_ids(dirs: Iterable[Path]) -> list[str]:
    """The `id` of every delivered log (duplicates kept), over `shard-*.jsonl` files."""
    return [str(r["id"]) for _shard, r in read_records(dirs)]


def count_lines(dirs: Iterable[Path]) -> int:
    total = 0
    for path in output_files(dirs):
        with open(path, "rb") as f:
            total += f.read().count(b"\n")
    return total


class LineCounter:
    """Counts the lines of the growing `shard-*.jsonl` files of some directories, reading
    only what was appended since the last call."""

    def __init__(self, dirs: Iterable[Path]) -> None:
        self.dirs = list(dirs)
        self._offsets: dict[Path, int] = {}
        self.per_file: dict[Path, int] = {}

    def count(self) -> int:
        for path in output_files(self.dirs):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            # Count complete lines only; a half-written tail is read again next time.
            end = data.rfind(b"\n") + 1
            self._offsets[path] = offset + end
            self.per_file[path] = self.per_file.get(path, 0) + data.count(b"\n", 0, end)
        return sum(self.per_file.values())

    def per_shard(self) -> dict[int, int]:
        self.count()
        out: dict[int, int] = {}
        for path, n in self.per_file.items():
            out[shard_of(path)] = out.get(shard_of(path), 0) + n
        return out


def expected_ids(prefix: str, count: int, start: int = 0) -> list[str]:
    return [f"{prefix}{n}" for n in range(start, start + count)]


def delivery_report(written: Iterable[str], delivered: Iterable[str]) -> dict[str, Any]:
    """missing (written, never delivered), duplicated (delivered more than once) and
    unexpected (delivered, never written) ids."""
    written_set = set(written)
    counts = Counter(delivered)
    return {
        "missing": sorted(written_set - counts.keys()),
        "duplicated": {i: n for i, n in counts.items() if n > 1},
        "unexpected": sorted(counts.keys() - written_set),
    }


def short(items: Any, n: int = 10) -> str:
    """A short rendering of a long list/dict for assertion messages."""
    seq = list(items.items()) if isinstance(items, Mapping) else list(items)
    return f"{len(seq)} item(s): {seq[:n]}{' ...' if len(seq) > n else ''}"


def assert_delivered_exactly(daemons: Iterable[Daemon], written: Iterable[str]) -> None:
    """The daemons' outputs together hold every id of `written` exactly once, and no other."""
    ds = list(daemons)
    report = delivery_report(written, read_ids([d.output for d in ds]))
    assert report == {"missing": [], "duplicated": {}, "unexpected": []}, (
        [d.name for d in ds],
        {k: short(v) for k, v in report.items()},
    )


# -- processes ------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _dump_table(lines: list[str], header: str, table: Mapping[str, Any], array: bool) -> None:
    lines.append(f"[[{header}]]" if array else f"[{header}]")
    subs = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    lines += [f"{k} = {_toml_value(v)}" for k, v in table.items() if k not in subs]
    for name, sub in subs.items():
        _dump_table(lines, f"{header}.{name}", sub, False)


def dump_toml(doc: Mapping[str, Mapping[str, Any] | list[Mapping[str, Any]]]) -> str:
    """Sections of scalars and nested sub-tables (`[processor.jsonl]`); a list of tables is
    an array of tables (`[[sources]]`, with `[sources.consumer]` etc. after each entry)."""
    lines: list[str] = []
    for section, table in doc.items():
        if isinstance(table, list):
            for entry in table:
                _dump_table(lines, section, entry, True)
        else:
            _dump_table(lines, section, table, False)
    return "\n".join(lines) + "\n"


def source_entry(
    name: str,
    endpoint: str,
    logstore: str,
    *,
    project: str = PROJECT,
    consumer: Mapping[str, Any] | None = None,
    processor: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One `[[sources]]` entry for `Daemon(sources=...)`: `consumer` keys go to its
    `[sources.consumer]`, `processor` (e.g. `{"name": "jsonl", "jsonl": {"path": ...}}`) to
    its `[sources.processor]`; without one, the daemon writes jsonl to `out-<name>`."""
    entry: dict[str, Any] = {
        "name": name,
        "endpoint": endpoint,
        "project": project,
        "logstore": logstore,
    }
    if consumer:
        entry["consumer"] = dict(consumer)
    if processor is not None:
        entry["processor"] = dict(processor)
    return entry


def plugin_env(site: Path) -> dict[str, str]:
    """Environment that makes a daemon load this module as a plugin through an entry point."""
    dist = site / "loghubd_daemon_tests-0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: loghubd-daemon-tests\nVersion: 0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[loghubd]\ndaemontests = tests.integration.daemon_harness\n"
    )
    path = [str(site), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in path if p)}


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
        self.ops_port = free_port()
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
        """GET /status: `held` (what the heartbeat reports) and per-shard `shards`."""
        result: dict[str, Any] = json.loads(self._get("/status"))
        return result

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
        out = []
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and (name is None or event.get("event") == name):
                out.append(event)
        return out


class Producer:
    """`loghubd produce` in the background; `wait()` returns its JSON summary."""

    def __init__(
        self,
        directory: Path,
        endpoint: str,
        logstore: str,
        *,
        count: int,
        project: str = PROJECT,
        rate: float = 0.0,
        group_size: int = 200,
        keys: int = 0,
        prefix: str = "",
        start: int = 0,
        create_shards: int = 0,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.prefix, self.count, self.first = prefix, count, start
        self.out_path = directory / f"produce-{prefix or 'ids'}-{start}.out"
        self.args = [
            sys.executable, "-m", "loghubd", "produce",
            "--endpoint", endpoint, "--project", project, "--logstore", logstore,
            "--count", str(count), "--rate", str(rate), "--group-size", str(group_size),
            "--keys", str(keys), "--prefix", prefix, "--start", str(start),
            "--create-shards", str(create_shards),
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Producer:
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT)
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float = 60.0) -> dict[str, Any]:
        assert self.proc is not None, "not started"
        code = self.proc.wait(timeout)
        text = self.out_path.read_text()
        assert code == 0, f"loghubd produce exited with {code}: {text}"
        summary: dict[str, Any] = json.loads(text.strip().splitlines()[-1])
        assert summary["written"] == self.count, summary
        return summary

    @property
    def ids(self) -> list[str]:
        return expected_ids(self.prefix, self.count, self.first)

    def kill(self) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)


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

    def produce(self, logstore: str, *, start: bool = True, **kwargs: Any) -> Producer:
        p = Producer(self.dir / "producers", self.endpoint, logstore, **kwargs)
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


# -- test processors (this module is a loghubd plugin in the daemon process) ----------------

_record_lock = threading.Lock()


class RecordProcessor:
    """Appends `{"n", "shard", "id", "key", "seq"}` per log to one file shared by the daemon's
    shards, under one lock, so the file order is this daemon's delivery order (`n` counts
    across the process)."""

    _fds: dict[str, int] = {}
    _n = 0

    def __init__(self, path: str) -> None:
        self.path = path

    def initialize(self, shard: int) -> None:
        with _record_lock:
            if self.path not in self._fds:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
                RecordProcessor._fds[self.path] = os.open(self.path, flags, 0o644)

    def process(self, batch: Batch, tracker: Tracker) -> None:
        with _record_lock:
            lines = []
            for r in batch.logs():
                RecordProcessor._n += 1
                rec = {"n": self._n, "shard": batch.shard, "id": r.get("id")}
                rec.update({"key": r.get("key"), "seq": r.get("seq")})
                lines.append(json.dumps(rec) + "\n")
            os.write(self._fds[self.path], "".join(lines).encode())
        tracker.save_checkpoint(persist=False)

    def flush(self) -> None:
        os.fsync(self._fds[self.path])

    def shutdown(self, tracker: Tracker) -> None:
        self.flush()


class FlakyProcessor(JsonlProcessor):
    """`jsonl`, except that the batch holding log `fail_id` fails `fail_times` times first."""

    def __init__(self, factory: FlakyFactory, shard: int) -> None:
        super().__init__(factory.directory, shard)
        self.factory = factory

    def process(self, batch: Batch, tracker: Tracker) -> None:
        if any(r.get("id") == self.factory.fail_id for r in batch.logs()):
            f = self.factory
            with f.lock:
                f.attempts += 1
                attempt = f.attempts
                note = {
                    "attempt": attempt,
                    "time": time.time(),
                    "shard": batch.shard,
                    "cursor": batch.cursor,
                    "next_cursor": batch.next_cursor,
                }
                with open(f.attempts_path, "a") as out:
                    out.write(json.dumps(note) + "\n")
            if attempt <= f.fail_times:
                raise RuntimeError(f"flaky: attempt {attempt} at {f.fail_id} fails on purpose")
        super().process(batch, tracker)


class FlakyFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.directory = Path(options["path"])
        self.fail_id = str(options["fail_id"])
        self.fail_times = int(options["fail_times"])
        self.attempts_path = Path(options["attempts"])
        self.attempts = 0
        self.lock = threading.Lock()

    def __call__(self, shard: int) -> FlakyProcessor:
        return FlakyProcessor(self, shard)


class RecordFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.path = str(options["path"])

    def __call__(self, shard: int) -> RecordProcessor:
        return RecordProcessor(self.path)


class StuckProcessor:
    """Writes `{"id"}` lines to `<path>/shard-<n>.jsonl` (as `jsonl` does), except that the
    shard `stuck_shard` gets stuck in its batch number `after + 1`: it creates
    `<path>/stuck-<n>` and never returns. `SyncStuck` blocks its worker thread for ever;
    `AsyncStuck` awaits for ever, shielded from cancellation."""

    def __init__(self, options: Mapping[str, Any], shard: int) -> None:
        self.dir = Path(options["path"])
        self.shard = shard
        self.stuck_shard = int(options["stuck_shard"])
        self.after = int(options["after"])
        self.batches = 0
        self.fd = -1

    def initialize(self, shard: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self.fd = os.open(self.dir / f"shard-{shard}.jsonl", flags, 0o644)

    def _gets_stuck(self) -> bool:
        self.batches += 1
        if self.shard == self.stuck_shard and self.batches > self.after:
            (self.dir / f"stuck-{self.shard}").touch()
            return True
        return False

    def _write(self, batch: Batch, tracker: Tracker) -> None:
        lines = "".join(json.dumps({"id": r.get("id")}) + "\n" for r in batch.logs())
        os.write(self.fd, lines.encode())
        tracker.save_checkpoint(persist=False)

    def flush(self) -> None:
        os.fsync(self.fd)

    def shutdown(self, tracker: Tracker) -> None:
        self.flush()


class SyncStuck(StuckProcessor):
    def process(self, batch: Batch, tracker: Tracker) -> None:
        if self._gets_stuck():
            threading.Event().wait()
        self._write(batch, tracker)


class AsyncStuck(StuckProcessor):
    async def process(self, batch: Batch, tracker: Tracker) -> None:
        if self._gets_stuck():
            with anyio.CancelScope(shield=True):
                await anyio.sleep_forever()
        self._write(batch, tracker)


class StuckFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        self.kind = {"sync": SyncStuck, "async": AsyncStuck}[str(options["kind"])]

    def __call__(self, shard: int) -> StuckProcessor:
        return self.kind(self.options, shard)


TEST_PROCESSORS = ("record", "flaky", "stuck")


@hookimpl
def loghubd_register_processors() -> Iterable[ProcessorSpec]:
    return [
        ProcessorSpec("record", RecordFactory, "tests: delivery order in one file"),
        ProcessorSpec("flaky", FlakyFactory, "tests: jsonl failing at one batch"),
        ProcessorSpec("stuck", StuckFactory, "tests: one shard's process() never returns"),
    ]
