"""Access control of `loghubd serve`: RAM-style policies, the API → (action, resource) table,
STS tokens and the access-keys file.

The allow/deny table goes through the same path as a request does: the route is resolved
with `routes.resolve`, its target with `routes.target`, the key comes from a real access-keys
file (`auth.load_access_keys`) and `auth.authorize` decides, so a row is an (action, resource,
key) triple as the server sees it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loghubd.protocol import errors as E
from loghubd.protocol import signing
from loghubd.server import auth, routes
from loghubd.server import policy as P

# -- the RAM semantics ------------------------------------------------------------------------


def pol(*statements: tuple[str, list[str], list[str]]) -> P.Policy:
    return P.Policy(
        "t",
        tuple(P.Statement(e, tuple(a), tuple(r)) for e, a, r in statements),  # type: ignore[arg-type]
    )


LS = "acs:log:local:0:project/demo/logstore/app"


@pytest.mark.parametrize(
    ("policy", "action", "resource", "allowed"),
    [
        pytest.param(pol(), "log:GetCursorOrData", LS, False, id="no-statement-denies"),
        pytest.param(
            pol(("Allow", ["log:GetCursorOrData"], [LS])), "log:GetCursorOrData", LS, True,
            id="exact",
        ),
        pytest.param(
            pol(("Allow", ["log:GetCursorOrData"], [LS])), "log:ListShards", LS, False,
            id="other-action",
        ),
        pytest.param(
            pol(("Allow", ["log:GetCursorOrData"], [LS])), "log:GetCursorOrData", LS + "2",
            False, id="resource-is-not-a-prefix",
        ),
        pytest.param(pol(("Allow", ["log:*"], ["*"])), "log:DeleteProject", LS, True, id="log:*"),
        pytest.param(pol(("Allow", ["*"], ["*"])), "log:DeleteProject", LS, True, id="star"),
        pytest.param(
            pol(("Allow", ["log:Get*"], ["*"])), "log:GetCursorOrData", LS, True, id="log:Get*"
        ),
        pytest.param(
            pol(("Allow", ["log:Get*"], ["*"])), "log:ListShards", LS, False, id="log:Get*-no"
        ),
        pytest.param(
            pol(("Allow", ["log:getcursorordata"], [LS])), "log:GetCursorOrData", LS, True,
            id="actions-ignore-case",
        ),
        pytest.param(
            pol(("Allow", ["log:GetCursorOrData"], [LS.upper()])), "log:GetCursorOrData", LS,
            False, id="resources-keep-case",
        ),
        pytest.param(
            pol(("Allow", ["log:ListShards"], ["acs:log:*:*:project/demo/logstore/app?"])),
            "log:ListShards", LS + "1", True, id="question-mark-one-char",
        ),
        pytest.param(
            pol(("Allow", ["log:ListShards"], ["acs:log:*:*:project/demo/logstore/app?"])),
            "log:ListShards", LS, False, id="question-mark-not-zero",
        ),
        pytest.param(
            pol(("Allow", ["log:ListShards"], ["acs:log:*:*:project/demo/*"])),
            "log:ListShards", LS + "/consumergroup/g", True, id="star-crosses-slashes",
        ),
        pytest.param(
            pol(("Allow", ["log:*"], ["*"]), ("Deny", ["log:Delete*"], ["*"])),
            "log:DeleteLogStore", LS, False, id="deny-wins",
        ),
        pytest.param(
            pol(("Deny", ["log:Delete*"], ["*"]), ("Allow", ["log:*"], ["*"])),
            "log:DeleteLogStore", LS, False, id="deny-wins-in-any-order",
        ),
        pytest.param(
            pol(("Allow", ["log:*"], ["*"]), ("Deny", ["log:Delete*"], ["*"])),
            "log:GetLogStore", LS, True, id="deny-elsewhere-does-not-matter",
        ),
        pytest.param(
            pol(("Deny", ["log:PostLogStoreLogs"], [LS])), "log:GetCursorOrData", LS, False,
            id="deny-only-allows-nothing",
        ),
        pytest.param(
            pol(("Allow", ["log:PostLogStoreLogs"], ["acs:log:*:*:project/a.b/*"])),
            "log:PostLogStoreLogs", "acs:log:local:0:project/aXb/logstore/x", False,
            id="dot-is-literal",
        ),
    ],
)  # fmt: skip
def test_evaluate(policy: P.Policy, action: str, resource: str, allowed: bool) -> None:
    assert P.evaluate(policy, action, resource) is allowed


def test_decide_says_why() -> None:
    policy = pol(("Allow", ["log:*"], ["*"]), ("Deny", ["log:Delete*"], ["*"]))
    assert P.decide(policy, "log:DeleteShard", LS) is P.Decision.EXPLICIT_DENY
    assert P.decide(pol(), "log:DeleteShard", LS) is P.Decision.IMPLICIT_DENY
    assert P.decide(policy, "log:ListShards", LS) is P.Decision.ALLOW


# -- the action table -------------------------------------------------------------------------


def test_every_route_has_an_action() -> None:
    for route in routes.ROUTES:
        for a in (route.api, *route.variants.values()):
            assert a.action.startswith("log:"), a


def test_the_api_names_of_the_metrics_have_the_documented_actions() -> None:
    """Every API name `loghubd serve` implements (route names and their query refinements, as
    its metrics label them) maps to the action the README documents."""
    for route in routes.ROUTES:
        for value, a in route.variants.items():
            if a.implemented:
                assert route.api_for({route.refine: value}).action == routes.API_ACTIONS[a.name]
    list_projects = routes.resolve("GET", (), "service")
    assert list_projects.api.action == routes.API_ACTIONS["ListProject"]
    group_get = routes.resolve("GET", ("logstores", "ls", "consumergroups", "g"))
    assert (
        group_get.api_for({"type": "status"}).action
        == (routes.API_ACTIONS["GetConsumerGroupStatus"])
    )


# -- keys and policies from a file; (action, resource, key) triples -----------------------------

ACCESS_KEYS = """
account_id = "1234"

