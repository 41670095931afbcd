"""Which HTTP proxy a request goes through, from the environment, as curl, Python's urllib and
the official SDK (requests) decide it: `http_proxy` for http:// targets, `https_proxy` for
https:// ones (an https target is tunnelled with CONNECT), `all_proxy` for either, the
lower-case name before the upper-case one.

None for a host `no_proxy` lists: `*`, a name or a domain (`example.com` and `.example.com`
both cover `example.com` and `a.example.com`), an IP address or a CIDR block (`10.0.0.0/8`);
`entry:port` (`[v6]:port`) covers that port only. A loopback target (`localhost`,
127.0.0.0/8, ::1: a local `loghubd serve`) is never proxied, as Go's net/http decides.

Decided once per target host by the caller, not per request. Credentials in the proxy's URL
(`http://user:pw@proxy:3128`) become a `Proxy-Authorization` header and leave the URL. Only
http:// proxies are spoken to (aiohttp's limit): an https:// or socks proxy is refused with
the variable named, rather than ignored. Pure: the environment is passed in.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit


@dataclass(frozen=True, slots=True)
class Proxy:
    url: str  # http://host:port, without credentials
    authorization: str = ""  # the Proxy-Authorization value, if the URL had credentials
    variable: str = ""  # the environment variable it came from
    tunnel: bool = False  # an https target: the proxy is asked to CONNECT

    @property
    def request_headers(self) -> Mapping[str, str]:
        """For each request to an http target (sent to the proxy, which consumes them)."""
        return (
            {"Proxy-Authorization": self.authorization}
            if self.authorization and not self.tunnel
            else {}
        )

    @property
    def tunnel_headers(self) -> Mapping[str, str] | None:
        """For the CONNECT of an https target (never inside the tunnel: the target would see
        them)."""
        return (
            {"Proxy-Authorization": self.authorization}
            if self.authorization and self.tunnel
            else None
        )


def _lookup(environ: Mapping[str, str], name: str) -> tuple[str, str]:
    """(variable, value) of `name`_proxy, lower case first; ("", "") when unset or empty."""
    for variable in (f"{name}_proxy", f"{name.upper()}_PROXY"):
        value = environ.get(variable, "").strip()
        if value:
            return variable, value
    return "", ""


def is_loopback(host: str) -> bool:
    """Whether `host` (a name, or an address with or without an IPv6 `%scope`) is this
    machine's loopback: `localhost`, `*.localhost`, 127.0.0.0/8, ::1."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _entry(text: str) -> tuple[str, int | None]:
    """A no_proxy entry as (host, domain or network; its port or None)."""
    if text.startswith("["):  # [v6] or [v6]:port
        inside, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        return inside, int(port) if port.isdigit() else None
    name, colon, port = text.rpartition(":")
    if colon and ":" not in name and port.isdigit():  # name:port (a bare v6 has more colons)
        return name, int(port)
    return text, None


def bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether `no_proxy` (comma-separated entries, see the module) covers `host`:`port`."""
    host = host.lower().rstrip(".")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for text in no_proxy.lower().split(","):
        text = text.strip()
        if text == "*":
            return True
        entry, want_port = _entry(text)
        entry = entry.strip(".")
        if not entry or (want_port is not None and want_port != port):
            continue
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
        elif host == entry or host.endswith("." + entry):
            return True
    return False


def proxy_for(url: str, environ: Mapping[str, str]) -> Proxy | None:
    """The proxy for requests to `url`, or None to connect directly. ValueError naming the
    variable when the proxy it gives cannot be used."""
    target = urlsplit(url)
    host = target.hostname or ""
    if is_loopback(host):
        return None
    _, no_proxy = _lookup(environ, "no")
    if no_proxy and bypassed(host, target.port, no_proxy):
        return None
    variable, value = _lookup(environ, target.scheme or "http")
    if not value:
        variable, value = _lookup(environ, "all")
    if not value:
        return None
    try:
        parts = urlsplit(value if "://" in value else f"http://{value}")
    except ValueError as exc:  # an unclosed [IPv6 address
        raise ValueError(f"{variable}: not a URL ({exc})") from None
    if parts.scheme != "http":
        raise ValueError(
            f"{variable}: {parts.scheme}:// proxies are not supported; give an http:// proxy "
            "(https:// targets are tunnelled through it with CONNECT)"
        )
    if not parts.hostname:
        raise ValueError(f"{variable}: no proxy host in it")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{variable}: the proxy's port is not a number") from None
    netloc = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    authorization = ""
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode()
    return Proxy(f"http://{netloc}:{port or 80}", authorization, variable, target.scheme == "https")
