"""The main job on the embedded default: a local `loghubd serve`, sample data, the daemon
consuming it with the jsonl processor, metrics visible. Runs for --seconds (default 30) while
logs keep arriving, printing what was written, delivered and is still behind every few
seconds, then shuts the daemon down gracefully and checks that every log written was
delivered exactly once. Ends with what to try next; with --keep the service and the daemon
stay up (until Ctrl-C) so those commands and URLs work. Everything lives under
.loghubd-demo/ in the checkout."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from loghubd.testing.process import PortReservation, ServerProcess

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / ".loghubd-demo"
TOTAL_BEFORE = 20_000


def loghubd(*args: str, **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "loghubd", *args], **kw)


def produce_args(endpoint: str, count: int, start: int, rate: float = 0.0) -> list[str]:
    return ["produce", "--endpoint", endpoint, "--project", "demo", "--logstore", "app",
            "--count", str(count), "--start", str(start), "--rate", str(rate),
            "--create-shards", "4", "--prefix", "log-"]  # fmt: skip


def metric_sum(url: str, name: str) -> float | None:
    """The sum of every series of `name` at `url` (None when nothing answers there)."""
    try:
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        return None
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    )


def metric_lines(url: str, prefixes: tuple[str, ...]) -> list[str]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return [line for line in text.splitlines() if line.startswith(prefixes)]


def show_progress(started: float, server_metrics: str, daemon_metrics: str) -> int:
    """Print one progress line; returns the logs delivered so far."""
    written = int(metric_sum(server_metrics, "loghubd_server_ingest_logs_total") or 0)
    delivered = metric_sum(daemon_metrics, "loghubd_consumed_logs_total")
    if delivered is None:
        print(f"  {time.monotonic() - started:5.0f}s  written {written:>8,}  (the daemon is "
              "starting)", flush=True)  # fmt: skip
        return 0
    print(f"  {time.monotonic() - started:5.0f}s  written {written:>8,}  delivered "
          f"{int(delivered):>8,}  behind {written - int(delivered):>6,}", flush=True)  # fmt: skip
    return int(delivered)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--seconds",
        type=float,
        default=30.0,
        help="how long to keep producing and consuming (default 30)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave the service and the daemon running until Ctrl-C"
    )
    args = parser.parse_args()
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir()
    server = ServerProcess(DEMO / "server-data", log_path=DEMO / "server.log").start()
    endpoint = server.endpoint
    ops = PortReservation()  # the daemon's ops port, nobody else's until the demo ends
    ops_port = ops.port
    out = DEMO / "output"
    config = DEMO / "loghubd.toml"
    config.write_text(
        f"""[source]
endpoint = "{endpoint}"
project = "demo"
logstore = "app"

[consumer]
group = "demo-group"
name = "demo-consumer"
heartbeat_interval = 2
checkpoint_interval = 2

[processor]
name = "jsonl"

[processor.jsonl]
path = "{out}"

[ops]
listen = "127.0.0.1:{ops_port}"
"""
    )
    print(f"loghubd serve is listening on {endpoint} (data in {DEMO / 'server-data'})")
    subprocess.run([sys.executable, "-m", "loghubd", *produce_args(endpoint, TOTAL_BEFORE, 0)],
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    print(f"wrote {TOTAL_BEFORE:,} sample logs into project 'demo', logstore 'app' (4 shards)")
    daemon_log = open(DEMO / "daemon.log", "wb")  # noqa: SIM115
    daemon = loghubd("run", "-c", str(config), stdout=daemon_log, stderr=subprocess.STDOUT)
    metrics_url = f"http://127.0.0.1:{ops_port}/metrics"
    server_metrics = f"{endpoint}/metrics"
    print(f"loghubd run is consuming: output in {out}/shard-*.jsonl, logs in {DEMO}/daemon.log")
    rate = 1000.0
    more = int(args.seconds * rate)
    total = TOTAL_BEFORE + more
    print(f"producing {more:,} more logs at {rate:.0f}/s for {args.seconds:.0f}s (every 3s: "
          "written to the service, delivered by the daemon, not yet delivered):")  # fmt: skip
    started = time.monotonic()
    code: int | None = None
    try:
        producer = loghubd(*produce_args(endpoint, more, TOTAL_BEFORE, rate),
                           stdout=subprocess.DEVNULL)  # fmt: skip
        while producer.poll() is None:
            time.sleep(3)
            show_progress(started, server_metrics, metrics_url)
        if producer.returncode != 0:
            print(f"loghubd produce exited with {producer.returncode}")
            return 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the daemon catches up
            delivered = show_progress(started, server_metrics, metrics_url)
            if delivered >= total:
                break
            time.sleep(1)
        print("\nmetrics excerpt:")
        for line in metric_lines(
            metrics_url,
            ("loghubd_consumed_logs_total", "loghubd_lag_log_groups", "loghubd_held_shards"),
        ):
            print("  " + line)
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(60)
        if not args.keep:
            server.stop()
    ids: list[str] = []
    for path in sorted(out.glob("shard-*.jsonl")):
        ids += [json.loads(line)["id"] for line in path.read_text().splitlines()]
    unique = set(ids)
    expected = {f"log-{i}" for i in range(total)}
    missing, dup = len(expected - unique), len(ids) - len(unique)
    print(
        f"\ndaemon exited with {code}; written {total:,}, delivered {len(unique):,}, "
        f"missing {missing}, duplicated {dup}"
    )
    ok = code == 0 and not missing and not dup
    if args.keep:  # the daemon again (it resumes at its checkpoints: nothing twice)
        daemon = loghubd("run", "-c", str(config), stdout=daemon_log, stderr=subprocess.STDOUT)
    try_next(config, out, endpoint, ops_port, keep=args.keep)
    if args.keep:
        print("\nthe service and the daemon keep running: Ctrl-C stops both", flush=True)
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM: as Ctrl-C
        try:
            while daemon.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
            server.stop()
    return 0 if ok else 1


def try_next(config: Path, out: Path, endpoint: str, ops_port: int, *, keep: bool) -> None:
    loghubd_bin = ROOT / ".venv" / "bin" / "loghubd"
    print("\nwhat to try next:")
    print(f"  the output        ls {out}; head -3 {out}/shard-0.jsonl")
    print(f"  the group         {loghubd_bin} status -c {config}")
    print(f"                    {loghubd_bin} group reset -c {config} --to begin   (a dry run)")
    print(f"  more logs         {loghubd_bin} produce --endpoint {endpoint} --project demo "
          "--logstore app --count 1000 --start 1000000")  # fmt: skip
    print(
        f"  the daemon        http://127.0.0.1:{ops_port}/status   "
        f"http://127.0.0.1:{ops_port}/metrics"
    )
    if not keep:
        print("  (the service and the daemon are stopped now: ./scripts/demo.sh --keep leaves "
              "them running, so these commands and URLs work)")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
