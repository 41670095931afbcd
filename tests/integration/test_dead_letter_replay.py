"""`loghubd dead-letters`: the batches a real daemon set aside are listed, printed, and
replayed through a configured processor; a dead letter is removed only once it went through
(a processor that fails again keeps it, exit 1)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb

from tests.integration.daemon_harness import Pool, dump_toml, read_ids
from tests.integration.sls_http import wait_until
from tests.integration.test_daemon_failures import FAIL_ID, at_end, start


def cli(daemon_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "loghubd", "dead-letters", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **daemon_env},
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


def test_dead_letters_listed_printed_and_replayed(daemon_pool: Pool, tmp_path: Path) -> None:
    pool = daemon_pool
    daemon, _ = start(pool, fail_times=1_000, max_attempts=2, on_failure="dead_letter")
    wait_until(lambda: at_end(pool), 30, daemon.log_tail)
    assert daemon.stop() == 0, daemon.log_tail()
    letters = sorted(daemon.dead_letter.glob("shard-*/*.json"))
    assert len(letters) == 1
    config = str(daemon.config_path)

    listed = cli(daemon.env, "list", "-c", config)
    assert listed.returncode == 0 and "1 dead letter(s)" in listed.stdout, listed.stdout
    assert "fails on purpose" in listed.stdout
    out = cli(daemon.env, "print", "-c", config).stdout
    printed = [json.loads(line) for line in out.splitlines()]
    dead = {r["id"] for r in printed}
    assert FAIL_ID in dead and len(dead) == len(printed) == 1000  # 10 log groups of 100

    # Through the same (still failing) processor: reported, kept, exit 1.
    again = cli(daemon.env, "replay", "-c", config)
    assert again.returncode == 1 and "not replayed" in again.stderr, again.stderr
    assert "replayed 0 of 1" in again.stdout
    assert sorted(daemon.dead_letter.glob("shard-*/*")) != []

    # Through parquet (its factory needs bind(), as the daemon calls it): a copy of the dead
    # letters, read back by DuckDB.
    copy = tmp_path / "dead-copy"
    shutil.copytree(daemon.dead_letter, copy)
    lake = tmp_path / "lake"
    as_parquet = tmp_path / "parquet.toml"
    conf = dict(daemon.config)
    conf["processor"] = {"name": "parquet", "parquet": {"path": str(lake)}}
    as_parquet.write_text(dump_toml(conf))
    done = cli(daemon.env, "replay", "-c", str(as_parquet), "--dir", str(copy))
    assert done.returncode == 0 and "replayed 1 of 1" in done.stdout, done.stdout + done.stderr
    rows = duckdb.sql(
        f"SELECT id FROM read_parquet('{lake}/**/*.parquet', hive_partitioning = true)"
    ).fetchall()
    assert sorted(r[0] for r in rows) == sorted(dead) and len(rows) == 1000
    assert list(copy.glob("shard-*/*")) == []

    # Through a working processor (jsonl into another directory): delivered, then removed.
    fixed = tmp_path / "replay.toml"
    replay_out = tmp_path / "replayed"
    conf = dict(daemon.config)
    conf["processor"] = {"name": "jsonl", "jsonl": {"path": str(replay_out)}}
    fixed.write_text(dump_toml(conf))
    done = cli(daemon.env, "replay", "-c", str(fixed), "--dir", str(daemon.dead_letter))
    assert done.returncode == 0 and "replayed 1 of 1" in done.stdout, done.stdout + done.stderr
    assert set(read_ids([replay_out])) == dead and len(read_ids([replay_out])) == 1000
    assert list(daemon.dead_letter.glob("shard-*/*")) == []
    assert "0 dead letter(s)" in cli(daemon.env, "list", "-c", str(fixed), "--dir",
                                      str(daemon.dead_letter)).stdout  # fmt: skip
