"""`loghubd dead-letters` on the directories an operator meets: a note that cannot be read is
counted and named (not skipped), a relative `consumer.dead_letter_dir` is read from the
working directory as the daemon reads it (and messages give the absolute path), and a
directory the daemon has not made yet holds no dead letters (exit 0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loghubd import cli
from loghubd.admin.deadletters import scan
from tests.unit.admin.test_replay_declined import dead_letter


def write_config(path: Path, dead_letter_dir: str, output: Path) -> Path:
    path.write_text(
        '[source]\nendpoint = "http://127.0.0.1:1"\nproject = "proj"\nlogstore = "store"\n'
        f'[consumer]\ngroup = "grp"\non_failure = "dead_letter"\nmax_attempts = 3\n'
        f'dead_letter_dir = "{dead_letter_dir}"\n'
        f'[processor]\nname = "jsonl"\n[processor.jsonl]\npath = "{output}"\n'
    )
    return path


def corrupt(directory: Path) -> Path:
    folder = directory / "shard-0"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "20261126T000001-x.pb").write_bytes(b"\x00")
    note = folder / "20261126T000001-x.json"
    note.write_text("{not json")
    return note


def dead_letters(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["dead-letters", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_corrupt_note_is_counted_named_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    letters = tmp_path / "dl"
    dead_letter(letters, 1, 10)
    note = corrupt(letters)
    config = write_config(tmp_path / "c.toml", str(letters), tmp_path / "out")
    found = scan(letters)
    assert len(found.letters) == 1 and [u.note for u in found.unreadable] == [note]

    code, out, err = dead_letters(capsys, "list", "-c", str(config))
    assert code == 0 and f"{note}  unreadable" in out, out
    assert f"2 dead letter(s) in {letters} (1 unreadable)" in out, out

    code, out, err = dead_letters(capsys, "print", "-c", str(config))
    assert code == 1 and f"not printed: {note}: the note cannot be read" in err, err

    code, out, err = dead_letters(capsys, "replay", "-c", str(config))
    assert code == 1 and "replayed 1 of 2 dead letter(s)" in out, out + err
    assert f"not replayed: {note}: the note cannot be read" in err, err
    assert note.exists() and note.with_suffix(".pb").exists(), "an unreadable letter stays"
    assert scan(letters).letters == [], "the readable one went through and was removed"

    code, out, err = dead_letters(capsys, "replay", "-c", str(config))
    assert code == 1 and "replayed 0 of 1" in out, out  # only the unreadable one is left


def test_a_relative_dead_letter_dir_is_read_from_the_working_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the daemon, which writes `dead-letter` under its working directory: run from
    there, the command finds the letters; run from elsewhere, it says where it looked."""
    daemon_dir = tmp_path / "var-lib-loghubd"
    dead_letter(daemon_dir / "dead-letter", 0, 10)
    config = write_config(tmp_path / "etc.toml", "dead-letter", tmp_path / "out")

    monkeypatch.chdir(daemon_dir)
    code, out, err = dead_letters(capsys, "list", "-c", str(config))
    assert code == 0 and f"1 dead letter(s) in {daemon_dir / 'dead-letter'}" in out, out + err

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = dead_letters(capsys, "list", "-c", str(config))
    assert code == 0 and f"0 dead letter(s) in {elsewhere / 'dead-letter'}" in out, out + err
    assert "is relative" in err and str(elsewhere / "dead-letter") in err, err


def test_a_dead_letter_dir_not_made_yet_holds_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A healthy daemon never set a batch aside, so it never made the directory: that is
    "0 dead letters", exit 0 (was "no dead-letter directory", exit 2)."""
    missing = tmp_path / "never-made"
    config = write_config(tmp_path / "c.toml", str(missing), tmp_path / "out")
    for action in ("list", "print", "replay"):
        code, out, err = dead_letters(capsys, action, "-c", str(config))
        assert code == 0, (action, out, err)
    code, out, err = dead_letters(capsys, "list", "-c", str(config))
    assert f"0 dead letter(s) in {missing}" in out and "does not exist yet" in out, out
    # An explicit --dir that does not exist is a mistake, named.
    code, out, err = dead_letters(capsys, "list", "-c", str(config), "--dir", str(missing))
    assert code == 2 and f"--dir {missing} does not exist" in err, err


def test_data_no_note_names_is_listed_as_incomplete_not_as_a_letter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A daemon that stopped between a letter's data and its note left a `.pb` alone: the
    batch was never set aside (the daemon read it again), so it is shown as incomplete and
    safe to delete, not counted as a letter to replay; the unreadable note's own `.pb` is
    not shown twice."""
    letters = tmp_path / "dl"
    dead_letter(letters, 1, 10)
    corrupt(letters)
    orphan = letters / "shard-2" / "20261126T000002-y.pb"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"\x0a\x00")
    assert scan(letters).incomplete == []  # just written: its note may be on its way
    old = time.time() - 120
    os.utime(orphan, (old, old))
    found = scan(letters)
    assert found.incomplete == [orphan]
    assert found.total == 2

    config = write_config(tmp_path / "c.toml", str(letters), tmp_path / "out")
    code, out, _ = dead_letters(capsys, "list", "-c", str(config))
    assert code == 0 and f"{orphan}  incomplete: no note names it" in out, out
    assert out.count("incomplete") == 1, out
    assert f"2 dead letter(s) in {letters}" in out, out


