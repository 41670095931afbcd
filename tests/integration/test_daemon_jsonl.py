"""The `jsonl` processor through a real daemon: a really full disk (a 256 KiB tmpfs, grown to
64 MiB while the daemon retries) loses and repeats nothing and tears no line, and /status
names the failing shard meanwhile; rotation, compression and `fsync = "batch"` on a live
stream (compressed beside the writes)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import zstandard

from tests.integration.daemon_harness import Pool, delivery_report, short, wait_until

pytestmark = pytest.mark.slow

COUNT = 20_000  # 200 groups of 100 over 2 shards: ~2.6 MB of JSON lines


def lines(paths: list[Path]) -> list[bytes]:
    out: list[bytes] = []
    for path in paths:
        data = path.read_bytes()
        if path.suffix == ".zst":
            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        assert not data or data.endswith(b"\n"), f"{path}: a torn last line"
        out += data.splitlines()
    return out


def ids_of(raw_lines: list[bytes]) -> list[str]:
    out = []
    for line in raw_lines:
        record = json.loads(line)  # a torn or glued line fails here
        out.append(str(record["id"]))
    return out


def test_full_disk_then_grown_no_missing_no_duplicate_and_status_says_why(
    daemon_pool: Pool, tiny_tmpfs: Path
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("full", 2)
    pool.produce("full", count=COUNT, group_size=100, prefix="d").wait()
    out = tiny_tmpfs / "out"
    daemon = pool.daemon(
        "full",
        "full-group",
        "disk",
        processor_options={"path": str(out)},
        consumer={
            "max_fetch_log_groups": 10,
            "retry_initial_backoff": 0.1,
            "retry_max_backoff": 0.5,
        },
    ).wait_ready()

    failing: list[dict[str, Any]] = []

    def a_shard_fails() -> bool:
        shards = daemon.status()["shards"]
        failing[:] = [s for s in shards if s["processor_error"]]
        return bool(failing)

    wait_until(a_shard_fails, 30, daemon.log_tail)
    assert all(not s["caught_up"] for s in failing), failing
    assert all("No space left on device" in s["processor_error"] for s in failing), failing
    wait_until(lambda: len(daemon.events("process_failed")) >= 6, 30, daemon.log_tail)

    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_tmpfs)], check=True)
    wait_until(lambda: pool.committed_to_end("full", "full-group", 2), 60, daemon.log_tail)
    wait_until(
        lambda: all(s["caught_up"] and not s["processor_error"] for s in daemon.status()["shards"]),
        30,
        lambda: str(daemon.status()["shards"]),
    )
    assert daemon.stop() == 0, daemon.log_tail()

    report = delivery_report(
        [f"d{n}" for n in range(COUNT)], ids_of(lines(sorted(out.glob("shard-*.jsonl"))))
    )
    assert report == {"missing": [], "duplicated": {}, "unexpected": []}, {
        k: short(v) for k, v in report.items()
    }


def test_rotation_compression_and_fsync_per_batch(daemon_pool: Pool) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("rot", 1)
    count = 3000
    pool.produce("rot", count=count, group_size=50, prefix="r").wait()
    out = pool.dir / "rot-out"
    daemon = pool.daemon(
        "rot",
        "rot-group",
        "rot",
        processor_options={
            "path": str(out),
            "rotate_bytes": 40_000,
            "rotate_seconds": 2,
            "compress": "zstd",
            "fsync": "batch",
        },
        consumer={"max_fetch_log_groups": 4},
    ).wait_ready()
    wait_until(lambda: pool.committed_to_end("rot", "rot-group", 1), 60, daemon.log_tail)
    # The shard is quiet now: its last file is closed `rotate_seconds` after it was opened,
    # without a batch to do it, and compressed beside the writes; so every line is in a closed,
    # compressed file, where an uploader taking `shard-*.*.jsonl.zst` finds it.
    live = out / "shard-0.jsonl"

    def all_closed() -> bool:
        pending = [p for p in out.glob("shard-0.*Z.jsonl") if p != live]
        return live.stat().st_size == 0 and not pending

    wait_until(all_closed, 30, daemon.log_tail)
    compressed = sorted(out.glob("shard-0.*Z.jsonl.zst"))
    assert ids_of(lines(compressed)) == [f"r{n}" for n in range(count)]
    assert daemon.stop() == 0, daemon.log_tail()

    closed = sorted(out.glob("shard-0.*Z.jsonl*"))
    names = [p.name for p in closed]
    assert len(closed) >= 5, names
    assert not [n for n in names if n.endswith(".part")], names
    name = r"shard-0\.\d{8}T\d{6}\.\d{6}Z\.jsonl(\.zst)?"
    assert all(re.fullmatch(name, n) for n in names), names
    delivered = ids_of(lines([*closed, out / "shard-0.jsonl"]))
    assert delivered == [f"r{n}" for n in range(count)]  # in order: names sort as written


def test_two_daemons_pointed_at_one_directory_take_turns(daemon_pool: Pool) -> None:
    """Two daemons (two consumer groups of one logstore) whose jsonl writes to one directory:
    the second's shard is refused while the first holds it (/status says why, no traceback),
    and starts once the first stops; each group's logs are in the files once, whole."""
    pool = daemon_pool
    pool.admin.create_logstore("two", 1)
    count = 2000
    pool.produce("two", count=count, group_size=50, prefix="t").wait()
    out = pool.dir / "two-out"
    options = {"path": str(out), "rotate_bytes": 20_000}
    retry = {"retry_initial_backoff": 0.1, "processor_retry_max_backoff": 0.5}
    first = pool.daemon("two", "group-a", "first", processor_options=options).wait_ready()
    wait_until(lambda: pool.committed_to_end("two", "group-a", 1), 60, first.log_tail)
    second = pool.daemon(
        "two", "group-b", "second", processor_options=options, consumer=retry
    ).wait_ready()

    errors: list[str] = []

    def refused() -> bool:
        errors[:] = [s["processor_error"] for s in second.status()["shards"]]
        return any(errors)

    wait_until(refused, 30, second.log_tail)
    assert "shard-0.jsonl is being written by another processor" in errors[0], errors
    assert first.stop() == 0, first.log_tail()
    wait_until(lambda: pool.committed_to_end("two", "group-b", 1), 60, second.log_tail)
    assert second.stop() == 0, second.log_tail()
    assert "Traceback" not in second.log_tail(10_000)

    delivered = ids_of(lines([*sorted(out.glob("shard-0.*Z.jsonl")), out / "shard-0.jsonl"]))
    expected = [f"t{n}" for n in range(count)]
    assert delivered == expected + expected  # group-a's logs, then group-b's


