"""SIGHUP reloads `loghubd run`'s configuration (loghubd/shutdown.py), through a real daemon
on a live stream: a file the check refuses changes nothing (logged, naming the key); one it
accepts takes effect in the same process (same PID), systemd hears RELOADING=1 then READY=1
instead of a stop, and every log is delivered exactly once across the reload. Before this,
SIGHUP's default action ended the daemon at once, committing nothing."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

import pytest

from loghubd.shutdown import reloads_blocked
from tests.integration.daemon_harness import (
    Daemon,
    Pool,
    delivery_report,
    dump_toml,
    expected_ids,
    short,
    wait_until,
)
from tests.integration.harness_output import read_ids
from tests.integration.sd_notify import Listener

pytestmark = pytest.mark.slow

COUNT = 12_000  # written at 3,000 logs/s: the reload happens mid-stream (on a fast machine)
AFTER = 2_000  # written once the reloaded daemon is ready: the moved output surely has some


def test_sighup_reloads_in_place_and_a_refused_file_changes_nothing(
    daemon_pool: Pool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("reload", 2)
    notify = Listener(tmp_path / "notify.sock")
    request.addfinalizer(notify.sock.close)
    d = pool.daemon(
        "reload", "reload-group", "r", env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")}
    )
    d.wait_ready()
    notify.receive_until("READY=1")
    pid = d.pid
    producer = pool.produce("reload", count=COUNT, rate=3000, group_size=50, prefix="h")
    wait_until(lambda: len(read_ids([d.output])) > 0, 20, d.log_tail)

    # Refused: a bad value. The daemon runs on, as it was.
    good = dict(d.config)
    d.config_path.write_text(
        dump_toml({**good, "consumer": {**good["consumer"], "checkpoint_interval": -1}})
    )
    d.signal(signal.SIGHUP)
    wait_until(lambda: d.events("reload_refused"), 60, d.log_tail)
    [refused] = d.events("reload_refused")
    assert "consumer.checkpoint_interval" in refused["problem"], refused
    assert "invalid configuration: consumer." in refused["problem"], refused  # not ":;"
    assert d.alive() and not d.events("reloading"), d.log_tail()
    d.wait_ready()  # still serving
    assert "\nloghubd_config_last_reload_successful 0.0\n" in d.metrics()  # not just absent
    loaded_at = d.metric("loghubd_config_last_reload_success_timestamp_seconds")
    last = d.status()["config"]["last_reload"]
    assert not last["accepted"] and "consumer.checkpoint_interval" in last["problem"], last

    # Accepted: the output moves to another directory.
    moved = tmp_path / "moved"
    d.config_path.write_text(
        dump_toml({**good, "processor": {"name": "jsonl", "jsonl": {"path": str(moved)}}})
    )
    d.signal(signal.SIGHUP)
    wait_until(lambda: len(d.events("ops_listening")) == 2, 60, d.log_tail)
    d.wait_ready()
    assert d.pid == pid and d.alive()
    assert d.metric("loghubd_config_last_reload_successful") == 1
    assert d.metric("loghubd_config_last_reload_success_timestamp_seconds") > loaded_at
    assert d.status()["config"]["last_reload"] is None  # a fresh process
    [reloading] = d.events("reloading")
    assert reloading["argv"][-2:] == ["-c", str(d.config_path)], reloading
    notify.receive_until("READY=1", count=2)
    said = notify.messages()
    first_ready = said.index("READY=1")
    after = said[first_ready + 1 :]
    assert "RELOADING=1" in after and "STOPPING=1" not in said, said
    assert any(m.startswith("MONOTONIC_USEC=") for m in after), said
    assert after.index("RELOADING=1") < after.index("READY=1"), said
    assert {p for p, _ in notify.got} == {pid}, notify.got

    producer.wait()
    pool.produce("reload", count=AFTER, group_size=50, prefix="n").wait()  # surely after it
    wait_until(lambda: pool.committed_to_end("reload", "reload-group", 2), 60, d.log_tail)
    assert d.stop() == 0, d.log_tail()
    before, after_reload = read_ids([d.output]), read_ids([moved])
    assert before and set(expected_ids("n", AFTER)) <= set(after_reload), len(after_reload)
    report = delivery_report(
        expected_ids("h", COUNT) + expected_ids("n", AFTER), before + after_reload
    )
    assert not report["missing"] and not report["duplicated"], short(report)
    assert not report["unexpected"], short(report)


@pytest.mark.parametrize("breakage", ["missing-logstore", "ops-port-taken"])
def test_a_reload_that_cannot_start_runs_on_with_the_configuration_before_it(
    daemon_pool: Pool, request: pytest.FixtureRequest, breakage: str
) -> None:
    """`check-config` accepts a file it cannot know will not start: a logstore the service
    does not have, an `ops.listen` port something else holds. The reloaded image then starts
    again with the configuration that ran (loghubd/rollback.py), reports the failed reload,
    and consumes on from where it was; the next SIGHUP takes the file once it starts. Before,
    the daemon exited (3 or 4) and consumption stopped."""
    pool = daemon_pool
    ls = f"rollback-{breakage}"
    pool.admin.create_logstore(ls, 2)
    d = pool.daemon(ls, ls, "a")
    d.wait_ready()
    pid = d.pid
    pool.produce(ls, count=500, group_size=50, prefix="a").wait()
    wait_until(lambda: pool.committed_to_end(ls, ls, 2), 60, d.log_tail)

    good = dict(d.config)
    if breakage == "missing-logstore":
        bad = {**good, "source": {**good["source"], "logstore": "no-such-logstore"}}
        words = "no-such-logstore"
    else:
        holder = socket.socket()
        request.addfinalizer(holder.close)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        bad = {**good, "ops": {"listen": f"127.0.0.1:{holder.getsockname()[1]}"}}
        words = "already in use"
    d.config_path.write_text(dump_toml(bad))
    d.signal(signal.SIGHUP)
    wait_until(lambda: d.events("reload_rolled_back"), 60, d.log_tail)
    [failed] = d.events("reload_failed")
    assert words in failed["reason"], failed
    d.wait_ready()
    assert d.pid == pid and d.alive(), d.log_tail()
    assert "\nloghubd_config_last_reload_successful 0.0\n" in d.metrics()
    last = d.status()["config"]["last_reload"]
    assert not last["accepted"] and words in last["problem"], last

    pool.produce(ls, count=500, group_size=50, prefix="b").wait()  # consumed as before
    wait_until(lambda: pool.committed_to_end(ls, ls, 2), 60, d.log_tail)

    d.config_path.write_text(dump_toml(good))  # fixed: the next SIGHUP takes it
    d.signal(signal.SIGHUP)
    wait_until(lambda: len(d.events("reloading")) == 3, 60, d.log_tail)
    d.wait_ready()
    assert d.pid == pid and d.metric("loghubd_config_last_reload_successful") == 1
    assert d.stop() == 0, d.log_tail()
    report = delivery_report(expected_ids("a", 500) + expected_ids("b", 500), read_ids([d.output]))
    assert not report["missing"] and not report["duplicated"], short(report)


def test_sighup_while_the_daemon_starts_reloads_once_it_listens(
    daemon_pool: Pool, tmp_path: Path
) -> None:
    """A SIGHUP that comes before the daemon listens for signals (here while its processor is
    built, which takes 3 s) is remembered and acted on once it does: the file may have been
    read before it changed. Before, it was ignored without a word."""
    pool = daemon_pool
    pool.admin.create_logstore("hup-start", 1)
    pool.produce("hup-start", count=200, group_size=50, prefix="b").wait()
    built, out = tmp_path / "built", tmp_path / "record.jsonl"
    d = pool.daemon(
        "hup-start",
        "hup-start",
        "b",
        processor="record",
        processor_options={"path": str(out), "built": str(built), "build_seconds": 3},
    )
    wait_until(built.exists, 30, d.log_tail)
    built.unlink()  # the next one is the check's, then the new image's
    d.signal(signal.SIGHUP)
    wait_until(lambda: len(d.events("ops_listening")) == 2, 90, d.log_tail)
    d.wait_ready()
    [requested] = d.events("reload_requested")
    assert requested["received"] == "while starting", requested
    assert d.events("reload_accepted") and len(d.events("reloading")) == 1, d.log_tail()
    wait_until(lambda: pool.committed_to_end("hup-start", "hup-start", 1), 60, d.log_tail)
    assert d.stop() == 0, d.log_tail()
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    report = delivery_report(expected_ids("b", 200), ids)
    assert not report["missing"] and not report["duplicated"], short(report)


def reloaded_once_it_listened(d: Daemon) -> None:
    """The SIGHUP sent while `d` started was held, and reloaded it once it listened (a second
    `ops_listening`: the new image's), once; then it stops cleanly."""
    wait_until(lambda: len(d.events("ops_listening")) == 2, 60, d.log_tail)
    d.wait_ready()
    [requested] = d.events("reload_requested")
    assert requested["received"] == "while starting", requested
    assert len(d.events("reloading")) == 1, d.log_tail()
    assert d.stop() == 0, d.log_tail()


def test_a_sighup_sent_before_the_process_can_handle_it_waits_for_it(
    daemon_pool: Pool,
) -> None:
    """What a reload's exec and the `--workers` supervisor do: `loghubd run` is started with
    SIGHUP blocked (`reloads_blocked`), so one sent at once, before the interpreter has even
    started, is held pending and reloads the daemon once it listens. Not blocked, it would
    end the process (the default action); ignored, it would be dropped."""
    pool = daemon_pool
    pool.admin.create_logstore("hup-exec", 1)
    with reloads_blocked():
        d = pool.daemon("hup-exec", "hup-exec", "x")
    d.signal(signal.SIGHUP)
    reloaded_once_it_listened(d)


def stuck_daemon(pool: Pool, tmp_path: Path, logstore: str) -> Daemon:
    """A daemon whose processor is stuck on shard 0's first batch (its shutdown then waits
    out its 3 s grace and exits 1)."""
    pool.admin.create_logstore(logstore, 1)
    pool.produce(logstore, count=100, group_size=50, prefix="s").wait()
    out = tmp_path / "stuck"
    d = pool.daemon(
        logstore,
        logstore,
        "s",
        processor="stuck",
        processor_options={"path": str(out), "kind": "async", "stuck_shard": 0, "after": 0},
        consumer={"shutdown_grace": 3.0},
    )
    wait_until(lambda: (out / "stuck-0").exists(), 30, d.log_tail)
    return d


def test_sighup_during_the_shutdown_is_only_logged(daemon_pool: Pool, tmp_path: Path) -> None:
    """Once a stop began (here held for its 3 s grace by a processor stuck on a batch), a
    SIGHUP neither reloads nor, as its default action would, ends the process at once."""
    d = stuck_daemon(daemon_pool, tmp_path, "hup-stop")
    d.signal(signal.SIGTERM)
    wait_until(lambda: d.events("shutdown_started"), 10, d.log_tail)
    d.signal(signal.SIGHUP)
    wait_until(lambda: d.events("reload_ignored"), 10, d.log_tail)
    assert d.wait(30) == 1, d.log_tail()  # the stuck batch's exit, as without the SIGHUP
    assert d.events("shutdown_stuck_shards") and not d.events("reloading"), d.log_tail()


def test_a_stop_during_a_reloads_shutdown_cancels_the_exec(
    daemon_pool: Pool, tmp_path: Path
) -> None:
    """SIGHUP accepted, then SIGTERM while the reload's shutdown is held (a stuck processor,
    3 s grace): the process exits when the shutdown is over instead of starting again."""
    d = stuck_daemon(daemon_pool, tmp_path, "hup-then-stop")
    d.signal(signal.SIGHUP)
    wait_until(lambda: d.events("shutdown_started"), 60, d.log_tail)
    assert d.events("reload_accepted"), d.log_tail()
    d.signal(signal.SIGTERM)
    assert d.wait(30) == 1, d.log_tail()  # the stuck batch's exit, as after a plain SIGTERM
    assert d.events("reload_cancelled") and not d.events("reloading"), d.log_tail()
    # The shutdown ran its course (not ended at once as by a second signal).
    assert d.events("shutdown_stuck_shards") and not d.events("second_signal_exiting_now")


def catches(pid: int, sig: int) -> bool:
    """Whether process `pid` has a handler for `sig` (/proc's SigCgt mask)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def test_a_sighup_at_the_first_moment_the_process_catches_it_reloads(
    daemon_pool: Pool,
) -> None:
    """`kill -HUP` (or `docker kill -s HUP`) while `loghubd run` still imports: the console
    script holds SIGHUPs before the command line's imports (`loghubd._entry`), so one sent as
    soon as the process catches it is remembered and reloads once the daemon listens. Before,
    the first ~0.15 s ended the daemon with 129."""
    pool = daemon_pool
    pool.admin.create_logstore("hup-early", 1)
    d = pool.daemon("hup-early", "hup-early", "e")
    wait_until(lambda: not d.alive() or catches(d.pid, signal.SIGHUP), 30, d.log_tail, 0.0005)
    d.signal(signal.SIGSTOP)  # what it had loaded when it began to catch SIGHUP
    loaded = Path(f"/proc/{d.pid}/maps").read_text()
    d.signal(signal.SIGHUP)
    d.signal(signal.SIGCONT)
    # The command line's imports load loghubd's C decoder (and ~100 modules) in ~0.15 s;
    # holding SIGHUP only once `run` began (as before) left those to the default action.
    assert "_fastlog" not in loaded, "SIGHUP was held only after the command line's imports"
    reloaded_once_it_listened(d)
