"""Values a user can get wrong on the command line or in `ops.listen`: one line naming the
flag or key, the documented exit code (2 usage, 4 cannot listen), never "unexpected error"
(which is for bugs). Through the real CLI, a subprocess each."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from loghubd.testing.process import free_port
from tests.integration.daemon_harness import dump_toml
from tests.integration.test_cli_errors import cli, one_line


def config(tmp_path: Path, listen: str) -> str:
    path = tmp_path / "c.toml"
    path.write_text(
        dump_toml(
            {
                # nothing needs to answer there: the ops listener starts first
                "source": {
                    "endpoint": f"http://127.0.0.1:{free_port()}",
                    "project": "proj",
                    "logstore": "store",
                },
                "consumer": {"group": "grp"},
                "processor": {"name": "null"},
                "ops": {"listen": listen},
            }
        )
    )
    return str(path)


@pytest.mark.parametrize(
    "host",
    [
        "192.0.2.1",  # TEST-NET-1 (RFC 5737): never an address of this host
        "nohost.invalid",  # never resolves (RFC 6761)
    ],
)
def test_run_with_an_ops_listen_address_it_cannot_use(tmp_path: Path, host: str) -> None:
    listen = f"{host}:{free_port()}"
    done = cli("run", "-c", config(tmp_path, listen), timeout=60)
    one_line(done, 4, f"ops.listen {listen} cannot be listened on", "LOGHUBD_OPS__LISTEN")


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_run_with_no_workers(tmp_path: Path, workers: str) -> None:
    done = cli("run", "-c", config(tmp_path, f"127.0.0.1:{free_port()}"), "--workers", workers)
    one_line(done, 2, f"--workers must be at least 1, not {workers}")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--port", "99999"], "--port must be between 0 and 65535, not 99999"),
        (["--port", "-1"], "--port must be between 0 and 65535, not -1"),
        (["--max-groups", "0"], "--max-groups must be at least 1, not 0"),
        (["--max-body-bytes", "0"], "--max-body-bytes must be at least 1, not 0"),
    ],
)
def test_serve_with_a_limit_out_of_range(tmp_path: Path, args: list[str], words: str) -> None:
    one_line(cli("serve", "--data-dir", str(tmp_path / "d"), *args), 2, words)


def test_serve_on_a_port_that_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", "--data-dir", str(tmp_path / "d"), "--port", str(port))
    one_line(done, 4, f"cannot listen on 127.0.0.1:{port}", "--port")


def test_check_config_given_two_files(tmp_path: Path) -> None:
    first = config(tmp_path, f"127.0.0.1:{free_port()}")
    done = cli("check-config", first, "-c", str(tmp_path / "other.toml"))
    one_line(done, 2, "two config files", "give one")
