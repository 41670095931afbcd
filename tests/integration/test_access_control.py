"""Access control of a real `loghubd serve --access-keys FILE`, over HTTP.

- loghubd's own client (`SlsClient`, v1 and v4 signatures) and the official SDK: unsigned,
  mis-signed, wrong-key, STS token missing/wrong/expired and policy-denied requests get the
  exact status and SLS code; allowed requests work; nothing a refused request sent is stored.
- A real `loghubd run` daemon whose STS key carries exactly the minimal policy the README
  documents consumes a logstore end to end; with a policy lacking one of those actions (or
  an expired token) it is refused: readiness 503 naming the action, or exit 1 at start-up.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import anyio
import pytest
from aliyun.log import LogClient, LogException, LogItem, PutLogsRequest

from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E
from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient
from loghubd.testing.process import ServerProcess
from tests.integration import daemon_harness as H
from tests.integration.sls_http import log_group

PROJECT = H.PROJECT
LOGSTORE, OTHER, GROUP = "app", "other", "grp"
SHARDS = 4

ADMIN = Credentials("LTAIadmin0000001", "admin-secret")
DAEMON = Credentials("STS.daemon", "daemon-secret", "daemon-token")
EXPIRED = Credentials("STS.expired", "expired-secret", "expired-token")
READER = Credentials("LTAIreader000001", "reader-secret")
NO_HEARTBEAT = Credentials("STS.noheartbeat", "nh-secret", "nh-token")
NO_LIST = Credentials("STS.nolist", "nl-secret", "nl-token")
NO_CREATE = Credentials("STS.nocreate", "nc-secret", "nc-token")

LS_RES = f"acs:log:*:*:project/{PROJECT}/logstore/{LOGSTORE}"
# The minimal policy of `loghubd run` (README): action → resource pattern.
MINIMAL = {
    "log:GetCursorOrData": LS_RES,
    "log:ListShards": LS_RES,
    "log:ListConsumerGroup": f"{LS_RES}/consumergroup/*",
    "log:CreateConsumerGroup": f"{LS_RES}/consumergroup/*",
    "log:ConsumerGroupHeartBeat": f"{LS_RES}/consumergroup/{GROUP}",
    "log:ConsumerGroupUpdateCheckPoint": f"{LS_RES}/consumergroup/{GROUP}",
    "log:GetConsumerGroupCheckPoint": f"{LS_RES}/consumergroup/{GROUP}",
}


def policy_toml(name: str, grants: dict[str, str]) -> str:
    lines = []
    for action, res in grants.items():
        lines += [
            f"[[policies.{name}.statements]]",
            'effect = "Allow"',
            f"actions = [{json.dumps(action)}]",
            f"resources = [{json.dumps(res)}]",
            "",
        ]
    return "\n".join(lines)


def key_toml(creds: Credentials, policy: str | None = None, expires: str = "") -> str:
    out = f'[[keys]]\nid = "{creds.access_key_id}"\nsecret = "{creds.access_key_secret}"\n'
    if creds.security_token:
        out += f'security_token = "{creds.security_token}"\n'
    if expires:
        out += f"expires = {expires}\n"
    if policy:
        out += f'policy = "{policy}"\n'
    return out + "\n"


def without(*actions: str) -> dict[str, str]:
    return {a: r for a, r in MINIMAL.items() if a not in actions}


ACCESS_KEYS = "".join(
    [
        key_toml(ADMIN),
        key_toml(DAEMON, "daemon", "2100-01-01T00:00:00Z"),
        key_toml(EXPIRED, "daemon", "2020-01-01T00:00:00Z"),
        key_toml(READER, "reader"),
        key_toml(NO_HEARTBEAT, "no-heartbeat"),
        key_toml(NO_LIST, "no-list"),
        key_toml(NO_CREATE, "no-create"),
        policy_toml("daemon", MINIMAL),
        policy_toml("no-heartbeat", without("log:ConsumerGroupHeartBeat")),
        policy_toml("no-list", without("log:ListConsumerGroup")),
        policy_toml("no-create", without("log:CreateConsumerGroup")),
        policy_toml("reader", {"log:Get*": f"acs:log:*:*:project/{PROJECT}/*"}),
    ]
)

T = TypeVar("T")


@pytest.fixture
def acl_server(
    loghubd_server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> ServerProcess:
    keys = tmp_path / "access-keys.toml"
    keys.write_text(ACCESS_KEYS)
    server: ServerProcess = loghubd_server_factory("acl", extra_args=["--access-keys", str(keys)])
    as_(server, ADMIN, _setup)
    return server


async def _setup(c: SlsClient) -> None:
    await c.create_project("access control tests")
    await c.create_logstore(LOGSTORE, SHARDS)
    await c.create_logstore(OTHER, 1)


def as_(
    server: ServerProcess,
    creds: Credentials,
    fn: Callable[[SlsClient], Awaitable[T]],
    *,
    auth_version: str = "v1",
) -> T:
    """One call sequence through loghubd's own client, signed with `creds`."""

    async def main() -> T:
        async with aiohttp.ClientSession() as session:
            client = SlsClient(
                session,
                server.endpoint,
                PROJECT,
                lambda: creds,
                auth_version=auth_version,
                region="cn-test" if auth_version == "v4" else "",
                request_timeout=5.0,
            )
            return await fn(client)

    return anyio.run(main)


