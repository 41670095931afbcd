"""One `loghubd serve` per data directory, with real processes: a second one on the same
directory stops before it listens or writes there (two would each coordinate the same
consumer groups in memory over one store), the first keeps serving, and once the first is
killed with SIGKILL the same command starts at once (the kernel dropped the lock). A server
whose port is taken stops before it makes its store."""

from __future__ import annotations

import socket
from pathlib import Path

from loghubd.server.datadir import LOCK_FILE
from loghubd.testing.process import ServerProcess, free_port
from tests.integration.sls_http import RawClient
from tests.integration.test_cli_errors import cli, one_line


def project_names(port: int) -> list[str]:
    client = RawClient(port, project="")  # the service host: ListProject
    try:
        return [p["projectName"] for p in client.ok("GET", "/").json()["projects"]]
    finally:
        client.close()


def test_a_second_serve_on_a_data_dir_in_use_stops_and_starts_once_the_first_is_killed(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = ServerProcess(data).start()
    try:
        assert first.proc is not None
        client = RawClient(first.port, "kept")
        client.create_project()
        client.close()
        before = sorted(p.name for p in data.iterdir())
        port = free_port()

        done = cli("serve", "--data-dir", str(data), "--port", str(port))

        one_line(
            done,
            4,
            f"--data-dir {data} is in use by another loghubd serve (pid {first.proc.pid}); "
            "stop it, or give another --data-dir",
        )
        assert "serving" not in done.stdout + done.stderr  # it never listened
        assert sorted(p.name for p in data.iterdir()) == before
        assert (data / LOCK_FILE).read_text() == f"{first.proc.pid}\n"
        assert first.proc.poll() is None
        assert project_names(first.port) == ["kept"]  # the first still serves, its data whole

        first.kill()  # SIGKILL: no clean-up of any kind
        again = ServerProcess(data, port=port).start()  # the same command, at once
        try:
            assert again.proc is not None
            assert project_names(port) == ["kept"]
            assert (data / LOCK_FILE).read_text() == f"{again.proc.pid}\n"
        finally:
            again.kill()
    finally:
        first.kill()


def test_a_taken_port_stops_serve_before_it_makes_its_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = cli("serve", "--data-dir", str(data), "--port", str(port))
    one_line(done, 4, f"cannot listen on 127.0.0.1:{port}", "pick another --port")
    # Nothing said of a server that never served (its missing --access-keys included).
    assert "signatures_not_checked" not in done.stdout + done.stderr, done.stdout
    # Only the lock, taken first: neither loghubd.sqlite3 nor console-session.key.
    assert sorted(p.name for p in data.iterdir()) == [LOCK_FILE]