def test_the_files_of_a_shard_that_moved_away_are_cut_closed_and_compressed(
    daemon_pool: Pool,
) -> None:
    """A daemon killed mid-write left a torn line in `shard-4.jsonl`, and a closed file it had
    not compressed yet; shard 4 was then written by a daemon elsewhere (this logstore has no
    shard 4 any more, as after a merge). A daemon started on the directory with
    `rotate_seconds` and `compress` cuts the torn line, closes and compresses shard 4's files
    as shard 4's processor would have, and writes its own."""
    pool = daemon_pool
    pool.admin.create_logstore("moved", 1)
    pool.produce("moved", count=100, group_size=50, prefix="m").wait()
    out = pool.dir / "moved-out"
    out.mkdir(parents=True)
    whole, left = b'{"id":"old"}\n', b'{"id":"closed"}\n'
    (out / "shard-4.jsonl").write_bytes(whole + b'{"id":"to')  # what kill -9 mid-write leaves
    (out / "shard-4.20261129T000000.000000Z.jsonl").write_bytes(left)
    options = {"path": str(out), "rotate_seconds": 1, "compress": "zstd"}
    daemon = pool.daemon("moved", "moved-group", "moved", processor_options=options).wait_ready()
    wait_until(lambda: pool.committed_to_end("moved", "moved-group", 1), 60, daemon.log_tail)

    def shard_4_closed_and_compressed() -> bool:
        names = [p.name for p in out.glob("shard-4.*")]
        return len(names) == 2 and all(n.endswith("Z.jsonl.zst") for n in names)

    wait_until(shard_4_closed_and_compressed, 30, daemon.log_tail)
    assert daemon.stop() == 0, daemon.log_tail()
    assert lines(sorted(out.glob("shard-4.*"))) == [left.strip(), whole.strip()]  # names sort
    mine = [*sorted(out.glob("shard-0.*Z.jsonl.zst")), out / "shard-0.jsonl"]
    assert sorted(ids_of(lines(mine))) == sorted(f"m{n}" for n in range(100))
    [warning] = [
        json.loads(line)
        for line in daemon.log_tail(100_000).splitlines()
        if "jsonl_torn_line_removed" in line
    ]
    assert warning["path"] == str(out / "shard-4.jsonl") and warning["removed_bytes"] == 9