def refused(server: ServerProcess, creds: Credentials, fn: Any, auth_version: str) -> E.SlsError:
    with pytest.raises(E.SlsError) as info:
        as_(server, creds, fn, auth_version=auth_version)
    assert info.value.request_id, "every answer carries x-log-requestid"
    return info.value


def put(ids: list[str], logstore: str = LOGSTORE) -> Callable[[SlsClient], Awaitable[None]]:
    return lambda c: c.put_log_group(logstore, log_group(ids))


AUTH_VERSIONS = ["v1", "v4"]

# (credentials, call) → (HTTP status, SLS code)
REFUSALS: dict[str, tuple[Credentials, Callable[[SlsClient], Awaitable[object]], int, str]] = {
    "unsigned": (Credentials("", ""), lambda c: c.list_shards(LOGSTORE), 401, "Unauthorized"),
    "unsigned-write": (Credentials("", ""), put(["u1"]), 401, "Unauthorized"),
    "mis-signed": (
        Credentials(ADMIN.access_key_id, "not-the-secret"), put(["m1"]), 401, "SignatureNotMatch"
    ),
    "wrong-key": (
        Credentials("LTAInosuchkey999", ADMIN.access_key_secret), put(["w1"]), 401,
        "InvalidAccessKeyId",
    ),
    "expired-token": (EXPIRED, lambda c: c.list_shards(LOGSTORE), 401, "SecurityTokenExpired"),
    "expired-token-write": (EXPIRED, put(["e1"]), 401, "SecurityTokenExpired"),
    "sts-without-token": (
        Credentials(DAEMON.access_key_id, DAEMON.access_key_secret),
        lambda c: c.list_shards(LOGSTORE), 401, "Unauthorized",
    ),
    "sts-wrong-token": (
        Credentials(DAEMON.access_key_id, DAEMON.access_key_secret, "expired-token"),
        lambda c: c.list_shards(LOGSTORE), 401, "Unauthorized",
    ),
    "token-on-a-plain-key": (
        Credentials(ADMIN.access_key_id, ADMIN.access_key_secret, "daemon-token"),
        lambda c: c.list_shards(LOGSTORE), 401, "Unauthorized",
    ),
    "denied-write": (DAEMON, put(["d1"]), 403, "Unauthorized"),
    "denied-other-logstore": (DAEMON, lambda c: c.list_shards(OTHER), 403, "Unauthorized"),
    "denied-other-group": (
        DAEMON, lambda c: c.heartbeat(LOGSTORE, "g2", "c1", []), 403, "Unauthorized"
    ),
    "denied-delete": (
        DAEMON, lambda c: c.request("DELETE", f"/logstores/{LOGSTORE}"), 403, "Unauthorized"
    ),
    "denied-reader-heartbeat": (
        READER, lambda c: c.heartbeat(LOGSTORE, GROUP, "c1", []), 403, "Unauthorized"
    ),
    "denied-reader-write": (READER, put(["r1"]), 403, "Unauthorized"),
}  # fmt: skip


@pytest.mark.parametrize("auth_version", AUTH_VERSIONS)
def test_refused_requests_get_the_exact_status_and_code(
    acl_server: ServerProcess, auth_version: str
) -> None:
    for name, (creds, call, status, code) in REFUSALS.items():
        err = refused(acl_server, creds, call, auth_version)
        assert (err.http_status, err.error_code) == (status, code), (name, str(err))
        if status == 403:
            assert "may not perform log:" in err.message, (name, err.message)
    # nothing a refused client sent was stored
    for shard in range(SHARDS):
        begin = as_(acl_server, ADMIN, lambda c, s=shard: c.get_cursor(LOGSTORE, s, "begin"))
        end = as_(acl_server, ADMIN, lambda c, s=shard: c.get_cursor(LOGSTORE, s, "end"))
        assert begin == end, f"shard {shard} holds data from a refused request"