[[keys]]
id = "admin"
secret = "admin-secret"

[[keys]]
id = "STS.consumer"
secret = "consumer-secret"
security_token = "token-of-consumer"
expires = 2100-01-01T00:00:00Z
policy = "daemon"

[[keys]]
id = "reader"
secret = "reader-secret"
policy = "read-demo"

[[keys]]
id = "writer"
secret = "writer-secret"
policy = ["write-app", "read-demo"]

[[keys]]
id = "operator"
secret = "operator-secret"
policy = "all-but-delete"

[[keys]]
id = "lower"
secret = "lower-secret"
policy = "lower-case-actions"

[[policies.daemon.statements]]
effect = "Allow"
actions = ["log:GetCursorOrData", "log:ListShards"]
resources = ["acs:log:*:*:project/demo/logstore/app"]

[[policies.daemon.statements]]
effect = "Allow"
actions = ["log:ListConsumerGroup", "log:CreateConsumerGroup"]
resources = ["acs:log:*:*:project/demo/logstore/app/consumergroup/*"]

[[policies.daemon.statements]]
effect = "Allow"
actions = [
  "log:ConsumerGroupHeartBeat",
  "log:ConsumerGroupUpdateCheckPoint",
  "log:GetConsumerGroupCheckPoint",
]
resources = ["acs:log:*:*:project/demo/logstore/app/consumergroup/g1"]

[policies.read-demo]
statements = [
  { effect = "Allow", actions = ["log:Get*", "log:List*"], resources = "acs:*project/demo*" },
]

[[policies.write-app.statements]]
effect = "Allow"
actions = "log:PostLogStoreLogs"
resources = "acs:log:*:1234:project/demo/logstore/app"

[[policies.all-but-delete.statements]]
effect = "Allow"
actions = ["log:*"]
resources = ["*"]

[[policies.all-but-delete.statements]]
effect = "Deny"
actions = ["log:Delete*"]
resources = ["acs:log:*:*:project/demo", "acs:log:*:*:project/demo/*"]

