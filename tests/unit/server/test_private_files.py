"""What `loghubd serve` stores is its owner's: a data directory it makes is 0700, its SQLite
files (the database, -wal, -shm) 0600, whatever the umask; an existing directory keeps its
mode and `datadir.open_to_others` gives it when others have any access. Real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from loghubd.server import datadir
from loghubd.server.storage import Storage
from tests.conftest import file_mode

pytestmark = pytest.mark.usefixtures("umask_022")


def test_a_data_dir_held_is_made_private_and_an_existing_one_keeps_its_mode(
    tmp_path: Path,
) -> None:
    made = tmp_path / "a" / "b"
    with datadir.held(made):
        pass
    assert (file_mode(made), file_mode(made.parent)) == (0o700, 0o755)
    assert datadir.open_to_others(made) is None
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o750)
    with datadir.held(shared):
        pass
    assert file_mode(shared) == 0o750
    assert datadir.open_to_others(shared) == 0o750
    assert datadir.open_to_others(tmp_path / "missing") is None


def test_the_sqlite_files_are_the_owners_alone(tmp_path: Path) -> None:
    db = tmp_path / "loghubd.sqlite3"
    storage = Storage(db)
    try:
        storage.create_project("demo", "", 0)  # a write: the -wal and -shm files exist
        for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            assert file_mode(path) == 0o600, path
    finally:
        storage.close()


def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    db = tmp_path / "loghubd.sqlite3"
    Storage(db).close()
    db.chmod(0o640)
    Storage(db).close()
    assert file_mode(db) == 0o640
