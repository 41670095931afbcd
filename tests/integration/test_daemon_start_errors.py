"""What goes wrong at start is said where an operator looks (/readyz, /status, the log), in
their words, and counted: a processor that cannot start on a shard (an output path it cannot
create) follows the failure policy with the path in the message, and the exit code says so;
an unreachable service at start is named as such.

The processor that cannot start is the example plugin's `grep` (it makes its directory in
`initialize`, per shard): the built-in `jsonl` proves its path when the daemon starts, and
refuses a bad one with exit 2 (test_a_jsonl_path_that_cannot_be_used_is_refused_at_start)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from loghubd.testing.process import ServerProcess, free_port
from tests.integration.daemon_harness import PROJECT, Admin, Daemon, Producer, read_ids
from tests.integration.sls_http import wait_until

LOGSTORE, GROUP = "startstore", "startgroup"


def reasons(daemon: Daemon) -> list[str]:
    code, body = daemon.readiness()
    return [] if code == 200 else list(body.get("reasons", []))


GREP_ALL = {"field": "msg", "pattern": "synthetic"}  # every produced log matches


def blocked_output(tmp_path: Path) -> tuple[Path, Path]:
    """An output directory that cannot be created: its parent is a regular file."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("in the way\n")
    return blocker, blocker / "out"


