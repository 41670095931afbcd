"""No traceback reaches a user: each failure of issue #18, through the real CLI (a subprocess),
gives one line naming the thing and the fix, and its documented exit code (`loghubd --help`,
docs/operations.md); `--debug` gives the traceback."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import anyio
import pytest

from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient
from loghubd.testing.process import PortReservation, ServerProcess, free_port
from tests.integration.daemon_harness import PROJECT, Admin, Producer, dump_toml

LOGSTORE, GROUP = "errstore", "errgroup"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("server")).start()
    admin = Admin(proc.endpoint)
    admin.create_logstore(LOGSTORE, 1)
    admin.create_group(LOGSTORE, GROUP, 10, False)
    yield proc
    proc.stop()


def cli(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loghubd", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def one_line(done: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert done.returncode == code, (done.returncode, output)
    lines = [line for line in done.stderr.splitlines() if line.startswith("loghubd ")]
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def where(server: ServerProcess, **kw: str) -> list[str]:
    values = {"endpoint": server.endpoint, "project": PROJECT, "logstore": LOGSTORE, **kw}
    return [x for k, v in values.items() for x in (f"--{k}", v)]


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"group": "nosuchgroup"}, ["consumer group 'nosuchgroup' does not exist", "group list"]),
        ({"logstore": "nosuchstore"}, ["logstore 'nosuchstore' does not exist", "--logstore"]),
        ({"project": "nosuchproject"}, ["project 'nosuchproject' does not exist", "--project"]),
    ],
)
def test_status_of_something_that_does_not_exist(
    server: ServerProcess, override: dict[str, str], words: list[str]
) -> None:
    args = where(server, **{"group": GROUP, **override})
    one_line(cli("status", *args), 3, *words)


def test_debug_gives_the_traceback(server: ServerProcess) -> None:
    done = cli("--debug", "status", *where(server, group="nosuchgroup"))
    assert done.returncode == 3 and "Traceback" in done.stderr, done.stderr
    assert "does not exist" in done.stderr


@pytest.mark.parametrize("command", ["status", "produce"])
def test_an_unreachable_endpoint_is_reported_after_the_timeout(command: str) -> None:
    """`--timeout` bounds the wait (produce's default, 30 s, would pass the bound below)."""
    port = free_port()  # nothing listens there
    args = ["--endpoint", f"http://127.0.0.1:{port}", "--project", PROJECT, "--logstore", "x"]
    if command == "status":
        args += ["--group", "g"]
    started = time.monotonic()
    done = cli(command, *args, "--timeout", "1")
    one_line(done, 4, f"cannot reach http://127.0.0.1:{port}", "--endpoint")
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("command", ["status", "produce"])
def test_https_to_a_plain_http_service_is_a_usage_error(
    server: ServerProcess, command: str
) -> None:
    """The URL is wrong, not the service down: exit 2 at once, as `run` does, not 4."""
    https = server.endpoint.replace("http://", "https://", 1)
    args = where(server, endpoint=https)
    if command == "status":
        args += ["--group", GROUP]
    started = time.monotonic()
    line = one_line(cli(command, *args, "--timeout", "20"), 2, "use an http:// endpoint")
    assert https in line and "--endpoint" in line, line
    assert time.monotonic() - started < 15, "refused without retrying to the deadline"


@pytest.mark.parametrize("command", ["status", "produce"])
def test_an_endpoint_that_is_not_a_url(command: str) -> None:
    args = ["--endpoint", "not-a-url", "--project", PROJECT, "--logstore", "x"]
    if command == "status":
        args += ["--group", "g"]
    started = time.monotonic()
    one_line(cli(command, *args), 2, "'not-a-url' is not a service URL", "http://HOST:PORT")
    assert time.monotonic() - started < 10, "refused before any network call"


@pytest.mark.parametrize(
    ("endpoint", "said"),
    [
        ("http://AK:EpSecret@127.0.0.1:7100", "has a user name or password in it"),
        ("ftp://AK:EpSecret@host", "is not a service URL"),
        ("https://AK:EpSecret@[::1", "is not a service URL"),  # was an "unexpected error"
    ],
)
def test_an_endpoint_with_a_password_is_refused_and_never_shown(endpoint: str, said: str) -> None:
    done = cli(
        "status", "--endpoint", endpoint, "--project", PROJECT, "--logstore", "x", "--group", "g"
    )
    one_line(done, 2, said, "AK:***@")
    assert "EpSecret" not in done.stdout + done.stderr


def test_run_when_the_ops_port_is_taken(server: ServerProcess, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "c.toml"
        config.write_text(
            dump_toml(
                {
                    "source": {
                        "endpoint": server.endpoint,
                        "project": PROJECT,
                        "logstore": LOGSTORE,
                    },
                    "consumer": {"group": "porttest"},
                    "processor": {"name": "jsonl", "jsonl": {"path": str(tmp_path / "out")}},
                    "ops": {"listen": f"127.0.0.1:{port}"},
                }
            )
        )
        done = cli("run", "-c", str(config))
    one_line(done, 4, f"ops.listen 127.0.0.1:{port} is already in use", "LOGHUBD_OPS__LISTEN")


def test_check_config_warns_of_an_ops_listen_host_that_does_not_resolve(
    server: ServerProcess, tmp_path: Path
) -> None:
    """`run` cannot listen on a host that does not resolve (exit 4); `check-config` says so as
    a warning and exits 0: the file may be checked on another machine than the one it runs on."""
    config = tmp_path / "c.toml"
    config.write_text(
        dump_toml(
            {
                "source": {"endpoint": server.endpoint, "project": PROJECT, "logstore": LOGSTORE},
                "consumer": {"group": "listentest"},
                "processor": {"name": "jsonl", "jsonl": {"path": str(tmp_path / "out")}},
                "ops": {"listen": "nohost.invalid:9999"},  # .invalid never resolves (RFC 6761)
            }
        )
    )
    done = cli("check-config", "-c", str(config))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    # the reason is the resolver's: `Name or service not known` (NXDOMAIN), or another
    (warning,) = [line for line in done.stderr.splitlines() if ": warning: " in line]
    expected = (
        rf"{re.escape(str(config))}: warning: ops\.listen: host 'nohost\.invalid' does not "
        r"resolve on this machine \(.+\): loghubd run would exit 4 here"
    )
    assert re.fullmatch(expected, warning), warning
    assert '"listen": "nohost.invalid:9999"' in done.stdout  # the effective config, as ever
    one_line(cli("run", "-c", str(config)), 4, "ops.listen nohost.invalid:9999 cannot be listened")
    ok = cli("check-config", "-c", str(config), env={"LOGHUBD_OPS__LISTEN": "127.0.0.1:0"})
    assert ok.returncode == 0 and "warning" not in ok.stderr, ok.stderr


@pytest.mark.parametrize(
    ("flags", "code", "words"),
    [
        (["--data-dir", "/proc/nope"], 2, ["--data-dir /proc/nope cannot be used"]),
        (["--data-dir", "FILE"], 2, ["--data-dir FILE is not a directory"]),
        (["--data-dir", "FILE/data"], 2, ["--data-dir FILE/data cannot be made: FILE is not a"]),
        # TEST-NET-1 (RFC 5737): an address that is no host's, so not this one's
        (["--host", "192.0.2.1"], 4, ["cannot listen on 192.0.2.1:", "give another --host"]),
        (["--host", "nosuch.invalid"], 4, ["nosuch.invalid does not resolve", "another --host"]),
    ],
)
def test_serve_names_the_flag_to_fix(
    tmp_path: Path, flags: list[str], code: int, words: list[str]
) -> None:
    file = tmp_path / "a-file"
    file.write_text("not a directory")
    args = ["--data-dir", str(tmp_path / "data"), "--port", str(free_port())]
    args += [flag.replace("FILE", str(file)) for flag in flags]  # the last --data-dir counts
    line = one_line(cli("serve", *args), code, *(w.replace("FILE", str(file)) for w in words))
    assert "--port" not in line, line


def test_new_plugin_blames_a_dir_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    root, blocker = tmp_path / "file" / "x", tmp_path / "file"
    done = cli("new-plugin", "loghubd-audit", "--dir", str(root))
    one_line(done, 2, f"new-plugin: {root} cannot be made: {blocker} is not a directory")


def interrupt(
    args: list[str], after: float, ready: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run, SIGINT `after` seconds (counted from the first `ready` line on stderr if given)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "loghubd", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = ""
    if ready is not None:  # a line on stderr (produce's progress) or stdout (status's table)
        stream = proc.stderr if ready.startswith('"') else proc.stdout
        assert stream is not None
        first = stream.readline()
        assert ready in first, first
        if stream is proc.stdout:
            first = ""
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, first + err)


def test_ctrl_c_on_produce_keeps_the_summary(server: ServerProcess) -> None:
    done = interrupt(
        ["produce", *where(server), "--count", "1000000", "--rate", "500", "--progress", "0.5"],
        after=0.5,
        ready='"written"',
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == 130, (done.returncode, done.stderr)
    import json

    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["interrupted"] == 1 and 0 < summary["written"] < 1_000_000, summary


def test_ctrl_c_on_status_watch(server: ServerProcess, tmp_path: Path) -> None:
    Producer(server.endpoint, LOGSTORE, count=10).start().wait()
    args = ["status", *where(server, group=GROUP), "--watch", "--interval", "0.5"]
    done = interrupt(args, 1.0, ready=f"group {GROUP}")  # once it showed the group
    one_line(done, 130, "interrupted")


def test_version_and_check_config_dash_c(tmp_path: Path) -> None:
    from loghubd import __version__

    assert cli("--version").stdout.strip() == f"loghubd {__version__}"
    config = tmp_path / "c.toml"
    config.write_text('[source]\nendpoint = "http://127.0.0.1:1"\nproject = "pp1"\n')
    done = cli("check-config", "-c", str(config))
    assert done.returncode == 2 and "source.logstore" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_produce_takes_its_target_from_dash_c(server: ServerProcess, tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        dump_toml(
            {
                "source": {"endpoint": server.endpoint, "project": PROJECT, "logstore": LOGSTORE},
                "consumer": {"group": GROUP},
            }
        )
    )
    done = cli("produce", "-c", str(config), "--count", "7", "--prefix", "dash-c-")
    assert done.returncode == 0 and '"written": 7' in done.stdout, done.stderr
    one_line(cli("produce", "--count", "1"), 2, "--project and --logstore required", "-c")


def test_log_format_flag_wins_over_the_config(server: ServerProcess, tmp_path: Path) -> None:
    ops = PortReservation()  # both runs listen on it before they find the logstore missing
    config = tmp_path / "c.toml"
    config.write_text(
        dump_toml(
            {
                "source": {"endpoint": server.endpoint, "project": PROJECT, "logstore": "nosuch"},
                "consumer": {"group": "fmt"},
                "processor": {"name": "jsonl", "jsonl": {"path": str(tmp_path / "out")}},
                "ops": {"listen": f"127.0.0.1:{ops.port}"},
                "log": {"format": "json"},
            }
        )
    )
    as_json = cli("run", "-c", str(config))
    as_console = cli("--log-format", "console", "run", "-c", str(config))
    ops.release()
    for done in (as_json, as_console):  # 3: the logstore does not exist
        assert done.returncode == 3 and "Traceback" not in done.stdout + done.stderr
        assert "logstore nosuch" in done.stderr or "nosuch" in done.stderr, done.stderr
    logged = [line for line in as_json.stdout.splitlines() if "source_cannot_start" in line]
    assert logged and logged[0].startswith("{"), as_json.stdout
    logged = [line for line in as_console.stdout.splitlines() if "source_cannot_start" in line]
    assert logged and not logged[0].startswith("{"), as_console.stdout


def test_refusals_name_where_the_keys_come_from_and_what_was_denied(
    loghubd_server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """A wrong secret names the -c file (not outdated variable names); a key whose policy
    denies the action gets the service's reason, naming the action, not "credentials"."""
    keys = tmp_path / "keys.toml"
    keys.write_text(
        '[[keys]]\nid = "admin"\nsecret = "admin-secret"\n\n'
        '[[keys]]\nid = "ro"\nsecret = "ro-secret"\npolicy = "reader"\n\n'
        '[policies.reader]\nstatements = [{ effect = "Allow", '
        'actions = ["log:Get*", "log:List*"], resources = ["*"] }]\n'
    )
    server = loghubd_server_factory("acl", extra_args=["--access-keys", str(keys)])

    async def set_up() -> None:
        async with aiohttp.ClientSession() as session:
            admin = Credentials("admin", "admin-secret")
            c = SlsClient(session, server.endpoint, PROJECT, lambda: admin)
            await c.create_project("cli errors")
            await c.create_logstore(LOGSTORE, 1)
            await c.create_group(LOGSTORE, GROUP, 10, False)

    anyio.run(set_up)
    config = tmp_path / "c.toml"
    source = {"endpoint": server.endpoint, "project": PROJECT, "logstore": LOGSTORE}
    config.write_text(
        dump_toml(
            {
                "source": {**source, "access_key_id": "admin", "access_key_secret": "wrong"},
                "consumer": {"group": GROUP},
            }
        )
    )
    wrong = cli("group", "list", "-c", str(config))
    one_line(wrong, 1, "refused the credentials (SignatureNotMatch)", f"the [source] of {config}")
    ro = {"LOGHUBD_SOURCE__ACCESS_KEY_ID": "ro", "LOGHUBD_SOURCE__ACCESS_KEY_SECRET": "ro-secret"}
    done = cli("group", "reset", GROUP, *where(server), "--to", "begin", "--execute", env=ro)
    line = one_line(done, 1, "may not perform log:ConsumerGroupUpdateCheckPoint")
    assert "refused the credentials" not in line


def test_an_endpoint_naming_the_project_is_a_warning_and_a_hint(
    server: ServerProcess, tmp_path: Path
) -> None:
    """An SDK-era project endpoint (`http://<project>.<host>`) gets the project put in front
    again: check-config warns (exit 0: a project may be named like the host's first label),
    and `status`, which cannot resolve the doubled host, gives the region endpoint."""
    port = server.endpoint.rsplit(":", 1)[1]
    endpoint = f"http://{PROJECT}.127.0.0.1:{port}"
    config = tmp_path / "ep.toml"
    source = {"endpoint": endpoint, "project": PROJECT, "logstore": LOGSTORE}
    processor = {"name": "jsonl", "jsonl": {"path": str(tmp_path / "out")}}
    config.write_text(
        dump_toml({"source": source, "consumer": {"group": GROUP}, "processor": processor})
    )
    done = cli("check-config", "-c", str(config))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (warning,) = [line for line in done.stderr.splitlines() if ": warning: " in line]
    assert warning == (
        f"{config}: warning: source.endpoint: the endpoint seems to name project {PROJECT!r} "
        f"already (loghubd adds it to the host): give the region endpoint "
        f"http://127.0.0.1:{port}"
    )
    status = cli("status", "-c", str(config), "--timeout", "1")
    one_line(
        status,
        4,
        f"the host name {PROJECT}.{PROJECT}.127.0.0.1 does not resolve",
        f"give the region endpoint http://127.0.0.1:{port}",
        "(--endpoint, source.endpoint)",
    )
    fixed = cli(
        "check-config", "-c", str(config), env={"LOGHUBD_SOURCE__ENDPOINT": server.endpoint}
    )
    assert fixed.returncode == 0 and "warning" not in fixed.stderr, fixed.stderr
