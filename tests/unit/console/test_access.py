"""The console's access rules: sign-in, session cookies, loopback, policies (pure)."""

from __future__ import annotations

import pytest

from loghubd.console.access import TOKEN_USER, Gate, Viewer, sees_logstore
from loghubd.server import policy as P
from loghubd.server.auth import AccessKey

NOW = 1_800_000_000.0
NO_SECRETS = P.parse_policy(
    "no-secrets",
    {
        "statements": [
            {"effect": "Allow", "actions": ["log:*"], "resources": ["acs:log:*:*:project/*"]},
            {
                "effect": "Deny",
                "actions": ["log:*"],
                "resources": ["acs:log:*:*:project/demo/logstore/secret*"],
            },
        ]
    },
    "policies.no-secrets",
)
READ_ONLY_LOGS = P.parse_policy(
    "logs",
    {
        "statements": [
            {
                "effect": "Allow",
                "actions": ["log:GetCursorOrData"],
                "resources": ["acs:log:*:*:project/demo/logstore/app"],
            }
        ]
    },
    "policies.logs",
)
KEYS = {
    "admin": AccessKey("admin", "s3cret"),
    "limited": AccessKey("limited", "l1m", policy=NO_SECRETS),
    "old": AccessKey("old", "x", security_token="t", expires=NOW - 1),
}


def gate(**kw: object) -> Gate:
    args: dict[str, object] = {"keys": KEYS, "secret": b"k" * 32, **kw}
    return Gate(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key_id", "secret", "token", "subject"),
    [
        ("admin", "s3cret", "", "key:admin"),
        ("limited", "l1m", "", "key:limited"),
        ("", "", "tok", "token"),
    ],
)
def test_sign_in_accepts(key_id: str, secret: str, token: str, subject: str) -> None:
    assert gate(token="tok").sign_in(key_id, secret, token, NOW) == subject


@pytest.mark.parametrize(
    ("key_id", "secret", "token", "reason"),
    [
        ("admin", "wrong", "", "do not match"),
        ("nobody", "s3cret", "", "do not match"),
        ("old", "x", "", "expired"),
        ("", "", "wrong", "token is not right"),
        ("admin", "s3cret", "tok", "token is not right"),  # a token, when given, decides
    ],
)
def test_sign_in_refuses_naming_why(key_id: str, secret: str, token: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        gate(token="other").sign_in(key_id, secret, token, NOW)


def test_a_token_cannot_sign_in_where_none_is_configured() -> None:
    with pytest.raises(ValueError, match="token"):
        gate().sign_in("", "", "anything", NOW)


def test_cookie_round_trip_carries_the_keys_policy() -> None:
    g = gate(token="tok")
    assert g.viewer(g.cookie("key:limited", NOW), NOW + 60) == Viewer(
        "limited", NO_SECRETS, P.DEFAULT_ACCOUNT
    )
    assert g.viewer(g.cookie("token", NOW), NOW) == Viewer(TOKEN_USER)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda c: c[:-2] + ("AA" if not c.endswith("AA") else "BB"),  # forged signature
        lambda c: "a2V5OmFkbWlu" + c[c.index(".") :],  # another subject, same signature
        lambda c: "",
        lambda c: "no dots",
    ],
)
def test_tampered_cookies_are_refused(mangle: object) -> None:
    g = gate()
    cookie = g.cookie("key:limited", NOW)
    assert g.viewer(mangle(cookie), NOW) is None  # type: ignore[operator]


def test_cookies_expire_and_die_with_their_key_or_the_secret() -> None:
    g = gate()
    cookie = g.cookie("key:admin", NOW)
    assert g.viewer(cookie, NOW + 12 * 3600 + 1) is None
    assert Gate({}, "", False, b"k" * 32).viewer(cookie, NOW) is not None  # no sign-in needed
    assert Gate({"other": KEYS["admin"]}, secret=b"k" * 32).viewer(cookie, NOW) is None
    assert gate(secret=b"z" * 32).viewer(cookie, NOW) is None  # restarted: new secret


@pytest.mark.parametrize(
    ("remote", "keys", "open_to_all", "allowed"),
    [
        ("127.0.0.1", {}, False, True),
        ("::1", {}, False, True),
        ("127.3.4.5", {}, False, True),
        ("192.0.2.7", {}, False, False),
        (None, {}, False, False),
        ("not an address", {}, False, False),
        ("192.0.2.7", {}, True, True),
        ("192.0.2.7", KEYS, False, True),  # with credentials, the sign-in guards it
    ],
)
def test_without_credentials_only_loopback_unless_open(
    remote: str | None, keys: dict[str, AccessKey], open_to_all: bool, allowed: bool
) -> None:
    assert Gate(keys, "", open_to_all).allows_address(remote) is allowed


@pytest.mark.parametrize(
    ("viewer", "logstore", "sees"),
    [
        (Viewer("admin"), "secret-x", True),
        (Viewer("l", NO_SECRETS), "app", True),
        (Viewer("l", NO_SECRETS), "secret-x", False),
        (Viewer("r", READ_ONLY_LOGS), "app", True),  # may read its logs: listed
        (Viewer("r", READ_ONLY_LOGS), "other", False),
    ],
)
def test_a_logstore_is_listed_only_when_the_policy_allows_something_on_it(
    viewer: Viewer, logstore: str, sees: bool
) -> None:
    assert sees_logstore(viewer, "demo", logstore) is sees
