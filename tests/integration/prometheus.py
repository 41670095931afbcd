"""A real Prometheus (Debian's) for the tests that check the Grafana dashboard: started on a
free loopback port with a 1 s scrape interval, queried over its HTTP API; and the dashboard's
queries as Grafana sends them (`panel_queries`, `expand`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from loghubd.testing import PortReservation

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "config" / "grafana-dashboard.json"


def tool(name: str) -> str:
    found = shutil.which(name)
    assert found, (
        f"{name} is missing, so the dashboard was NOT checked: scripts/test.sh installs it "
        "with Debian's `prometheus` package (scripts/debs.sh)"
    )
    return found


class Prometheus:
    def __init__(self, directory: Path, targets: dict[str, str]) -> None:
        # Held until stop(): Prometheus (Go) listens with SO_REUSEADDR, so it can bind it.
        self._reservation = PortReservation()
        self.port = self._reservation.port
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
            for job, target in targets.items()
        )
        config = directory / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n" + jobs
        )
        self.log = directory / "prometheus.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    tool("prometheus"),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # a bad query: 400 with the error in the body
            body = json.loads(exc.read())
            exc.close()
        assert body["status"] == "success", f"{expr}: {body.get('error')}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def ready(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reservation.release()


def expand(expr: str) -> str:
    """What Grafana sends with every variable at "All" (allValue `.*`)."""
    return re.sub(r"\$\{?(instance|source|serve_instance)\}?", ".*", expr)


def panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
        out += [(f"{panel['title']} [{t['refId']}]", t["expr"]) for t in panel["targets"]]
    return out


def variable_queries() -> dict[str, str]:
    """`label_values(metric{...}, label)` as the equivalent PromQL `count by (label)`."""
    out = {}
    for var in json.loads(DASHBOARD.read_text())["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"]["query"])
        assert m, var
        out[var["name"]] = f"count by ({m[2]}) ({m[1]})"
    return out


def spark_query(expr: str) -> bool:
    """The spark plugin's series: checked against a real spark daemon by
    plugins/loghubd-spark/tests/test_spark_e2e.py (the dashboard test runs no JVM)."""
    return "loghubd_spark_" in expr
