"""The shipped Prometheus files, checked by Prometheus's own `promtool`: the scrape config and
the alert rules are valid, and every alert fires on its incident and stays quiet on a healthy
series (config/prometheus/alerts.test.yml, `promtool test rules`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CONFIG = Path(__file__).resolve().parents[3] / "config" / "prometheus"


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, (
        "promtool is missing, so the alert rules were NOT tested: scripts/test.sh installs "
        "it with Debian's `prometheus` package (scripts/debs.sh promtool:prometheus)"
    )
    return found


@pytest.mark.parametrize(
    "args",
    [
        ["check", "config", "scrape.yml"],
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
    ],
    ids=["scrape-config", "rules-valid", "rules-unit-tests"],
)
def test_promtool(args: list[str]) -> None:
    result = subprocess.run(
        [promtool(), *args], cwd=CONFIG, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_alert_has_a_firing_test() -> None:
    rules = (CONFIG / "alerts.yml").read_text()
    tests = (CONFIG / "alerts.test.yml").read_text()
    alerts = [line.split(":", 1)[1].strip() for line in rules.splitlines() if "- alert:" in line]
    assert len(alerts) >= 6
    for alert in alerts:
        firing = tests.split(f"alertname: {alert}\n")[1:]
        assert any(block.lstrip().startswith("exp_alerts:\n") for block in firing), alert
