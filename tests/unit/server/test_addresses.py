"""Who a client is, for serve's per-address connection limit and the refused sign-in
throttle, and whether it is this machine (loghubd.server.addresses)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from loghubd.server.addresses import client_key, is_loopback


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("127.0.0.1", "127.0.0.1"),
        ("::ffff:192.0.2.7", "192.0.2.7"),  # IPv4 from a dual-stack socket: the same client
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("2001:db8:1:3::1", "2001:db8:1:3::/64"),  # the next /64: another client
        ("fe80::1%eth0", "fe80::/64"),  # the zone is left out
        ("::1", "::/64"),
        ("", ""),  # a Unix socket's peer: its own key
        ("not an address", "not an address"),
    ],
)
def test_client_key(host: str, key: str) -> None:
    assert client_key(host) == key


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),  # mapped: ipaddress alone says False on Python 3.11
        ("192.0.2.7", False),
        ("::ffff:192.0.2.7", False),
        ("fe80::1%lo", False),
        ("", False),
        (None, False),
        ("localhost", False),  # a name is not an address
    ],
)
def test_is_loopback(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


ipv6 = st.integers(min_value=0, max_value=2**128 - 1).map(ipaddress.IPv6Address)


@given(ipv6, st.integers(min_value=0, max_value=2**64 - 1))
def test_every_address_of_a_64_is_one_client(address: ipaddress.IPv6Address, host: int) -> None:
    assume(address.ipv4_mapped is None)  # an IPv4 client, checked below
    same_64 = ipaddress.IPv6Address((int(address) >> 64 << 64) | host)
    assert client_key(str(address)) == client_key(str(same_64))
    assert ipaddress.ip_network(client_key(str(address))).prefixlen == 64


@given(ipv6, ipv6)
def test_different_64s_are_different_clients(
    a: ipaddress.IPv6Address, b: ipaddress.IPv6Address
) -> None:
    assume(a.ipv4_mapped is None and b.ipv4_mapped is None)
    assert (client_key(str(a)) == client_key(str(b))) == (int(a) >> 64 == int(b) >> 64)


@given(st.integers(min_value=0, max_value=2**32 - 1).map(ipaddress.IPv4Address))
def test_an_ipv4_client_is_its_address_mapped_or_not(address: ipaddress.IPv4Address) -> None:
    assert client_key(str(address)) == str(address)
    assert client_key(f"::ffff:{address}") == str(address)
    assert is_loopback(f"::ffff:{address}") is address.is_loopback
