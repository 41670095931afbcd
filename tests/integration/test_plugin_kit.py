"""The plugin author's kit end to end: `loghubd plugins` lists what is installed, and a
package made by `loghubd new-plugin` installs, is listed, and its own generated tests pass —
including its run of a real daemon against a real `loghubd serve` through the new processor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import loghubd


def loghubd_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "loghubd", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def listed(env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    result = loghubd_cli("plugins", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return {p["name"]: p for p in json.loads(result.stdout)}


def test_plugins_lists_processors_with_distribution_version_and_options() -> None:
    plugins = listed()
    assert plugins["jsonl"]["distribution"] == "loghubd"
    assert plugins["jsonl"]["version"] == loghubd.__version__
    assert "path" in plugins["jsonl"]["options"]
    # the example plugin, installed by scripts/bootstrap.sh like any third-party package
    grep = plugins["grep"]
    assert (grep["distribution"], grep["version"], grep["plugin"]) == (
        "loghubd-example",
        "0.1.0",
        "example",
    )
    assert set(grep["options"]) == {"field", "pattern", "path"}
    text = loghubd_cli("plugins").stdout
    assert "grep  (loghubd-example 0.1.0)" in text
    assert "    pattern  the substring" in text


def test_new_plugin_package_installs_lists_and_passes_its_own_tests(tmp_path: Path) -> None:
    made = loghubd_cli("new-plugin", "loghubd-audit", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    package = tmp_path / "loghubd-audit"
    assert (package / "loghubd_audit" / "__init__.py").is_file()
    again = loghubd_cli("new-plugin", "loghubd-audit", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    bad = loghubd_cli("new-plugin", "Loghubd_Audit", cwd=tmp_path)
    assert bad.returncode == 2 and "distribution name" in bad.stderr
    # installed apart from this venv (so no other test sees it), then found by entry point
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
         str(package)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    env = {"PYTHONPATH": str(site)}
    audit = listed(env)["audit"]
    assert (audit["distribution"], audit["version"]) == ("loghubd-audit", "0.1.0")
    assert list(audit["options"]) == ["path"]
    # the generated tests, run by the author's pytest: the unit tests with make_batch and
    # RecordingTracker, and a real daemon consuming through `audit` (loghubd_server fixture)
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=package,
        env={**os.environ, **env},
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert "3 passed" in tests.stdout, tests.stdout[-1000:]
