"""Proxies from the environment (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`), as the official
SDK honours them, through real processes:

- a daemon whose endpoint's host does not resolve (`sls.local`) consumes through
  `HTTP_PROXY`, the `loghubd serve` itself standing in as the proxy (it takes absolute-form
  targets, docs/serve.md), and says at start which proxy it uses;
- the `http` sink posts through `HTTP_PROXY` with the proxy's credentials as
  `Proxy-Authorization`, while the same daemon reaches its local serve (loopback) directly;
- an unusable proxy fails `loghubd run` at start, naming the variable.
"""

from __future__ import annotations

import base64

import pytest

from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import Daemon, Pool, wait_until
from tests.integration.harness_output import expected_ids, read_ids
from tests.integration.http_receiver import Receiver

pytestmark = pytest.mark.slow

COUNT = 300


def test_a_daemon_consumes_through_http_proxy(
    daemon_pool: Pool, loghubd_server: ServerProcess
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("viaproxy", 1)
    pool.produce("viaproxy", count=COUNT, group_size=100, prefix="p").wait()
    port = loghubd_server.port
    daemon = Daemon(
        pool.dir / "daemon-proxied",
        f"http://sls.local:{port}",  # resolves nowhere: only the proxy can reach it
        "viaproxy",
        "proxied",
        "proxied",
        env={"HTTP_PROXY": f"http://127.0.0.1:{port}", "NO_PROXY": "", "no_proxy": ""},
    )
    pool.daemons.append(daemon)
    daemon.start().wait_ready()
    end = pool.admin.cursor("viaproxy", 0, "end")
    wait_until(
        lambda: pool.admin.checkpoints("viaproxy", "proxied").get(0, {}).get("checkpoint") == end,
        30,
        daemon.log_tail,
    )
    assert sorted(read_ids([daemon.output])) == sorted(expected_ids("p", COUNT))
    (started,) = daemon.events("consumer_started")
    assert started["proxy"] == f"http://127.0.0.1:{port}", started
    assert started["proxy_from"] == "HTTP_PROXY", started
    assert daemon.source_status("default")["proxy"] == f"http://127.0.0.1:{port}"
    assert daemon.stop() == 0, daemon.log_tail()


def test_the_http_sink_posts_through_the_proxy(daemon_pool: Pool) -> None:
    proxy = Receiver().start()  # answers absolute-form requests: a stand-in forward proxy
    try:
        pool = daemon_pool
        pool.admin.create_logstore("sink", 1)
        pool.produce("sink", count=COUNT, group_size=100, prefix="s").wait()
        daemon = pool.daemon(
            "sink",
            "sink-group",
            "sink",
            processor="http",
            processor_options={"url": "http://ingest.invalid/ingest"},  # RFC 2606: no DNS
            env={"HTTP_PROXY": f"http://me:p%40ss@127.0.0.1:{proxy.port}", "NO_PROXY": ""},
        ).wait_ready()
        got = lambda: {i for r in list(proxy.received) if r.status == 200 for i in r.ids}  # noqa: E731
        wait_until(lambda: len(got()) == COUNT, 30, daemon.log_tail)
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        proxy.stop()
    auth = "Basic " + base64.b64encode(b"me:p@ss").decode()
    assert {(r.target, r.proxy_auth) for r in proxy.received} == {
        ("http://ingest.invalid/ingest", auth)
    }
    # The daemon's own service is 127.0.0.1: loopback is never proxied.
    assert "proxy" not in daemon.events("consumer_started")[0]


def test_an_unusable_proxy_fails_at_start_naming_it(
    daemon_pool: Pool, loghubd_server: ServerProcess
) -> None:
    daemon = Daemon(
        daemon_pool.dir / "daemon-bad-proxy",
        f"http://sls.local:{loghubd_server.port}",
        "any",
        "grp",
        "bad-proxy",
        env={"HTTP_PROXY": "socks5://proxy.corp:1080", "http_proxy": "", "NO_PROXY": ""},
    )
    daemon_pool.daemons.append(daemon)
    assert daemon.start().wait(30) == 2
    text = daemon.log_path.read_text()
    assert "loghubd run: HTTP_PROXY: socks5:// proxies are not supported" in text, text
    assert "Traceback" not in text, text