[policies.lower-case-actions]
statements = [
  { effect = "Allow", actions = ["log:listshards"], resources = ["acs:log:*:*:project/*"] },
]
"""


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, auth.AccessKey]:
    path = tmp_path_factory.mktemp("keys") / "keys.toml"
    path.write_text(ACCESS_KEYS)
    return auth.load_access_keys(path)


@dataclass(frozen=True)
class Req:
    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    project: str = "demo"

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(p for p in self.path.split("/") if p)


R = "acs:log:local:1234:project/demo"
APP = R + "/logstore/app"
G1 = APP + "/consumergroup/g1"

# What each request of the server needs: request → (action, resource).
REQUESTS: dict[str, tuple[Req, str, str]] = {
    "ListProject": (Req("GET", "/", project=""), "log:ListProject", "acs:log:local:1234:project/*"),
    "CreateProject": (Req("POST", "/", body=b'{"projectName": "demo"}'), "log:CreateProject", R),
    "CreateProject-service-host": (
        Req("POST", "/", body=b'{"projectName": "demo"}', project=""), "log:CreateProject", R,
    ),
    "GetProject": (Req("GET", "/"), "log:GetProject", R),
    "UpdateProject": (Req("PUT", "/"), "log:UpdateProject", R),
    "DeleteProject": (Req("DELETE", "/"), "log:DeleteProject", R),
    "CreateLogStore": (
        Req("POST", "/logstores", body=b'{"logstoreName": "app", "ttl": 1, "shardCount": 2}'),
        "log:CreateLogStore", APP,
    ),
    "ListLogStores": (Req("GET", "/logstores"), "log:ListLogStores", R + "/logstore/*"),
    "GetLogStore": (Req("GET", "/logstores/app"), "log:GetLogStore", APP),
    "UpdateLogStore": (Req("PUT", "/logstores/app"), "log:UpdateLogStore", APP),
    "DeleteLogStore": (Req("DELETE", "/logstores/app"), "log:DeleteLogStore", APP),
    "ListShards": (Req("GET", "/logstores/app/shards"), "log:ListShards", APP),
    "PutLogs": (Req("POST", "/logstores/app/shards/lb"), "log:PostLogStoreLogs", APP),
    "PutLogs-route": (
        Req("POST", "/logstores/app/shards/route", {"key": "ff"}), "log:PostLogStoreLogs", APP,
    ),
    "GetCursor": (
        Req("GET", "/logstores/app/shards/0", {"type": "cursor", "from": "begin"}),
        "log:GetCursorOrData", APP,
    ),
    "GetCursorTime": (
        Req("GET", "/logstores/app/shards/0", {"type": "cursor_time", "cursor": "x"}),
        "log:GetCursorOrData", APP,
    ),
    "PullLogs": (
        Req("GET", "/logstores/app/shards/0", {"type": "log", "cursor": "x"}),
        "log:GetCursorOrData", APP,
    ),
    "SplitShard": (
        Req("POST", "/logstores/app/shards/0", {"action": "split", "key": "8" * 32}),
        "log:SplitShard", APP,
    ),
    "MergeShard": (
        Req("POST", "/logstores/app/shards/0", {"action": "merge"}), "log:MergeShard", APP,
    ),
    "DeleteShard": (Req("DELETE", "/logstores/app/shards/0"), "log:DeleteShard", APP),
    "CreateConsumerGroup": (
        Req("POST", "/logstores/app/consumergroups",
            body=b'{"consumerGroup": "g1", "timeout": 30, "order": false}'),
        "log:CreateConsumerGroup", G1,
    ),
    "ListConsumerGroup": (
        Req("GET", "/logstores/app/consumergroups"), "log:ListConsumerGroup",
        APP + "/consumergroup/*",
    ),
    "UpdateConsumerGroup": (
        Req("PUT", "/logstores/app/consumergroups/g1"), "log:UpdateConsumerGroup", G1,
    ),
    "DeleteConsumerGroup": (
        Req("DELETE", "/logstores/app/consumergroups/g1"), "log:DeleteConsumerGroup", G1,
    ),
    "ConsumerGroupHeartBeat": (
        Req("POST", "/logstores/app/consumergroups/g1", {"type": "heartbeat", "consumer": "c"}),
        "log:ConsumerGroupHeartBeat", G1,
    ),
    "ConsumerGroupUpdateCheckPoint": (
        Req("POST", "/logstores/app/consumergroups/g1", {"type": "checkpoint", "consumer": "c"}),
        "log:ConsumerGroupUpdateCheckPoint", G1,
    ),
    "ConsumerGroupLeave": (
        Req("POST", "/logstores/app/consumergroups/g1", {"type": "leave", "consumer": "c"}),
        "log:ConsumerGroupHeartBeat", G1,
    ),
    "ConsumerGroupPost-unknown-type": (
        Req("POST", "/logstores/app/consumergroups/g1", {"type": "bogus"}),
        "log:ConsumerGroupUpdateCheckPoint", G1,
    ),
    "GetCheckPoint": (
        Req("GET", "/logstores/app/consumergroups/g1", {"shard": "0"}),
        "log:GetConsumerGroupCheckPoint", G1,
    ),
    "GetConsumerGroupStatus": (
        Req("GET", "/logstores/app/consumergroups/g1", {"type": "status"}),
        "log:GetConsumerGroupCheckPoint", G1,
    ),
}  # fmt: skip

# Calls `loghubd run` makes (loghubd/app.py, loghubd/consumer/*.py): ensure_group lists and
# (if missing) creates the group; heartbeat; the fetcher pulls, reads cursors and cursor times
# and asks ListShards for read-only shards; checkpoints are read and committed; leave at exit.
DAEMON_CALLS = [
    "ListConsumerGroup", "CreateConsumerGroup", "ConsumerGroupHeartBeat", "GetCursor",
    "GetCursorTime", "PullLogs", "ListShards", "GetCheckPoint", "ConsumerGroupUpdateCheckPoint",
    "ConsumerGroupLeave",
]  # fmt: skip


def required(req: Req, account: str = "1234") -> tuple[str, str]:
    """(action, resource) the server evaluates for `req`, the way `api._handle` does."""
    route = routes.resolve(req.method, req.parts, "project" if req.project else "service")
    target = routes.target(route, req.parts, req.body, req.project)
    return route.api_for(req.query).action, routes.resource(target, account)


def authorize(key: auth.AccessKey, req: Req) -> None:
    auth.authorize(key, *required(req, key.account_id))


def test_every_route_has_a_row() -> None:
    covered = {
        id(routes.resolve(r.method, r.parts, "project" if r.project else "service"))
        for r, _a, _res in REQUESTS.values()
    }
    implemented = {id(r) for r in routes.ROUTES if r.api.implemented}
    assert covered == implemented


@pytest.mark.parametrize("name", list(REQUESTS))
def test_required_action_and_resource(name: str) -> None:
    req, action, resource = REQUESTS[name]
    got = required(req)
    assert got == (action, resource)
    if name in routes.API_ACTIONS:
        assert routes.API_ACTIONS[name] == action


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"logstoreName": 12345, "ttl": 1}', "ParameterInvalid"),  # issue 13 item 1
        (b'{"logstoreName": ["app"], "ttl": 1}', "ParameterInvalid"),
        (b'{"logstoreName": null}', "ParameterInvalid"),
        (b'{"logstoreName": ""}', "ParameterInvalid"),
        (b'{"ttl": 1}', "LogStoreInfoInvalid"),
        (b"not json", "LogStoreInfoInvalid"),
    ],
)
def test_names_are_checked_to_their_type_before_the_policy(body: bytes, code: str) -> None:
    """A name that is not a non-empty string is refused before any policy sees it (a number
    was once evaluated as "*" by the policy and used as str() by the handler)."""
    with pytest.raises(E.SlsError) as info:
        required(Req("POST", "/logstores", body=body))
    assert (info.value.http_status, info.value.error_code) == (400, code)


ALLOWED: dict[str, set[str]] = {
    "admin": set(REQUESTS),
    # plus what the same actions cover: the status extension and an invalid type=
    "STS.consumer": {*DAEMON_CALLS, "GetConsumerGroupStatus", "ConsumerGroupPost-unknown-type"},
    "reader": {
        "GetProject", "ListLogStores", "GetLogStore", "ListShards", "GetCursor", "GetCursorTime",
        "PullLogs", "ListConsumerGroup", "GetCheckPoint", "GetConsumerGroupStatus",
    },
    "operator": set(REQUESTS) - {
        "DeleteProject", "DeleteLogStore", "DeleteShard", "DeleteConsumerGroup",
    },
    "lower": {"ListShards"},
}  # fmt: skip
ALLOWED["writer"] = ALLOWED["reader"] | {"PutLogs", "PutLogs-route"}


@pytest.mark.parametrize("key_id", list(ALLOWED))
@pytest.mark.parametrize("name", list(REQUESTS))
def test_allowed_and_denied(keys: dict[str, auth.AccessKey], key_id: str, name: str) -> None:
    req, action, resource = REQUESTS[name]
    key = keys[key_id]

    def call() -> None:
        authorize(key, req)

    if name in ALLOWED[key_id]:
        call()
    else:
        with pytest.raises(E.Unauthorized) as info:
            call()
        assert info.value.http_status == 403
        assert info.value.error_code == "Unauthorized"
        assert action in info.value.message and resource in info.value.message
        assert key_id in info.value.message


@pytest.mark.parametrize(
    ("key_id", "req", "allowed"),
    [
        # the daemon's policy names one logstore, one group, one project
        ("STS.consumer", Req("GET", "/logstores/app2/shards"), False),
        ("STS.consumer", Req("GET", "/logstores/App/shards"), False),
        ("STS.consumer", Req("GET", "/logstores/app/shards", project="other"), False),
        ("STS.consumer", Req("POST", "/logstores/app/consumergroups/g2", {"type": "heartbeat"}),
         False),
        ("STS.consumer", Req("GET", "/logstores/app/consumergroups/g2"), False),
        ("STS.consumer", Req("POST", "/logstores/app/consumergroups",
                             body=b'{"consumerGroup": "g2", "timeout": 9}'), True),
        ("STS.consumer", Req("GET", "/logstores/app/consumergroups/g1", {"type": "status"}),
         True),
        # `project/demo*` also matches project demo2 (a prefix pattern), not Demo
        ("reader", Req("GET", "/logstores/x/shards", project="demo2"), True),
        ("reader", Req("GET", "/logstores/x/shards", project="Demo"), False),
        # the write policy names account 1234 explicitly; the file's account_id is 1234
        ("writer", Req("POST", "/logstores/app/shards/lb"), True),
        ("writer", Req("POST", "/logstores/app2/shards/lb"), False),
        # Deny on project demo only
        ("operator", Req("DELETE", "/logstores/app", project="scratch"), True),
        ("operator", Req("DELETE", "/", project="scratch"), True),
        ("operator", Req("DELETE", "/", project="demo"), False),
        ("lower", Req("GET", "/logstores/x/shards", project="anything"), True),
    ],
)  # fmt: skip
def test_wildcards_and_scopes(
    keys: dict[str, auth.AccessKey], key_id: str, req: Req, allowed: bool
) -> None:
    if allowed:
        authorize(keys[key_id], req)
    else:
        with pytest.raises(E.Unauthorized) as info:
            authorize(keys[key_id], req)
        assert info.value.http_status == 403


def test_explicit_deny_is_named(keys: dict[str, auth.AccessKey]) -> None:
    with pytest.raises(E.Unauthorized, match="explicitly denied in policy 'all-but-delete'"):
        authorize(keys["operator"], Req("DELETE", "/logstores/app"))
    with pytest.raises(E.Unauthorized, match="not allowed by any statement in policy 'daemon'"):
        authorize(keys["STS.consumer"], Req("DELETE", "/"))


# -- signatures, STS tokens, expiry (auth.verify) ---------------------------------------------


def signed(
    ak: str,
    secret: str,
    *,
    token: str = "",
    version: str = "v1",
    path: str = "/logstores/app/shards",
) -> auth.SignedRequest:
    headers = {"host": "demo.sls.local", "x-log-apiversion": "0.6.0"}
    creds = signing.Credentials(ak, secret, token)
    if version == "v4":
        now = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        signing.sign_v4(creds, "cn-test", now, "GET", path, {}, headers, b"")
    else:
        signing.sign_v1(creds, "GET", path, {}, headers, b"")
    return auth.SignedRequest("GET", path, {}, headers, b"")


def stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@pytest.mark.parametrize("version", ["v1", "v4"])
@pytest.mark.parametrize(
    ("req_args", "now", "code", "status"),
    [
        pytest.param(("admin", "admin-secret", ""), None, None, 200, id="good-key"),
        pytest.param(("admin", "wrong", ""), None, "SignatureNotMatch", 401, id="wrong-secret"),
        pytest.param(("nobody", "x", ""), None, "InvalidAccessKeyId", 401, id="wrong-key-id"),
        pytest.param(
            ("admin", "admin-secret", "a-token"), None, "Unauthorized", 401, id="token-on-plain-key"
        ),
        pytest.param(
            ("STS.consumer", "consumer-secret", "token-of-consumer"), None, None, 200,
            id="sts-good",
        ),
        pytest.param(
            ("STS.consumer", "consumer-secret", ""), None, "Unauthorized", 401, id="sts-no-token"
        ),
        pytest.param(
            ("STS.consumer", "consumer-secret", "token-of-someone"), None, "Unauthorized", 401,
            id="sts-wrong-token",
        ),
        pytest.param(
            ("STS.consumer", "consumer-secret", "token-of-consumer"),
            "2100-01-01T00:00:00+00:00", "SecurityTokenExpired", 401, id="sts-expired",
        ),
        pytest.param(
            ("STS.consumer", "consumer-secret", "token-of-consumer"),
            "2099-12-31T23:59:59+00:00", None, 200, id="sts-one-second-before-expiry",
        ),
        pytest.param(
            ("STS.consumer", "wrong", "token-of-consumer"), "2100-01-01T00:00:00+00:00",
            "SignatureNotMatch", 401, id="expired-and-mis-signed",
        ),
    ],
)  # fmt: skip
def test_verify(
    keys: dict[str, auth.AccessKey],
    version: str,
    req_args: tuple[str, str, str],
    now: str | None,
    code: str | None,
    status: int,
) -> None:
    ak, secret, token = req_args
    req = signed(ak, secret, token=token, version=version)
    # the request is signed now; checking it "later" moves the clock, not the Date header
    at = time.time() if now is None else stamp(now)
    skew = 0.0 if now is None else at - time.time()
    if code is None:
        assert _verify_at(req, keys, at, skew) == ak
        return
    with pytest.raises(E.SlsError) as info:
        _verify_at(req, keys, at, skew)
    assert (info.value.error_code, info.value.http_status) == (code, status)


def _verify_at(
    req: auth.SignedRequest, keys: Mapping[str, auth.AccessKey], at: float, skew: float
) -> str:
    """verify() at a future time: the key's expiry moves back by `skew` instead, so the
    request's own date stays within the 15-minute window."""
    shifted = {
        k: auth.AccessKey(
            v.id,
            v.secret,
            v.security_token,
            None if v.expires is None else v.expires - skew,
            v.policy,
            v.account_id,
        )
        for k, v in keys.items()
    }
    return auth.verify(req, shifted, at - skew)


