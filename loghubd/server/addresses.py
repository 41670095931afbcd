"""Client addresses, as serve and the consoles judge them. Pure: no I/O.

- `client_key`: who a connection is from, for `--max-connections-per-address` and for the
  throttle of refused sign-ins. An IPv4 client is its address. An IPv6 host is normally
  given a whole /64 and may use any address in it (privacy addresses rotate within it), so
  a client that took a new address for each connection would never meet a limit counted
  per exact address: an IPv6 client is its /64 network. An IPv4 address mapped into IPv6
  (`::ffff:192.0.2.1`, from a dual-stack socket) is that IPv4 address.
- `is_loopback`: whether a client is this machine (what `/metrics` and a console without
  credentials admit), for IPv4, IPv6 and IPv4 mapped into IPv6 alike.

A zone (`fe80::1%eth0`) is left out. Anything that is not an IP address (a Unix socket's
empty peer name) is its own key and never loopback.
"""

from __future__ import annotations

import ipaddress

IPV6_PREFIX = 64


def _address(host: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address((host or "").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def client_key(host: str) -> str:
    """The client a connection from `host` counts against (see the module's docstring)."""
    address = _address(host)
    if address is None:
        return host
    if isinstance(address, ipaddress.IPv4Address):
        return str(address)
    return str(ipaddress.IPv6Network((address, IPV6_PREFIX), strict=False))


def is_loopback(host: str | None) -> bool:
    """Whether a client address is this machine's."""
    address = _address(host)
    return address is not None and address.is_loopback