def test_a_second_replay_at_once_stops_before_touching_a_letter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two replays of the same letters would feed each to the processor twice (an http sink
    sends twice): while one holds the directory's replay lock (here: another process), a
    second one stops, exit 1, and every letter stays; once the first is done, it runs."""
    letters = tmp_path / "dl"
    dead_letter(letters, 1, 10)
    config = write_config(tmp_path / "c.toml", str(letters), tmp_path / "out")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            f"f = open({str(letters / '.replay.lock')!r}, 'a')\n"
            "fcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        code, out, err = dead_letters(capsys, "replay", "-c", str(config))
        assert code == 1, out + err
        assert f"another `loghubd dead-letters replay` is running on {letters}" in err, err
        assert len(scan(letters).letters) == 1 and not (tmp_path / "out").exists()
        code, out, err = dead_letters(capsys, "list", "-c", str(config))  # list needs no lock
        assert code == 0 and "1 dead letter(s)" in out, out
    finally:
        holder.kill()
        holder.communicate()
    code, out, err = dead_letters(capsys, "replay", "-c", str(config))
    assert code == 0 and "replayed 1 of 1" in out, out + err
    assert scan(letters).letters == []


def test_a_replay_lock_that_cannot_be_taken_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not an "unexpected error": the lock file cannot be made (here a directory is in its
    way; a read-only directory does the same), and the letter stays."""
    letters = tmp_path / "dl"
    dead_letter(letters, 1, 10)
    (letters / ".replay.lock").mkdir()
    config = write_config(tmp_path / "c.toml", str(letters), tmp_path / "out")
    code, out, err = dead_letters(capsys, "replay", "-c", str(config))
    assert code == 1, out + err
    assert f"cannot take the replay lock {letters / '.replay.lock'}: Is a directory" in err, err
    assert "unexpected error" not in err and "Traceback" not in err
    assert len(scan(letters).letters) == 1


def test_one_letter_is_picked_by_its_note_and_a_long_error_keeps_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    letters = tmp_path / "dl"
    dead_letter(letters, 0, 10)
    dead_letter(letters, 1, 20)
    long_note = letters / "shard-1" / "20261126T000000-000020.json"
    error = "row 7 refused: " + "x" * 400 + ' violates check constraint "positive_amount"'
    long_note.write_text(json.dumps({**json.loads(long_note.read_text()), "error": error}))
    config = write_config(tmp_path / "c.toml", str(letters), tmp_path / "out")

    code, out, _ = dead_letters(capsys, "list", "-c", str(config))
    (line,) = [x for x in out.splitlines() if str(long_note) in x]
    # Start and end of the error (where a database names the constraint), not its first 120.
    assert code == 0 and "row 7 refused: xxx" in line and '"positive_amount"' in line, line
    assert " ... " in line and len(line) < len(error)
    code, out, _ = dead_letters(capsys, "list", "-c", str(config), "--verbose")
    assert error in out

    # --letter: by file name or path; only that one is printed, then replayed (and removed).
    code, out, _ = dead_letters(capsys, "list", "-c", str(config), "--letter", long_note.name)
    assert code == 0 and str(long_note) in out and "shard-0" not in out, out
    code, out, _ = dead_letters(capsys, "print", "-c", str(config), "--letter", str(long_note))
    assert code == 0 and len(out.splitlines()) == 4, out  # its 2 log groups of 2 logs
    code, out, _ = dead_letters(capsys, "replay", "-c", str(config), "--letter", long_note.name)
    assert code == 0 and "replayed 1 of 1" in out, out
    assert [d.note.parent.name for d in scan(letters).letters] == ["shard-0"]

    code, out, err = dead_letters(capsys, "print", "-c", str(config), "--letter", "nope.json")
    assert code == 3 and "--letter nope.json: no dead letter of this source" in err, err