def test_denial_names_the_action_and_the_resource(acl_server: ServerProcess) -> None:
    err = refused(acl_server, DAEMON, put(["x"]), "v1")
    assert err.message == (
        f"access key 'STS.daemon' may not perform log:PostLogStoreLogs on "
        f"acs:log:local:0:project/{PROJECT}/logstore/{LOGSTORE}: "
        f"not allowed by any statement in policy 'daemon'"
    )
    err = refused(acl_server, READER, lambda c: c.heartbeat(LOGSTORE, GROUP, "c", []), "v1")
    assert "log:ConsumerGroupHeartBeat" in err.message
    assert f"project/{PROJECT}/logstore/{LOGSTORE}/consumergroup/{GROUP}" in err.message


@pytest.mark.parametrize("auth_version", AUTH_VERSIONS)
def test_allowed_requests_work(acl_server: ServerProcess, auth_version: str) -> None:
    """The daemon's key makes every call of a consumer's life; the reader reads; the admin
    (no policy: full access) writes."""
    as_(acl_server, ADMIN, put([f"a{i}" for i in range(20)]), auth_version=auth_version)

    async def consumer_life(c: SlsClient) -> int:
        assert await c.list_groups(LOGSTORE) == []
        await c.create_group(LOGSTORE, GROUP, 30, False)
        held = await c.heartbeat(LOGSTORE, GROUP, "c1", [])
        assert sorted(held) == list(range(SHARDS))
        shards = await c.list_shards(LOGSTORE)
        assert len(shards) == SHARDS
        logs = 0
        for shard in held:
            cursor = await c.get_cursor(LOGSTORE, shard, "begin")
            await c.cursor_time(LOGSTORE, shard, cursor)
            pulled = await c.pull(LOGSTORE, shard, cursor, 100)
            logs += pulled.count
            await c.commit(LOGSTORE, GROUP, "c1", shard, pulled.next_cursor)
            cps = await c.checkpoints(LOGSTORE, GROUP, shard)
            assert cps[0]["checkpoint"] == pulled.next_cursor
        assert (await c.group_status(LOGSTORE, GROUP))["consumers"] == ["c1"]
        await c.leave(LOGSTORE, GROUP, "c1")
        return logs

    assert as_(acl_server, DAEMON, consumer_life, auth_version=auth_version) == 1  # one group

    async def read(c: SlsClient) -> int:
        cursor = await c.get_cursor(LOGSTORE, 0, "begin")
        return (await c.pull(LOGSTORE, 0, cursor, 10)).count

    as_(acl_server, READER, read, auth_version=auth_version)


# -- the official SDK ---------------------------------------------------------------------------

SDK_AUTH = [
    pytest.param({"auth_version": "v1"}, id="v1"),
    pytest.param({"auth_version": "v4", "region": "cn-hangzhou"}, id="v4"),
]


def sdk(endpoint: str, creds: Credentials, auth: dict[str, str]) -> LogClient:
    return LogClient(
        endpoint,
        creds.access_key_id,
        creds.access_key_secret,
        securityToken=creds.security_token or None,
        source="loghubd-test",
        **auth,
    )


