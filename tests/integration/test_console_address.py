"""Who the consoles answer, end to end, by the client's source address (issue #17): a real
`loghubd serve` without `--access-keys` listening on every address answers `/console` to
loopback clients only, while its SLS API keeps answering everyone; `--console-open` opens
the console. With `--access-keys`, serve's unsigned `/metrics` answers loopback clients only
unless `--metrics-open`. The daemon's ops `/` follows `/status`: open without `[ops] status_token`,
a sign-in with it (docs/console.md says why).

Requests come from this machine's own non-loopback address (aiohttp bound to it as its
source), found at test time; a machine without one fails the test, naming the reason.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import pytest

from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient
from loghubd.testing import wait_until
from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import Pool
from tests.integration.sls_http import log_group

REFUSAL = "This console answers loopback clients only"


def outside_address() -> str:
    """This machine's first non-loopback IPv4 address (`hostname -I`)."""
    tool = shutil.which("hostname")
    if tool is None:
        pytest.fail("`hostname` is missing: it finds this machine's non-loopback address")
    out = subprocess.run([tool, "-I"], capture_output=True, text=True, check=False).stdout
    for word in out.split():
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(word)
            if ip.version == 4 and not ip.is_loopback and not ip.is_link_local:
                return word
    pytest.fail(
        f"this machine has no non-loopback IPv4 address (`hostname -I` said {out.strip()!r}):"
        " the console's loopback-only rule cannot be checked end to end without one"
    )


@contextlib.asynccontextmanager
async def client(source: str) -> AsyncIterator[aiohttp.ClientSession]:
    """A session whose connections leave from `source` (so the server sees that address)."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=10)
    ) as session:
        yield session


async def get(source: str, url: str) -> tuple[int, str]:
    async with client(source) as s, s.get(url, allow_redirects=False) as r:
        return r.status, await r.text()


def serve(tmp_path: Path, name: str, *extra: str) -> ServerProcess:
    return ServerProcess(tmp_path / name, extra_args=["--host", "0.0.0.0", *extra]).start()


def test_serve_console_answers_loopback_only_unless_opened(tmp_path: Path) -> None:
    outside = outside_address()
    closed = serve(tmp_path, "closed")
    opened = serve(tmp_path, "opened", "--console-open")
    try:

        async def main() -> None:
            far, near = f"http://{outside}:{closed.port}", f"http://127.0.0.1:{closed.port}"
            # Off loopback: the console is refused, with a page that says why and what to do.
            for path in ("/console", "/console/p/reach/l/wide", "/console/p/reach/l/wide/tail"):
                status, text = await get(outside, far + path)
                assert status == 403, (path, status, text)
            status, text = await get(outside, far + "/console")
            assert REFUSAL in text and "--console-open" in text, text
            # ... while the SLS API answers that same client as before.
            async with client(outside) as s:
                sls = SlsClient(s, far, "reach", lambda: Credentials("", ""))
                await sls.create_project("console address test")
                await sls.create_logstore("wide", 2)
                await sls.put_log_group("wide", log_group(["a", "b", "c"]))
                shards = await sls.list_shards("wide")
                assert [sh["shardID"] for sh in shards] == [0, 1]
                read = 0
                for sh in shards:
                    cursor = await sls.get_cursor("wide", sh["shardID"], "begin")
                    read += (await sls.pull("wide", sh["shardID"], cursor, 10)).count
                assert read == 1, read
            # Without --access-keys anyone may read the data, and /metrics too.
            status, text = await get(outside, far + "/metrics")
            assert status == 200 and "loghubd_serve" in text, (status, text[:300])
            # A loopback client gets the console, with what was written.
            status, text = await get("127.0.0.1", near + "/console")
            assert status == 200 and "wide" in text, (status, text[:300])
            status, text = await get("127.0.0.1", near + "/console/p/reach/l/wide")
            assert status == 200 and "logstore-shards" in text, (status, text[:300])
            # --console-open: the same off-loopback client gets the console.
            far_open = f"http://{outside}:{opened.port}"
            status, text = await get(outside, far_open + "/console")
            assert status == 200 and "Projects and logstores" in text, (status, text[:300])

        anyio.run(main)
    finally:
        closed.kill()
        opened.kill()


def test_serve_metrics_with_access_keys_answer_loopback_only_unless_opened(
    tmp_path: Path,
) -> None:
    """With --access-keys, the unsigned /metrics (its labels name every project and
    logstore) is refused off loopback, saying which flag opens it; --metrics-open opens it."""
    outside = outside_address()
    keys = tmp_path / "keys.toml"
    keys.write_text('[[keys]]\nid = "LTAImetrics0001"\nsecret = "metrics-secret"\n')
    closed = serve(tmp_path, "closed", "--access-keys", str(keys))
    opened = serve(tmp_path, "opened", "--access-keys", str(keys), "--metrics-open")
    try:

        async def main() -> None:
            status, text = await get(outside, f"http://{outside}:{closed.port}/metrics")
            assert status == 403, (status, text[:300])
            assert '"errorCode": "Unauthorized"' in text and "--metrics-open" in text, text
            status, text = await get("127.0.0.1", f"http://127.0.0.1:{closed.port}/metrics")
            assert status == 200 and "loghubd_serve" in text, (status, text[:300])
            status, text = await get(outside, f"http://{outside}:{opened.port}/metrics")
            assert status == 200 and "loghubd_serve" in text, (status, text[:300])

        anyio.run(main)
    finally:
        closed.kill()
        opened.kill()


def test_daemon_console_is_gated_like_status(tmp_path: Path) -> None:
    outside = outside_address()
    server = ServerProcess(tmp_path / "server").start()
    pool = Pool(tmp_path / "pool", server.endpoint)
    try:
        pool.admin.create_logstore("ops", 1)
        daemons = {}
        for name, token in (("open", ""), ("locked", "s3cret-token")):
            d = pool.daemon("ops", "opsgroup", name, start=False)
            # Its reserved port (bound to 127.0.0.1) does not stop the daemon's 0.0.0.0 listener.
            d.config["ops"] = {"listen": f"0.0.0.0:{d.ops_port}", "status_token": token}
            daemons[name] = d.start()

        for d in daemons.values():
            wait_until(lambda d=d: _listening(d.ops_port), 20, d.log_tail, interval=0.2)  # type: ignore[misc]

        async def main() -> None:
            open_, locked = (f"http://{outside}:{d.ops_port}" for d in daemons.values())
            # No status_token: the page is open off loopback, as /status is.
            for path in ("/", "/status"):
                status, text = await get(outside, open_ + path)
                assert status == 200, (path, status, text[:300])
            status, text = await get(outside, open_ + "/")
            assert "Shards this daemon holds" in text
            # A status_token: /status wants it, the page wants a sign-in with it.
            status, _text = await get(outside, locked + "/status")
            assert status == 401, status
            status, _text = await get(outside, locked + "/")
            assert status == 303, status
            status, text = await get(outside, locked + "/login")
            assert status == 200 and "Console token" in text, (status, text[:300])

        anyio.run(main)
    finally:
        pool.close()
        server.kill()


def _listening(port: int) -> bool:
    try:
        return anyio.run(get, "127.0.0.1", f"http://127.0.0.1:{port}/healthz")[0] == 200
    except (OSError, aiohttp.ClientError):
        return False
