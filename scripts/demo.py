"""The main job on the embedded default: a local `loghubd serve`, sample data, the daemon
consuming it with the jsonl processor, metrics visible. Runs for --seconds (default 30) while
logs keep arriving, then shuts the daemon down gracefully and checks that every log written
was delivered exactly once. Everything lives under .loghubd-demo/ in the checkout."""

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

from loghubd.testing.process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / ".loghubd-demo"


def loghubd(*args: str, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "loghubd", *args], **kw)  # type: ignore[call-overload]


def produce(endpoint: str, count: int, start: int, rate: float = 0.0) -> None:
    subprocess.run(
        [sys.executable, "-m", "loghubd", "produce", "--endpoint", endpoint, "--project",
         "demo", "--logstore", "app", "--count", str(count), "--start", str(start),
         "--rate", str(rate), "--create-shards", "4", "--prefix", "log-"],
        check=True, stdout=subprocess.DEVNULL,
    )


def metric_lines(url: str, prefixes: tuple[str, ...]) -> list[str]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return [line for line in text.splitlines() if line.startswith(prefixes)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="how long to keep producing and consuming")
    args = parser.parse_args()
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir()
    server = ServerProcess(DEMO / "server-data", log_path=DEMO / "server.log").start()
    endpoint = server.endpoint
    ops_port = free_port()
    out = DEMO / "output"
    (DEMO / "loghubd.toml").write_text(
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
    produce(endpoint, 20_000, 0)
    print("wrote 20,000 sample logs into project 'demo', logstore 'app' (4 shards)")
    daemon_log = open(DEMO / "daemon.log", "wb")  # noqa: SIM115
    daemon = loghubd("run", "-c", str(DEMO / "loghubd.toml"), stdout=daemon_log,
                     stderr=subprocess.STDOUT)
    metrics_url = f"http://127.0.0.1:{ops_port}/metrics"
    print(f"loghubd run is consuming: output in {out}/shard-*.jsonl, logs in {DEMO}/daemon.log")
    print(f"  metrics  {metrics_url}")
    print(f"  ready    http://127.0.0.1:{ops_port}/readyz   status http://127.0.0.1:{ops_port}/status")
    rate = 1000.0
    more = int(args.seconds * rate)
    print(f"producing {more:,} more logs at {rate:.0f}/s for {args.seconds:.0f}s ...")
    try:
        produce(endpoint, more, 20_000, rate)
        deadline = time.monotonic() + 30
        total = 20_000 + more
        consumed = 0.0
        while time.monotonic() < deadline:
            try:
                lines = metric_lines(metrics_url, ("loghubd_consumed_logs_total",))
                consumed = sum(float(line.split()[-1]) for line in lines)
            except OSError:
                pass
            if consumed >= total:
                break
            time.sleep(0.5)
        print("\nmetrics excerpt:")
        for line in metric_lines(metrics_url, ("loghubd_consumed_logs_total",
                                               "loghubd_lag_log_groups", "loghubd_held_shards")):
            print("  " + line)
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(60)
        server.stop()
    ids: list[str] = []
    for path in sorted(out.glob("shard-*.jsonl")):
        ids += [json.loads(line)["id"] for line in path.read_text().splitlines()]
    unique = set(ids)
    expected = {f"log-{i}" for i in range(total)}
    missing, dup = len(expected - unique), len(ids) - len(unique)
    print(f"\ndaemon exited with {code}; written {total:,}, delivered {len(unique):,}, "
          f"missing {missing}, duplicated {dup}")
    return 0 if code == 0 and not missing and not dup else 1


if __name__ == "__main__":
    raise SystemExit(main())
