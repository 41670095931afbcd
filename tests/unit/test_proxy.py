"""loghubd.proxy: which proxy a request takes, from the environment."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd.proxy import Proxy, bypassed, proxy_for

P = "http://proxy.corp:3128"


@pytest.mark.parametrize(
    ("url", "environ", "expected"),
    [
        # by the target's scheme; https targets take https_proxy (tunnelled with CONNECT)
        ("http://a.example.com/x", {"HTTP_PROXY": P}, Proxy(P, "", "HTTP_PROXY")),
        ("https://a.example.com/x", {"HTTP_PROXY": P}, None),
        ("https://a.example.com/x", {"HTTPS_PROXY": P}, Proxy(P, "", "HTTPS_PROXY")),
        ("https://a.example.com/x", {"ALL_PROXY": P}, Proxy(P, "", "ALL_PROXY")),
        (
            "https://a.example.com/x",
            {"HTTPS_PROXY": P, "ALL_PROXY": "http://o:1"},
            Proxy(P, "", "HTTPS_PROXY"),
        ),
        # lower case first; an empty value is unset
        (
            "https://a.example.com/",
            {"https_proxy": P, "HTTPS_PROXY": "http://o:1"},
            Proxy(P, "", "https_proxy"),
        ),
        (
            "https://a.example.com/",
            {"https_proxy": " ", "HTTPS_PROXY": P},
            Proxy(P, "", "HTTPS_PROXY"),
        ),
        # a bare host:port is an http proxy; no port is 80
        ("http://a.example.com/", {"http_proxy": "proxy.corp:3128"}, Proxy(P, "", "http_proxy")),
        (
            "http://a.example.com/",
            {"http_proxy": "http://proxy.corp"},
            Proxy("http://proxy.corp:80", "", "http_proxy"),
        ),
        (
            "http://a.example.com/",
            {"http_proxy": "http://[::1]:3128"},
            Proxy("http://[::1]:3128", "", "http_proxy"),
        ),
        # credentials move to Proxy-Authorization (percent-decoded)
        (
            "http://a.example.com/",
            {"http_proxy": "http://me:p%40ss@proxy.corp:3128"},
            Proxy(P, "Basic " + base64.b64encode(b"me:p@ss").decode(), "http_proxy"),
        ),
        # no_proxy
        ("https://a.example.com/", {"HTTPS_PROXY": P, "NO_PROXY": "example.com"}, None),
        ("https://a.example.com/", {"HTTPS_PROXY": P, "NO_PROXY": ".example.com"}, None),
        ("https://example.com/", {"HTTPS_PROXY": P, "NO_PROXY": ".example.com"}, None),
        (
            "https://badexample.com/",
            {"HTTPS_PROXY": P, "NO_PROXY": "example.com"},
            Proxy(P, "", "HTTPS_PROXY"),
        ),
        ("https://a.example.com/", {"HTTPS_PROXY": P, "no_proxy": "*"}, None),
        ("https://a.example.com/", {"HTTPS_PROXY": P, "no_proxy": "x.org, A.Example.COM"}, None),
        ("http://a.example.com:8080/", {"HTTP_PROXY": P, "NO_PROXY": "a.example.com:8080"}, None),
        (
            "http://a.example.com:8080/",
            {"HTTP_PROXY": P, "NO_PROXY": "a.example.com:9090"},
            Proxy(P, "", "HTTP_PROXY"),
        ),
        ("http://10.1.2.3:7100/", {"HTTP_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, None),
        (
            "http://11.1.2.3:7100/",
            {"HTTP_PROXY": P, "NO_PROXY": "10.0.0.0/8"},
            Proxy(P, "", "HTTP_PROXY"),
        ),
        ("http://[fd00::5]:7100/", {"HTTP_PROXY": P, "NO_PROXY": "fd00::/8"}, None),
        ("http://[fd00::5]:7100/", {"HTTP_PROXY": P, "NO_PROXY": "[fd00::5]:7100"}, None),
        # a local loghubd serve is never proxied
        ("http://127.0.0.1:7100/", {"HTTP_PROXY": P}, None),
        ("http://localhost:7100/", {"HTTP_PROXY": P}, None),
        ("http://[::1]:7100/", {"ALL_PROXY": P}, None),
        # nothing set
        ("https://a.example.com/", {}, None),
    ],
)
def test_proxy_for(url: str, environ: dict[str, str], expected: Proxy | None) -> None:
    got = proxy_for(url, environ)
    if expected is None:
        assert got is None
    else:  # an https target is tunnelled (CONNECT)
        assert got == replace(expected, tunnel=url.startswith("https://"))


def test_credentials_go_to_the_proxy_only() -> None:
    """To the proxy on each request for an http target; on the CONNECT only for an https
    one, never inside the tunnel where the target would see them."""
    environ = {"http_proxy": "http://me:pw@proxy:3128", "https_proxy": "http://me:pw@proxy:3128"}
    auth = {"Proxy-Authorization": "Basic " + base64.b64encode(b"me:pw").decode()}
    plain = proxy_for("http://a.example.com/", environ)
    tls = proxy_for("https://a.example.com/", environ)
    assert plain is not None and tls is not None
    assert (plain.request_headers, plain.tunnel_headers) == (auth, None)
    assert (tls.request_headers, tls.tunnel_headers) == ({}, auth)
    bare = proxy_for("https://a.example.com/", {"https_proxy": "http://proxy:3128"})
    assert bare is not None and (bare.request_headers, bare.tunnel_headers) == ({}, None)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"HTTPS_PROXY": "https://proxy:3128"}, "HTTPS_PROXY: https:// proxies are not supported"),
        ({"https_proxy": "socks5://proxy:1080"}, "https_proxy: socks5:// proxies are not"),
        ({"ALL_PROXY": "http://:3128"}, "ALL_PROXY: no proxy host"),
        ({"HTTPS_PROXY": "http://proxy:port"}, "HTTPS_PROXY: the proxy's port is not a number"),
        ({"HTTPS_PROXY": "http://u:p@[::1"}, "HTTPS_PROXY: not a URL (Invalid IPv6 URL)"),
    ],
)
def test_unusable_proxies_name_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=r"_PROXY|_proxy") as info:
        proxy_for("https://a.example.com/", environ)
    assert message in str(info.value)


_LABEL = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)


@given(
    sub=st.lists(_LABEL, max_size=3),
    domain=st.lists(_LABEL, min_size=1, max_size=3),
    dot=st.booleans(),
    other=st.lists(_LABEL, min_size=1, max_size=3),
)
def test_a_listed_domain_covers_its_subdomains_only(
    sub: list[str], domain: list[str], dot: bool, other: list[str]
) -> None:
    name = ".".join(domain)
    host = ".".join([*sub, name])
    entry = ("." if dot else "") + name
    assert bypassed(host, None, f"unrelated.test,{entry}")
    stranger = ".".join(other)
    if stranger != name and not stranger.endswith("." + name):
        assert not bypassed(stranger, None, entry)
        assert not bypassed("x" + name, None, entry)  # a suffix that is not a label boundary
