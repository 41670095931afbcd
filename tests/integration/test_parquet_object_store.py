"""The `parquet` processor writing to an object store (`s3://` through pyarrow's S3 file
system) with a local `wal_dir`, as docs/parquet.md offers it: real daemons, one `kill -9`'d
mid-stream and restarted, one stopped with SIGTERM, against an S3 API server (moto's, run as
its own process). The objects are then copied down and DuckDB counts them: every log exactly
once, and no temporary object left visible.

On S3 a "rename" is a copy and a delete, so this is where the write-ahead log's finishing of
renames (`parquet_files.rename`: a copy already made, or a delete already done, is taken as
done) meets a file system without atomic renames.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from loghubd.testing import PortReservation
from tests.integration.daemon_harness import Daemon, Pool, wait_until
from tests.integration.test_parquet_sink import duck

pytestmark = pytest.mark.slow

LOGSTORE = "lake"
GROUP = "s3-group"
COUNT = 40_000
SHARDS = 4
BUCKET = "lake"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "loghubd-test",
    "AWS_SECRET_ACCESS_KEY": "loghubd-test-secret",
    "AWS_EC2_METADATA_DISABLED": "true",  # no instance-metadata lookups from pyarrow
}


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3 API server (moto's) on a reserved local port, with the bucket made."""
    server = Path(sys.executable).parent / "moto_server"
    assert server.exists(), (
        f"{server} is missing, so the object-store test did NOT run: pip install "
        "'moto[s3]' flask flask-cors (the test extra)"
    )
    reservation = PortReservation()  # werkzeug's server listens with SO_REUSEADDR
    port = reservation.port
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out
        )
    endpoint = f"127.0.0.1:{port}"
    try:
        maker = _fs(endpoint, allow_bucket_creation=True)
        wait_until(lambda: _made(maker, BUCKET), 30, log.read_text)
        yield endpoint
    finally:
        proc.kill()
        proc.wait(10)
        reservation.release()


def _made(fs: pafs.FileSystem, bucket: str) -> bool:
    try:
        fs.create_dir(bucket)
    except OSError:  # not listening yet
        return False
    return True


def _fs(endpoint: str, **options: bool) -> pafs.S3FileSystem:
    """The test's own client of the server (the daemons get the keys from CREDENTIALS)."""
    return pafs.S3FileSystem(
        endpoint_override=endpoint,
        scheme="http",
        region="us-east-1",
        access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        **options,
    )


def _objects(fs: pafs.FileSystem) -> list[pafs.FileInfo]:
    selector = pafs.FileSelector(f"{BUCKET}/out", recursive=True, allow_not_found=True)
    return [i for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]


def _rows(fs: pafs.FileSystem) -> int:
    """Rows in the visible objects, from their footers."""
    total = 0
    for info in _objects(fs):
        if info.base_name.endswith(".parquet") and not info.base_name.startswith("."):
            with fs.open_input_file(info.path) as f:
                total += pq.ParquetFile(f).metadata.num_rows
    return total


@pytest.mark.timeout(300)
def test_exactly_once_into_an_object_store_through_a_kill_and_a_sigterm(
    daemon_pool: Pool, s3_endpoint: str, tmp_path: Path
) -> None:
    pool = daemon_pool
    fs = _fs(s3_endpoint)
    pool.admin.create_logstore(LOGSTORE, SHARDS)
    producer = pool.produce(LOGSTORE, count=COUNT, group_size=100, prefix="s")
    options = {
        "path": f"s3://{BUCKET}/out?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1",
        "wal_dir": str(pool.dir / "wal"),  # local, shared by the daemons of this host
        "max_rows": 2_000,
        "max_age_s": 1.0,
    }

    def daemon(name: str) -> Daemon:
        return pool.daemon(
            LOGSTORE,
            GROUP,
            name,
            processor="parquet",
            processor_options=options,
            consumer={"max_fetch_log_groups": 10},
            env=CREDENTIALS,
        )

    a, b = daemon("a"), daemon("b")
    for d in (a, b):
        d.wait_ready()

    def past(n: int) -> None:
        wait_until(lambda: _rows(fs) >= n, 90, lambda: f"{_rows(fs)} < {n}\n{a.log_tail()}")

    past(COUNT // 5)
    a.kill()  # kill -9, with writes to S3 in flight for some of its shards
    a = daemon("a").wait_ready()
    past(COUNT // 2)
    b.signal(15)  # SIGTERM: writes what it buffered, hands its shards over, exits 0
    assert b.wait(60) == 0, b.log_tail()
    producer.wait(240)
    wait_until(lambda: _rows(fs) >= COUNT, 120, lambda: f"{_rows(fs)}\n{a.log_tail()}")
    assert a.stop() == 0, a.log_tail()

    objects = _objects(fs)
    hidden = [i.path for i in objects if i.base_name.startswith(".")]
    assert hidden == [], hidden  # temporaries are renamed or removed, none left behind
    # Copied down as they are, for DuckDB (which reads S3 only through an extension it
    # would download).
    local = tmp_path / "copy"
    for info in objects:
        dest = local / info.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        with fs.open_input_stream(info.path) as src, dest.open("wb") as out:
            shutil.copyfileobj(src, out)
    total, distinct = duck(local, "SELECT count(*), count(DISTINCT id) FROM logs")[0]
    assert (total, distinct) == (COUNT, COUNT)
    for info in objects:
        parts = Path(info.path).relative_to(f"{BUCKET}/out").parts
        assert parts[0] == LOGSTORE and parts[1].startswith("dt=") and len(parts) == 4, parts
    # the write-ahead log stayed local: nothing of it went to the bucket
    assert not any("_loghubd_wal" in i.path for i in objects)
