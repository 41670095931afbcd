"""`api.cross_site` (an Origin that is not the request's own Host) and `runner.exposed_addresses`
(the bound addresses that are not loopback), as tables."""

from __future__ import annotations

import pytest

from loghubd.protocol import errors as E
from loghubd.server import api
from loghubd.server.runner import exposed_addresses

CROSS_SITE = [
    # origin, host, cross-site
    ("http://demo.localhost:7100", "demo.localhost:7100", False),
    ("http://DEMO.localhost:7100", "demo.LOCALHOST:7100", False),  # names without case
    ("http://127.0.0.1:7100", "127.0.0.1:7100", False),  # serve's console, same origin
    ("http://[::1]:7100", "[::1]:7100", False),
    ("http://loghub.example", "loghub.example", False),  # port 80 on both sides
    ("http://loghub.example:80", "loghub.example", False),
    ("http://loghub.example", "loghub.example:80", False),
    ("https://loghub.example", "loghub.example", False),  # behind a TLS proxy: 443
    ("https://loghub.example", "loghub.example:443", False),
    ("http://evil.example", "demo.localhost:7100", True),
    ("http://evil.example:7100", "demo.localhost:7100", True),
    ("http://demo.localhost:7101", "demo.localhost:7100", True),  # another port
    ("http://demo.localhost", "demo.localhost:7100", True),  # 80 is another port
    ("https://loghub.example", "loghub.example:80", True),
    ("http://localhost:7100", "demo.localhost:7100", True),  # another host of the same serve
    ("null", "demo.localhost:7100", True),  # a sandboxed page, a file
    ("", "demo.localhost:7100", True),
    ("file://", "demo.localhost:7100", True),
    ("chrome-extension://abcdef", "demo.localhost:7100", True),
    ("http://demo.localhost:notaport", "demo.localhost:7100", True),
    ("http://demo.localhost:99999", "demo.localhost:7100", True),
    ("http://demo.localhost:7100", "demo.localhost:bad", True),
    ("http://demo.localhost:7100", "", True),  # no Host
]


@pytest.mark.parametrize(("origin", "host", "expected"), CROSS_SITE)
def test_cross_site(origin: str, host: str, expected: bool) -> None:
    assert api.cross_site(origin, host) is expected


def test_refuse_cross_site_refuses_only_another_sites_origin() -> None:
    api.refuse_cross_site({"host": "demo.localhost:7100"})  # no Origin: the SDKs
    api.refuse_cross_site({"host": "demo.localhost:7100", "origin": "http://demo.localhost:7100"})
    with pytest.raises(E.SlsError) as refused:
        api.refuse_cross_site({"host": "demo.localhost:7100", "origin": "http://evil.example"})
    assert (refused.value.http_status, refused.value.error_code) == (403, "Unauthorized")
    assert refused.value.message == (
        "cross-site request refused: Origin 'http://evil.example' is not Host "
        "'demo.localhost:7100'; loghubd serve without --access-keys refuses requests from web "
        "pages of other sites; start it with --access-keys (and sign the requests) to accept them"
    )


EXPOSED = [
    ([("127.0.0.1", 7100)], []),
    ([("127.0.0.2", 7100)], []),  # all of 127/8 is loopback
    ([("::1", 7100, 0, 0)], []),
    ([("0.0.0.0", 7100)], ["0.0.0.0:7100"]),
    ([("::", 7100, 0, 0)], ["[::]:7100"]),
    ([("192.168.1.5", 7100)], ["192.168.1.5:7100"]),
    ([("fe80::1%eth0", 7100, 0, 2)], ["[fe80::1%eth0]:7100"]),
    ([("127.0.0.1", 7100), ("::", 7100, 0, 0)], ["[::]:7100"]),  # a name resolving to both
]


@pytest.mark.parametrize(("bound", "expected"), EXPOSED)
def test_exposed_addresses(bound: list[tuple[object, ...]], expected: list[str]) -> None:
    assert exposed_addresses(bound) == expected