def test_verify_unsigned(keys: dict[str, auth.AccessKey]) -> None:
    req = auth.SignedRequest("GET", "/", {}, {"host": "demo.sls.local"}, b"")
    with pytest.raises(E.Unauthorized) as info:
        auth.verify(req, keys, time.time())
    assert info.value.http_status == 401


def test_expired_message_names_the_time(keys: dict[str, auth.AccessKey]) -> None:
    key = keys["STS.consumer"]
    assert key.expires == stamp("2100-01-01T00:00:00+00:00")
    expired = {key.id: auth.AccessKey(key.id, key.secret, key.security_token, time.time() - 1)}
    req = signed(key.id, key.secret, token=key.security_token)
    with pytest.raises(E.SecurityTokenExpired, match=r"STS\.consumer.*expired at 20"):
        auth.verify(req, expired, time.time())


# -- the access-keys file ---------------------------------------------------------------------

KEY = '[[keys]]\nid = "k"\nsecret = "s"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected one or more [[keys]]"),
        ('whatever = 1\n' + KEY, "whatever: unknown key"),
        ('account_id = ""\n' + KEY, "account_id: a non-empty string"),
        ('account_id = "a:b"\n' + KEY, "account_id"),
        ('[[keys]]\nid = "k"\n', "keys[0].secret: required"),
        (KEY + 'colour = "red"\n', "keys[0].colour: unknown key"),
        (KEY + KEY, "keys[1] (k).id: defined twice"),
        (KEY + 'security_token = ""\n', "keys[0] (k).security_token: a non-empty string"),
        (KEY + 'security_token = 5\n', "keys[0] (k).security_token"),
        (KEY + 'expires = 2030-01-01T00:00:00Z\n', "keys[0] (k).expires: only STS keys expire"),
        (KEY + 'security_token = "t"\nexpires = 2030-01-01T00:00:00\n',
         "keys[0] (k).expires: the time needs a time zone"),
        (KEY + 'security_token = "t"\nexpires = 2030-01-01\n',
         "keys[0] (k).expires: a date and time with a time zone"),
        (KEY + 'security_token = "t"\nexpires = "soon"\n', "keys[0] (k).expires: must be an ISO"),
        (KEY + 'security_token = "t"\nexpires = "2030-01-01T00:00:00"\n',
         "keys[0] (k).expires: the time needs a time zone"),
        (KEY + 'policy = "nope"\n', "keys[0] (k).policy: no [policies.nope] table"),
        (KEY + 'policy = 3\n', "keys[0] (k).policy: the name of a [policies.<name>] table"),
        (KEY + 'policy = []\n', "keys[0] (k).policy"),
        ('policies = 1\n' + KEY, "policies: must be a table"),
        (KEY + '[policies.p]\n', "policies.p.statements: required"),
        (KEY + '[policies.p]\nstatements = []\n', "policies.p.statements: required"),
        (KEY + '[policies.p]\nversion = "1"\nstatements = []\n', "policies.p.version: unknown"),
        (KEY + '[policies.p]\nstatements = [1]\n', "policies.p.statements[0]: must be a table"),
        (KEY + '[policies.p]\nstatements = [{effect = "allow", actions = ["*"], '
         'resources = ["*"]}]\n',
         'policies.p.statements[0].effect: must be "Allow" or "Deny"'),
        (KEY + '[policies.p]\nstatements = [{effect = "Allow", resources = ["*"]}]\n',
         "policies.p.statements[0].actions: required"),
        (KEY + '[policies.p]\nstatements = [{effect = "Allow", actions = [], resources = ["*"]}]\n',
         "policies.p.statements[0].actions: required"),
        (KEY + '[policies.p]\nstatements = [{effect = "Allow", actions = ["GetCursorOrData"], '
         'resources = ["*"]}]\n', "policies.p.statements[0].actions[0]: 'GetCursorOrData' is not"),
        (KEY + '[policies.p]\nstatements = [{effect = "Allow", actions = ["log:X", ""], '
         'resources = ["*"]}]\n', "policies.p.statements[0].actions[1]: must be a non-empty"),
        (KEY + '[policies.p]\nstatements = [{effect = "Allow", actions = ["*"]}]\n',
         "policies.p.statements[0].resources: required"),
        (KEY + '[policies.p]\nstatements = [{effect = "Allow", actions = ["*"], '
         'resources = ["project/demo"]}]\n', "policies.p.statements[0].resources[0]: 'project"),
        (KEY + '[policies.p]\nstatements = [{effect = "Allow", actions = ["*"], '
         'resources = ["*"], condition = {}}]\n', "policies.p.statements[0].condition: unknown"),
    ],
)  # fmt: skip
def test_access_keys_file_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(text)
    with pytest.raises(auth.AccessKeysError) as info:
        auth.load_access_keys(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_old_files_keep_full_access(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(KEY + '\n[[keys]]\nid = "k2"\nsecret = "s2"\n')
    keys = auth.load_access_keys(path)
    assert keys["k"] == auth.AccessKey("k", "s")
    assert keys["k2"].policy is None
    authorize(keys["k"], Req("DELETE", "/", project="anything"))


def test_expiry_forms(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    forms = [
        "2030-01-01T00:00:00Z",
        '"2030-01-01T00:00:00Z"',
        '"2030-01-01T08:00:00+08:00"',
        "2030-01-01T08:00:00+08:00",
    ]
    for form in forms:
        path.write_text(KEY + f'security_token = "t"\nexpires = {form}\n')
        assert auth.load_access_keys(path)["k"].expires == stamp("2030-01-01T00:00:00+00:00")


# -- the README documents the same ------------------------------------------------------------


def _readme_section() -> str:
    """The access-control reference (moved from the README to docs/ by issue #18)."""
    return (Path(__file__).resolve().parents[3] / "docs" / "access-control.md").read_text()


def test_readme_examples_load(tmp_path: Path) -> None:
    blocks = _readme_section().split("```toml\n")[1:]
    assert len(blocks) == 2
    example, minimal = (b.split("```")[0] for b in blocks)
    path = tmp_path / "keys.toml"
    path.write_text(example)
    assert auth.load_access_keys(path)["STS.consumer"].policy is not None
    path.write_text('[[keys]]\nid = "k"\nsecret = "s"\npolicy = "loghubd-run"\n' + minimal)
    daemon = auth.load_access_keys(path)["k"].policy
    assert daemon is not None
    granted = {a for st in daemon.statements for a in st.actions}
    assert granted == {routes.API_ACTIONS[name] for name in DAEMON_CALLS}


def test_readme_names_every_action() -> None:
    section = _readme_section()
    for action in set(routes.API_ACTIONS.values()):
        assert f"`{action}`" in section, action