@pytest.mark.parametrize("auth", SDK_AUTH)
def test_official_sdk_refusals(
    acl_server: ServerProcess,
    sdk_via_proxy: Callable[[ServerProcess], str],
    auth: dict[str, str],
) -> None:
    endpoint = sdk_via_proxy(acl_server)
    item = [LogItem(contents=[("id", "sdk")])]
    cases: list[tuple[str, Credentials, Callable[[LogClient], object], int, str]] = [
        # the SDK signs nothing without a secret in v1; in v4 it sends an empty key id
        ("unsigned", Credentials("", ""), lambda c: c.list_shards(PROJECT, LOGSTORE),
         *((401, "Unauthorized") if auth["auth_version"] == "v1" else (400, "MissAccessKeyId"))),
        ("mis-signed", Credentials(ADMIN.access_key_id, "nope"),
         lambda c: c.put_logs(PutLogsRequest(PROJECT, LOGSTORE, logitems=item)),
         401, "SignatureNotMatch"),
        ("wrong-key", Credentials("LTAInosuchkey999", ADMIN.access_key_secret),
         lambda c: c.get_cursor(PROJECT, LOGSTORE, 0, "begin"), 401, "InvalidAccessKeyId"),
        ("expired-token", EXPIRED, lambda c: c.get_cursor(PROJECT, LOGSTORE, 0, "begin"),
         401, "SecurityTokenExpired"),
        ("sts-wrong-token", Credentials(DAEMON.access_key_id, DAEMON.access_key_secret, "forged"),
         lambda c: c.list_shards(PROJECT, LOGSTORE), 401, "Unauthorized"),
        ("denied-write", DAEMON,
         lambda c: c.put_logs(PutLogsRequest(PROJECT, LOGSTORE, logitems=item)),
         403, "Unauthorized"),
        ("denied-delete", DAEMON, lambda c: c.delete_logstore(PROJECT, LOGSTORE),
         403, "Unauthorized"),
        ("denied-other-logstore", DAEMON, lambda c: c.list_shards(PROJECT, OTHER),
         403, "Unauthorized"),
        ("denied-reader-checkpoint", READER,
         lambda c: c.update_check_point(PROJECT, LOGSTORE, GROUP, 0, "x", consumer="c"),
         403, "Unauthorized"),
    ]  # fmt: skip
    for name, creds, call, status, code in cases:
        with pytest.raises(LogException) as info:
            call(sdk(endpoint, creds, auth))
        got = (info.value.resp_status, info.value.get_error_code())
        assert got == (status, code), (name, info.value.get_error_message())
        assert info.value.get_request_id()
    admin = sdk(endpoint, ADMIN, auth)
    cursor = admin.get_cursor(PROJECT, LOGSTORE, 0, "begin").get_cursor()
    assert admin.pull_logs(PROJECT, LOGSTORE, 0, cursor).get_loggroup_count() == 0
    assert admin.get_logstore(PROJECT, LOGSTORE).get_shard_count() == SHARDS  # not deleted


@pytest.mark.parametrize("auth", SDK_AUTH)
def test_official_sdk_with_the_minimal_policy(
    acl_server: ServerProcess,
    sdk_via_proxy: Callable[[ServerProcess], str],
    auth: dict[str, str],
) -> None:
    endpoint = sdk_via_proxy(acl_server)
    admin = sdk(endpoint, ADMIN, auth)
    items = [LogItem(contents=[("id", str(i))]) for i in range(30)]
    admin.put_logs(PutLogsRequest(PROJECT, LOGSTORE, logitems=items, hashKey="0" * 32))
    c = sdk(endpoint, DAEMON, auth)  # STS: the SDK sends x-acs-security-token
    c.create_consumer_group(PROJECT, LOGSTORE, GROUP, 30)
    assert [g.get_consumer_group_name() for g in c.list_consumer_group(PROJECT, LOGSTORE)
            .get_consumer_groups()] == [GROUP]  # fmt: skip
    assert c.list_shards(PROJECT, LOGSTORE).get_shards_info()
    held = c.heart_beat(PROJECT, LOGSTORE, GROUP, "sdk-consumer", []).get_shards()
    assert sorted(held) == list(range(SHARDS))
    cursor = c.get_cursor(PROJECT, LOGSTORE, 0, "begin").get_cursor()
    c.get_cursor_time(PROJECT, LOGSTORE, 0, cursor)
    resp = c.pull_logs(PROJECT, LOGSTORE, 0, cursor)
    assert sum(len(g.Logs) for g in resp.get_loggroup_list().LogGroups) == 30
    nxt = resp.get_next_cursor()
    c.update_check_point(PROJECT, LOGSTORE, GROUP, 0, nxt, consumer="sdk-consumer")
    cps = c.get_check_point(PROJECT, LOGSTORE, GROUP, 0).get_consumer_group_check_points()
    assert cps[0]["checkpoint"] == nxt


# -- `loghubd run` with the minimal policy --------------------------------------------------


