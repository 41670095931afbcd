"""The `http` processor over TLS, against a real aiohttp endpoint serving https with a
certificate from a throw-away CA (made with the openssl command):

- with `tls_ca_file` and a client certificate, every log arrives and the endpoint sees the
  client's certificate (mutual TLS);
- with the system's CAs (no `tls_ca_file`) the endpoint is not trusted: nothing is sent, the
  failures are retried, the checkpoint does not move;
- `tls_verify = false` sends anyway;
- bad TLS options fail at start naming the key.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loghubd.processors.http import HttpFactory
from tests.integration.connect_proxy import ConnectProxy
from tests.integration.daemon_harness import Pool, wait_until
from tests.integration.http_receiver import Receiver
from tests.integration.pki import Pki, make_pki

pytestmark = pytest.mark.slow

LOGSTORE = "tls"
COUNT = 300


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def receiver(pki: Pki) -> Iterator[Receiver]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    server.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    server.verify_mode = ssl.CERT_OPTIONAL  # a client certificate is checked when one is sent
    r = Receiver(tls=server).start()
    yield r
    r.stop()


def test_https_endpoints(daemon_pool: Pool, receiver: Receiver, pki: Pki) -> None:
    pool = daemon_pool
    pool.admin.create_logstore(LOGSTORE, 1)
    pool.produce(LOGSTORE, count=COUNT, group_size=100, prefix="t").wait()
    retry = {"retry_initial_backoff_s": 0.1, "retry_max_backoff_s": 0.3, "timeout_s": 5.0}

    def ids(since: int = 0) -> set[str]:
        return {i for r in receiver.received[since:] if r.status == 200 for i in r.ids}

    def delivered(group: str) -> Any:
        return pool.daemon(
            LOGSTORE, group, group, processor="http", processor_options=options
        ).wait_ready()

    # Mutual TLS with the private CA: everything arrives, with the client's certificate.
    options = {
        "url": receiver.url,
        "tls_ca_file": str(pki.ca),
        "tls_cert_file": str(pki.client_cert),
        "tls_key_file": str(pki.client_key),
        **retry,
    }
    mtls = delivered("mtls")
    wait_until(lambda: len(ids()) == COUNT, 30, mtls.log_tail)
    assert mtls.stop() == 0, mtls.log_tail()
    got = [r for r in receiver.received if r.status == 200]
    assert sorted(i for r in got for i in r.ids) == sorted({i for r in got for i in r.ids})
    assert len({i for r in got for i in r.ids}) == COUNT
    assert {r.client for r in got} == {"loghubd-client"}

    # The system's CAs do not know this one: refused before anything is sent, and retried.
    before = len(receiver.received)
    options = {"url": receiver.url, **retry}
    untrusted = delivered("untrusted")
    refused = lambda: [  # noqa: E731
        e for e in untrusted.events("http_retry") if "CERTIFICATE_VERIFY_FAILED" in e["reason"]
    ]
    wait_until(lambda: len(refused()) >= 2, 30, untrusted.log_tail)  # and retried
    untrusted.kill()  # (a graceful stop would wait out shutdown_grace retrying: docs/shutdown.md)
    assert len(receiver.received) == before
    assert not pool.admin.checkpoints(LOGSTORE, "untrusted").get(0, {}).get("checkpoint")

    # Verification off: sent (and said so at start).
    options = {"url": receiver.url, "tls_verify": False, **retry}
    unverified = delivered("unverified")
    wait_until(lambda: len(ids(before)) == COUNT, 30, unverified.log_tail)
    assert unverified.events("http_tls_verify_off"), unverified.log_tail()
    assert unverified.stop() == 0, unverified.log_tail()
    assert {r.client for r in receiver.received[before:]} == {""}


def test_https_through_a_connect_proxy(daemon_pool: Pool, receiver: Receiver, pki: Pki) -> None:
    """HTTPS_PROXY with credentials, as in a corporate network: the sink asks the proxy to
    CONNECT to a host only the proxy can resolve, verifies the endpoint's certificate end to
    end through the tunnel, and the proxy's credentials go on the CONNECT only, never to the
    endpoint."""
    auth = "Basic " + base64.b64encode(b"me:pw").decode()
    proxy = ConnectProxy(expect_auth=auth, hosts={"ingest.test": "127.0.0.1"}).start()
    try:
        pool = daemon_pool
        pool.admin.create_logstore(LOGSTORE, 1)
        pool.produce(LOGSTORE, count=COUNT, group_size=100, prefix="x").wait()
        daemon = pool.daemon(
            LOGSTORE,
            "via-proxy",
            "via-proxy",
            processor="http",
            processor_options={
                "url": f"https://ingest.test:{receiver.port}/ingest",
                "tls_ca_file": str(pki.ca),
                "retry_initial_backoff_s": 0.1,
                "retry_max_backoff_s": 0.3,
            },
            env={"HTTPS_PROXY": f"http://me:pw@127.0.0.1:{proxy.port}", "NO_PROXY": ""},
        ).wait_ready()
        got = lambda: {i for r in list(receiver.received) if r.status == 200 for i in r.ids}  # noqa: E731
        wait_until(lambda: len(got()) == COUNT, 30, daemon.log_tail)
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        proxy.stop()
    assert proxy.connects and {(c.target, c.proxy_auth) for c in proxy.connects} == {
        (f"ingest.test:{receiver.port}", auth)
    }
    assert {r.proxy_auth for r in receiver.received} == {""}  # not inside the tunnel


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tls_ca_file": "{dir}/missing.pem"}, "processor.http.tls_ca_file: cannot load"),
        ({"tls_ca_file": "{server_key}"}, "processor.http.tls_ca_file: cannot load"),
        (
            {"tls_cert_file": "{client_cert}", "tls_key_file": "{server_key}"},
            "processor.http.tls_cert_file: cannot load",
        ),
        ({"tls_cert_file": "{dir}/missing.pem"}, "processor.http.tls_cert_file: cannot load"),
        ({"tls_key_file": "{client_key}"}, "processor.http.tls_key_file: needs tls_cert_file"),
        (
            {"tls_verify": False, "tls_ca_file": "{ca}"},
            "processor.http.tls_verify: false ignores tls_ca_file",
        ),
        ({"url": "http://h/", "tls_ca_file": "{ca}"}, "processor.http.tls_ca_file: only for"),
        ({"url": "http://h/", "tls_verify": False}, "processor.http.tls_verify: only for https"),
    ],
)
def test_bad_tls_options_name_the_key(pki: Pki, options: dict[str, Any], message: str) -> None:
    paths = {
        "dir": pki.ca.parent,
        "ca": pki.ca,
        "server_key": pki.server_key,
        "client_cert": pki.client_cert,
        "client_key": pki.client_key,
    }
    table = {"url": "https://h/", **options}
    table = {k: v.format(**paths) if isinstance(v, str) else v for k, v in table.items()}
    with pytest.raises(ValueError, match=r"^processor\.http\.tls_") as info:
        HttpFactory(table)
    assert message in str(info.value)