def test_a_processor_that_cannot_start_is_retried_then_starts(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    Admin(loghubd_server.endpoint).create_logstore(LOGSTORE, 1)
    Producer(loghubd_server.endpoint, LOGSTORE, count=50).start().wait()
    blocker, out = blocked_output(tmp_path)
    daemon = Daemon(
        tmp_path / "d", loghubd_server.endpoint, LOGSTORE, GROUP, "retrying",
        processor="grep", processor_options={"path": str(out), **GREP_ALL},
        consumer={"retry_initial_backoff": 0.2},  # on_failure = "retry", unlimited attempts
    ).start()  # fmt: skip
    try:
        daemon.wait_ready()

        def failing() -> list[str]:
            return [r for r in reasons(daemon) if "shard 0 is not consuming yet" in r]

        wait_until(lambda: bool(failing()), 20, lambda: str(reasons(daemon)))
        reason = failing()[0]
        assert "processor cannot start on shard 0" in reason and str(out) in reason, reason
        wait_until(lambda: daemon.metric("loghubd_processor_errors_total", shard="0") >= 2, 20)
        (shard,) = daemon.source_status("default")["shards"]
        assert str(out) in shard["processor_error"], shard
        blocker.unlink()  # the operator fixes the path: the next attempt starts the shard
        wait_until(lambda: len(read_ids([out])) == 50, 30, daemon.log_tail)
        wait_until(lambda: reasons(daemon) == [], 10, lambda: str(reasons(daemon)))
        # /status reads as positions and words, next to the raw cursors
        wait_until(lambda: daemon.source_status("default")["shards"][0]["caught_up"], 10)
        (shard,) = daemon.source_status("default")["shards"]
        assert shard["position"].startswith("log group ") and shard["behind"] == "caught up"
        assert shard["checkpoint_position"] is None or shard["checkpoint_position"].startswith(
            "log group "
        )
    finally:
        assert daemon.stop() == 0, daemon.log_tail()


@pytest.mark.parametrize("then", ["sigterm", "fixed-and-reloaded"])
def test_a_processor_that_cannot_start_stops_the_shard(
    tmp_path: Path, loghubd_server: ServerProcess, then: str
) -> None:
    Admin(loghubd_server.endpoint).create_logstore(LOGSTORE, 2)
    blocker, out = blocked_output(tmp_path)
    daemon = Daemon(
        tmp_path / "d", loghubd_server.endpoint, LOGSTORE, GROUP, "stopping",
        processor="grep", processor_options={"path": str(out), **GREP_ALL},
        consumer={"max_attempts": 2, "on_failure": "stop", "retry_initial_backoff": 0.1},
    ).start()  # fmt: skip
    try:
        daemon.wait_ready()

        def stopped() -> list[str]:
            return [r for r in reasons(daemon) if "stopped: processor cannot start" in r]

        wait_until(lambda: len(stopped()) == 2, 20, lambda: str(reasons(daemon)))
        assert all(str(out) in r and "after 2 attempts" in r for r in stopped()), stopped()
        assert daemon.metric("loghubd_processor_errors_total") == 4  # 2 shards x 2 attempts
        events = daemon.events("shard_stopped_on_failure")
        assert len(events) == 2 and all(str(out) in e["reason"] for e in events)
        # a shard is parked when its task has ended, just after its status reads "failed"
        # (ci106: read before, and found none)
        wait_until(lambda: len(daemon.events("shard_parked")) == 2, 10, daemon.log_tail)
        parked = daemon.events("shard_parked")
        assert {(e["group"], e["consumer"]) for e in parked} == {(GROUP, "stopping")}, parked
        if then == "sigterm":
            daemon.signal(signal.SIGTERM)
            assert daemon.wait(30) == 1, "a shard stopped on a failure: the exit code says so"
            assert daemon.events("shards_failed")
            return
        # The cause is fixed and the configuration reloaded: the parked shards do not hold the
        # reload up (it is what cures them), and both start, in the same process.
        pid = daemon.pid
        blocker.unlink()
        daemon.signal(signal.SIGHUP)
        wait_until(lambda: len(daemon.events("shard_started")) == 2, 30, daemon.log_tail)
        assert daemon.alive() and daemon.pid == pid, daemon.log_tail()
        assert daemon.events("shards_failed") and not daemon.events("reload_abandoned")
        wait_until(lambda: reasons(daemon) == [], 20, lambda: str(reasons(daemon)))
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        if daemon.alive():
            daemon.kill()


def test_an_unreachable_service_at_start_is_named(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    daemon = Daemon(
        tmp_path / "d", nowhere, LOGSTORE, GROUP, "lonely", consumer={"request_timeout": 2.0}
    ).start()
    try:

        def status() -> dict[str, Any]:
            try:
                return daemon.source_status("default")
            except OSError:
                return {}

        def doing() -> list[str]:
            try:
                return reasons(daemon)
            except OSError:
                return []

        # Before the first attempt has failed, readiness says what start-up is doing.
        wait_until(
            lambda: any(
                r.endswith(
                    f"starting: finding or creating consumer group startgroup on "
                    f"{PROJECT}/{LOGSTORE} at {nowhere}"
                )
                for r in doing()
            ),
            30,
            daemon.log_tail,
            interval=0.05,
        )
        wait_until(lambda: "cannot reach" in status().get("error", ""), 30, daemon.log_tail)
        error = status()["error"]
        assert "finding or creating consumer group startgroup" in error and nowhere in error
        assert any("starting:" in r and "cannot reach" in r for r in reasons(daemon))
        assert "processor is starting" not in reasons(daemon)
        (failed, *_) = daemon.events("startup_call_failed")
        assert "Unreachable" in failed["error"] and "no answer within" in failed["error"]
    finally:
        daemon.signal(signal.SIGTERM)
        daemon.wait(30)


def test_an_endpoint_naming_the_project_is_explained_while_run_retries(
    loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    """`run` keeps retrying an endpoint whose host it cannot resolve (it may come back), but
    when the host is the project's name doubled, /readyz and /status say so."""
    port = loghubd_server.endpoint.rsplit(":", 1)[1]
    endpoint = f"http://{PROJECT}.127.0.0.1:{port}"
    daemon = Daemon(
        tmp_path / "d", endpoint, LOGSTORE, GROUP, "doubled", consumer={"request_timeout": 1.0}
    ).start()
    hint = f"give the region endpoint http://127.0.0.1:{port}"

    def said() -> str:
        try:
            return " ".join(reasons(daemon))
        except OSError:  # not listening yet
            return ""

    try:
        wait_until(lambda: hint in said(), 30, daemon.log_tail)
        error = daemon.source_status("default")["error"]
        assert f"the host name {PROJECT}.{PROJECT}.127.0.0.1 does not resolve" in error, error
        assert "cannot reach the service, retrying" in error and hint in error, error
        assert daemon.alive()
    finally:
        daemon.signal(signal.SIGTERM)
        daemon.wait(30)


def test_a_jsonl_path_that_cannot_be_used_is_refused_at_start(tmp_path: Path) -> None:
    """`jsonl` proves its directory when the daemon (and `check-config`) reads the
    configuration: a path that cannot be used (its parent a file, a file itself) is a
    configuration error, exit 2 naming the key, rather than every shard failing its start
    for ever while the group cannot give those shards to anyone else."""
    import subprocess
    import sys

    blocker, out = blocked_output(tmp_path)
    for path in (out, blocker):
        config = tmp_path / "c.toml"
        config.write_text(
            f'[source]\nendpoint = "http://127.0.0.1:{free_port()}"\nproject = "proj"\n'
            f'logstore = "store"\n[consumer]\ngroup = "grp"\n'
            f'[processor]\nname = "jsonl"\n[processor.jsonl]\npath = "{path}"\n'
        )
        for command in ("check-config", "run"):
            done = subprocess.run(
                [sys.executable, "-m", "loghubd", command, "-c", str(config)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 2, (command, done.stderr)
            assert f"processor.jsonl.path: {path}" in done.stderr or (
                f"processor.jsonl.path: cannot write to {path}" in done.stderr
            ), done.stderr
            assert "Traceback" not in done.stderr