def readyz(daemon: H.Daemon) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{daemon.ops_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except (OSError, ValueError):
        return 0, {}


def daemon_with(
    pool: H.Pool, creds: Credentials, name: str, group: str = GROUP, **kwargs: Any
) -> H.Daemon:
    d = pool.daemon(LOGSTORE, group, name, start=False, **kwargs)
    d.config["source"].update(
        access_key_id=creds.access_key_id,
        access_key_secret=creds.access_key_secret,
        security_token=creds.security_token,
    )
    return d.start()


def write(server: ServerProcess, prefix: str, count: int, per_group: int = 50) -> list[str]:
    ids = [f"{prefix}{n}" for n in range(count)]

    async def go(c: SlsClient) -> None:
        for i in range(0, count, per_group):
            await c.put_log_group(LOGSTORE, log_group(ids[i : i + per_group]))

    as_(server, ADMIN, go)
    return ids


@pytest.mark.slow
@pytest.mark.parametrize(
    ("creds", "pre_create"),
    [
        pytest.param(DAEMON, False, id="creates-its-group"),
        pytest.param(NO_CREATE, True, id="pre-created-group-without-CreateConsumerGroup"),
    ],
)
def test_daemon_with_the_minimal_policy_consumes_end_to_end(
    acl_server: ServerProcess,
    daemon_pools: Callable[[ServerProcess], H.Pool],
    creds: Credentials,
    pre_create: bool,
) -> None:
    if pre_create:
        as_(acl_server, ADMIN, lambda c: c.create_group(LOGSTORE, GROUP, int(H.TIMEOUT), False))
    pool = daemon_pools(acl_server)
    written = write(acl_server, "a", 2_000)
    daemon = daemon_with(pool, creds, "minimal")
    daemon.wait_ready()
    written += write(acl_server, "b", 2_000)
    H.wait_until(
        lambda: H.count_lines([daemon.output]) >= len(written),
        30,
        lambda: f"{H.count_lines([daemon.output])}/{len(written)} delivered\n{daemon.log_tail()}",
    )
    assert readyz(daemon)[0] == 200
    assert daemon.stop() == 0, daemon.log_tail()
    report = H.delivery_report(written, H.read_ids([daemon.output]))
    assert report == {"missing": [], "duplicated": {}, "unexpected": []}, {
        k: H.short(v) for k, v in report.items()
    }
    assert daemon.events("left_group"), "the leave (log:ConsumerGroupHeartBeat) was allowed"
    assert not daemon.events("heartbeat_failed"), daemon.log_tail()

    async def committed(c: SlsClient) -> bool:
        cps = {int(r["shard"]): r["checkpoint"] for r in await c.checkpoints(LOGSTORE, GROUP)}
        for shard in range(SHARDS):
            end = await c.get_cursor(LOGSTORE, shard, "end")
            if cursors.to_seq(shard, cps.get(shard, "")) != cursors.to_seq(shard, end):
                return False
        return True

    assert as_(acl_server, ADMIN, committed), "every shard committed to its end"


@pytest.mark.slow
def test_daemon_without_heartbeat_permission_is_not_ready(
    acl_server: ServerProcess, daemon_pools: Callable[[ServerProcess], H.Pool]
) -> None:
    write(acl_server, "a", 200)
    daemon = daemon_with(daemon_pools(acl_server), NO_HEARTBEAT, "no-heartbeat")

    def refused_heartbeat() -> bool:
        status, body = readyz(daemon)
        reasons = " ".join(body.get("reasons", []))
        return status == 503 and "log:ConsumerGroupHeartBeat" in reasons

    H.wait_until(refused_heartbeat, 20, lambda: f"{readyz(daemon)}\n{daemon.log_tail()}")
    _status, body = readyz(daemon)
    reason = " ".join(body["reasons"])
    assert "not joined to the consumer group" in reason
    assert "Unauthorized" in reason and "STS.noheartbeat" in reason
    assert daemon.alive()
    assert not daemon.status()["held"]
    assert H.count_lines([daemon.output]) == 0  # it got no shard, so it read nothing
    daemon.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("creds", "group", "expected"),
    [
        pytest.param(NO_LIST, GROUP, ["Unauthorized", "log:ListConsumerGroup"], id="no-list"),
        pytest.param(
            NO_CREATE, GROUP, ["Unauthorized", "log:CreateConsumerGroup"],
            id="no-create-and-no-group",
        ),
        pytest.param(EXPIRED, GROUP, ["SecurityTokenExpired", "expired at 2020"], id="expired"),
    ],
)  # fmt: skip
def test_daemon_refused_at_start_exits_with_the_reason(
    acl_server: ServerProcess,
    daemon_pools: Callable[[ServerProcess], H.Pool],
    creds: Credentials,
    group: str,
    expected: list[str],
) -> None:
    daemon = daemon_with(daemon_pools(acl_server), creds, "refused", group=group)
    assert daemon.wait(30) == 1, daemon.log_tail()
    tail = daemon.log_tail()
    assert "cannot start: finding or creating consumer group" in tail
    for text in expected:
        assert text in tail, tail
