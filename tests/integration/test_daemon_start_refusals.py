"""`loghubd run` says of a start-up call the service refuses what `loghubd status -c` says
(README, Troubleshooting): refused credentials name the config file's section and the env
variables that override it, a missing logstore names its key; with `[[sources]]`, the
source's own key and variables. The step that failed and the service's request id stay in
the line, and the exit codes are README's ("Exit codes"). Real `loghubd serve` (with
`--access-keys` where credentials matter) and real `loghubd run` processes."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import aiohttp
import anyio
import pytest

from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient
from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import PROJECT, Daemon, Pool, source_entry
from tests.integration.sls_http import wait_until

LOGSTORE, GROUP = "app", "ga"
ADMIN = Credentials("admin", "admin-secret")
WRONG = {"access_key_id": "admin", "access_key_secret": "wrong"}
RIGHT = {"access_key_id": "admin", "access_key_secret": "admin-secret"}


@pytest.fixture
def acl_server(
    loghubd_server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> ServerProcess:
    keys = tmp_path / "keys.toml"
    keys.write_text('[[keys]]\nid = "admin"\nsecret = "admin-secret"\n')
    server = loghubd_server_factory("acl", extra_args=["--access-keys", str(keys)])

    async def set_up() -> None:
        async with aiohttp.ClientSession() as session:
            c = SlsClient(session, server.endpoint, PROJECT, lambda: ADMIN)
            await c.create_project("start refusals")
            await c.create_logstore(LOGSTORE, 1)

    anyio.run(set_up)
    return server


def cannot_start(daemon: Daemon, code: int) -> str:
    """The one `loghubd run: cannot start:` line of a daemon that exited with `code`."""
    assert daemon.wait(30) == code, daemon.log_tail()
    text = daemon.log_path.read_text()
    assert "Traceback" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if line.startswith("loghubd run: cannot start")]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


def test_refused_credentials_are_said_as_status_says_them(
    acl_server: ServerProcess, daemon_pools: Callable[[ServerProcess], Pool]
) -> None:
    daemon = daemon_pools(acl_server).daemon(LOGSTORE, GROUP, "wrong-key", start=False)
    daemon.config["source"].update(WRONG)
    line = cannot_start(daemon.start(), 1)
    step = f"finding or creating consumer group {GROUP} on {PROJECT}/{LOGSTORE} at "
    assert line.startswith(f"loghubd run: cannot start: {step}{acl_server.endpoint}: "), line
    assert (
        "refused the credentials (SignatureNotMatch): check the [source] of "
        f"{daemon.config_path}, or LOGHUBD_SOURCE__ACCESS_KEY_ID and "
        "LOGHUBD_SOURCE__ACCESS_KEY_SECRET, which override it"
    ) in line, line
    assert re.search(r"; request [0-9A-Fa-f]+\)$", line), line  # the service's request id


def test_a_missing_logstore_names_the_key(
    acl_server: ServerProcess, daemon_pools: Callable[[ServerProcess], Pool]
) -> None:
    daemon = daemon_pools(acl_server).daemon("apps", GROUP, "no-store", start=False)
    daemon.config["source"].update(RIGHT)
    line = cannot_start(daemon.start(), 3)  # not found
    assert (
        f"logstore 'apps' does not exist in project '{PROJECT}': check source.logstore "
        "(LogStoreNotExist: "
    ) in line, line


def test_with_several_sources_the_refusal_names_the_sources_own_keys(
    acl_server: ServerProcess, daemon_pools: Callable[[ServerProcess], Pool]
) -> None:
    """One source refused, the other consuming: the refusal is the failed source's /status
    error and /readyz reason, one line, naming `LOGHUBD_SOURCES_WEB_APP__*` (the variables
    that override that entry's keys); the daemon exits 1 at shutdown."""
    endpoint = acl_server.endpoint
    ok = {**source_entry("ok", endpoint, LOGSTORE, consumer={"group": GROUP}), **RIGHT}
    bad = {**source_entry("web-app", endpoint, LOGSTORE, consumer={"group": "gb"}), **WRONG}
    daemon = daemon_pools(acl_server).daemon("unused", "unused", "mixed", sources=[ok, bad])

    def state() -> str:
        try:
            return str(daemon.source_status("web-app")["state"])
        except OSError:  # not listening yet
            return ""

    wait_until(lambda: state() == "failed", 30, daemon.log_tail)
    error = daemon.source_status("web-app")["error"]
    assert "\n" not in error and "refused the credentials (SignatureNotMatch)" in error, error
    assert (
        f"check the [[sources]] 'web-app' of {daemon.config_path}, or "
        "LOGHUBD_SOURCES_WEB_APP__ACCESS_KEY_ID and LOGHUBD_SOURCES_WEB_APP__ACCESS_KEY_SECRET"
    ) in error, error
    # the other source's own start is not this test's: readiness is read once it has joined
    # (under load it was still "starting" when read, ci105)
    wait_until(lambda: daemon.source_status("ok")["joined"], 30, daemon.log_tail)
    code, body = daemon.readiness()
    assert code == 503 and body["reasons"] == [f"source web-app: cannot start: {error}"], body
    assert daemon.stop() == 1, daemon.log_tail()


def test_with_several_sources_a_missing_logstore_names_the_entrys_key(
    acl_server: ServerProcess, daemon_pools: Callable[[ServerProcess], Pool]
) -> None:
    endpoint = acl_server.endpoint
    gone = {**source_entry("x", endpoint, "nope-x", consumer={"group": GROUP}), **RIGHT}
    daemon = daemon_pools(acl_server).daemon("unused", "unused", "hopeless", sources=[gone])
    line = cannot_start(daemon, 3)
    assert "logstore 'nope-x' does not exist in project" in line, line
    assert "check sources.x.logstore (LogStoreNotExist: " in line, line


def test_an_https_endpoint_to_a_plain_http_service_is_refused_at_once(
    acl_server: ServerProcess, daemon_pools: Callable[[ServerProcess], Pool]
) -> None:
    """No back-off would mend the scheme: `run` used to retry it for ever while /readyz said
    "cannot reach the service". It exits 2 (configuration: systemd does not restart it),
    naming the key and what to write instead."""
    https = acl_server.endpoint.replace("http://", "https://")
    daemon = daemon_pools(acl_server).daemon(LOGSTORE, GROUP, "https", start=False)
    daemon.config["source"].update({**RIGHT, "endpoint": https})
    line = cannot_start(daemon.start(), 2)
    assert line.startswith(
        f"loghubd run: cannot start: finding or creating consumer group {GROUP} "
    ), line
    assert line.endswith(
        "source.endpoint: the TLS handshake failed (WRONG_VERSION_NUMBER): the service speaks "
        "plain HTTP here; use an http:// endpoint"
    ), line
