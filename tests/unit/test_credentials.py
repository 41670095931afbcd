"""Credentials providers: JSON shapes, refresh timing, file change detection, command runs and
failures, the client's auth-error hook. Expiry is driven by a fake clock; the few tests of
the refresh loops themselves run on real time with short intervals."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
import structlog
from aiohttp import web

from loghubd.config import SourceConfig
from loghubd.protocol import errors as E
from loghubd.protocol.signing import Credentials
from loghubd.sls import CredentialsError, CredentialsUnavailable, SlsClient
from loghubd.sls import credentials as C

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
SECRET, TOKEN = "s3cr3t-value", "t0ken-value"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sts(key_id: str = "STS.a", expiration: object = None, **extra: Any) -> str:
    data: dict[str, Any] = {"AccessKeyId": key_id, "AccessKeySecret": SECRET}
    data["SecurityToken"] = TOKEN
    if expiration is not None:
        data["Expiration"] = expiration
    return json.dumps({**data, **extra})


def iso(when: float) -> str:
    return C.iso(when) or ""


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while True:
            if predicate():
                return
            await anyio.sleep(0.01)


# -- JSON shapes ----------------------------------------------------------------------------

PARSED = [
    (
        "STS Credentials",
        sts("STS.a", "2027-01-15T09:00:00Z"),
        Credentials("STS.a", SECRET, TOKEN),
        T0 + 3600,
    ),
    (
        "whole AssumeRole answer",
        json.dumps({"RequestId": "r", "Credentials": json.loads(sts("STS.b", iso(T0)))}),
        Credentials("STS.b", SECRET, TOKEN),
        T0,
    ),
    (
        "long-term keys, no expiration",
        json.dumps({"AccessKeyId": "LTAI", "AccessKeySecret": SECRET}),
        Credentials("LTAI", SECRET),
        None,
    ),
    (
        "aliyun CLI keys with sts_token and unix seconds",
        json.dumps(
            {
                "mode": "StsToken",
                "access_key_id": "STS.c",
                "access_key_secret": SECRET,
                "sts_token": TOKEN,
                "expiration": int(T0),
            }
        ),
        Credentials("STS.c", SECRET, TOKEN),
        T0,
    ),
    (
        "aliyun CLI keys with security_token and an offset",
        json.dumps(
            {
                "access_key_id": "STS.d",
                "access_key_secret": SECRET,
                "security_token": TOKEN,
                "expiration": "2027-01-15T16:00:00+08:00",
            }
        ),
        Credentials("STS.d", SECRET, TOKEN),
        T0,
    ),
    (
        "null expiration",
        sts("STS.e", None, Expiration=None),
        Credentials("STS.e", SECRET, TOKEN),
        None,
    ),
]


@pytest.mark.parametrize(
    ("text", "creds", "expiration"), [pytest.param(*c[1:], id=c[0]) for c in PARSED]
)
def test_parse(text: str, creds: Credentials, expiration: float | None) -> None:
    assert C.parse(text) == C.Issued(creds, expiration)


BAD = [
    ("not JSON", f'{{"AccessKeyId": "a", "AccessKeySecret": "{SECRET}"', "not JSON"),
    ("not an object", "[1]", "expected a JSON object"),
    ("unknown shape", json.dumps({"id": "a", "secret": SECRET}), "expected AccessKeyId"),
    ("empty id", json.dumps({"AccessKeyId": "", "AccessKeySecret": SECRET}), "AccessKeyId:"),
    ("no secret", json.dumps({"access_key_id": "a"}), "access_key_secret: expected a non-empty"),
    (
        "secret not a string",
        json.dumps({"AccessKeyId": "a", "AccessKeySecret": 5}),
        "AccessKeySecret:",
    ),
    ("token not a string", sts(SecurityToken=5), "SecurityToken: expected a string"),
    ("time without a zone", sts("a", "2027-01-15T09:00:00"), "Expiration: expected an ISO-8601"),
    ("time of words", sts("a", "tomorrow"), "Expiration: expected an ISO-8601"),
    ("negative seconds", sts("a", -5), "Expiration: expected unix seconds > 0"),
]


@pytest.mark.parametrize(("text", "fragment"), [pytest.param(*c[1:], id=c[0]) for c in BAD])
def test_parse_refuses(text: str, fragment: str) -> None:
    with pytest.raises(CredentialsError) as info:
        C.parse(text)
    assert fragment in str(info.value)
    assert SECRET not in str(info.value) and TOKEN not in str(info.value)


# -- refresh timing (pure) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lifetime", "refresh_after"),
    [
        (3600.0, 2880.0),  # 80 % (48 min) comes before 5 minutes before expiry (55 min)
        (900.0, 600.0),  # 5 minutes before (10 min) comes before 80 % (12 min)
        (1500.0, 1200.0),  # both at 20 min
        (300.0, 240.0),  # 5 minutes or less left: 80 % alone
        (10.0, 8.0),
    ],
)
def test_refresh_at(lifetime: float, refresh_after: float) -> None:
    assert C.refresh_at(T0, T0 + lifetime) == pytest.approx(T0 + refresh_after)


def test_backoff_doubles_up_to_a_cap() -> None:
    assert [C.backoff(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


# -- static ---------------------------------------------------------------------------------


async def test_static() -> None:
    p = C.StaticCredentials(Credentials("AK", SECRET), "env")
    async with anyio.create_task_group() as tg:
        await tg.start(p.run_refresh)  # starts and ends at once
    p.invalidate()
    assert p.get() == Credentials("AK", SECRET)
    assert (p.problem, p.describe()) == ("", {"provider": "env", "access_key_id": "AK"})


def test_provider_for_each_kind(tmp_path: Path) -> None:
    base = {"endpoint": "http://h:1", "project": "proj", "logstore": "logs"}
    static = C.provider_for(SourceConfig(**base, access_key_id="AK", access_key_secret=SECRET))
    assert isinstance(static, C.StaticCredentials) and static.get().access_key_id == "AK"
    path = str(tmp_path / "c.json")
    file = C.provider_for(SourceConfig(**base, credentials="file", credentials_file=path))
    assert isinstance(file, C.FileCredentials) and file.path == Path(path)
    command = C.provider_for(
        SourceConfig(
            **base,
            credentials="command",
            credentials_command="fetch --role 'a b'",
            credentials_command_timeout=2.5,
        )
    )
    assert isinstance(command, C.CommandCredentials)
    assert (command.argv, command.timeout) == (("fetch", "--role", "a b"), 2.5)


# -- file -----------------------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # atomic, as a secret manager writes it


async def test_file_loads_and_follows_changes(tmp_path: Path) -> None:
    path, clock = tmp_path / "creds.json", FakeClock()
    write(path, sts("STS.one", iso(T0 + 3600)))
    p = C.FileCredentials(path, clock)
    await p._attempt()
    assert p.get() == Credentials("STS.one", SECRET, TOKEN)
    assert p.describe()["expiration"] == iso(T0 + 3600)
    write(path, sts("STS.two", iso(T0 + 7200)))
    await p._attempt()
    assert p.get().access_key_id == "STS.two"


async def test_file_unchanged_is_not_read_again_unless_invalidated(tmp_path: Path) -> None:
    path, clock = tmp_path / "creds.json", FakeClock()
    path.write_text(sts("STS.aaa"))
    p = C.FileCredentials(path, clock)
    await p._attempt()
    # Same size, same mtime, same inode: the content is not looked at.
    st = path.stat()
    path.write_text(sts("STS.bbb"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    await p._attempt()
    assert p.get().access_key_id == "STS.aaa"
    # An auth error: read it again anyway (once the invalidation gap since the last read
    # has passed).
    p.invalidate()
    clock.now += C.INVALIDATE_GAP_S
    assert p._next_attempt(clock()) <= clock()
    await p._attempt()
    assert p.get().access_key_id == "STS.bbb"


async def test_file_invalidations_are_spaced(tmp_path: Path) -> None:
    path, clock = tmp_path / "creds.json", FakeClock()
    path.write_text(sts("STS.a"))
    p = C.FileCredentials(path, clock, check_interval=60.0)
    await p._attempt()
    p.invalidate()
    assert p._next_attempt(clock()) == T0 + C.INVALIDATE_GAP_S
    clock.now += C.INVALIDATE_GAP_S
    await p._attempt()
    assert not p._stale and p._next_attempt(clock()) == clock() + 60.0


async def test_file_problems_keep_the_old_credentials(tmp_path: Path) -> None:
    path, clock = tmp_path / "creds.json", FakeClock()
    p = C.FileCredentials(path, clock)
    await p._attempt()
    with pytest.raises(CredentialsUnavailable, match="No such file"):
        p.get()
    assert "no credentials from file" in p.problem
    write(path, sts("STS.a", iso(T0 + 60)))
    await p._attempt()
    assert p.problem == ""
    path.write_text('{"AccessKeyId": "STS.b", "AccessKeySec')  # caught half-written
    await p._attempt()
    assert p.get().access_key_id == "STS.a"
    assert "not JSON" in p.describe()["last_error"]
    clock.now = T0 + 60  # expired, and the file was not fixed
    with pytest.raises(CredentialsUnavailable, match=r"\(STS.a\) expired at .*not JSON"):
        p.get()
    write(path, sts("STS.b", iso(T0 + 3600)))
    await p._attempt()  # the broken content was not remembered as seen: read again
    assert p.get().access_key_id == "STS.b"


async def test_file_refresh_loop_picks_up_a_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "creds.json"
    write(path, sts("STS.one"))
    p = C.FileCredentials(path, check_interval=0.05)
    async with anyio.create_task_group() as tg:
        await tg.start(p.run_refresh)
        assert p.get().access_key_id == "STS.one"  # loaded before it reported started
        write(path, sts("STS.two"))
        await eventually(lambda: p.get().access_key_id == "STS.two")
        tg.cancel_scope.cancel()


# -- command --------------------------------------------------------------------------------


class Script:
    """A fake command runner: answers (or failures) in turn, and the runs it saw."""

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)
        self.runs: list[tuple[tuple[str, ...], float]] = []

    async def __call__(self, argv: Sequence[str], timeout: float) -> bytes:
        self.runs.append((tuple(argv), timeout))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer.encode()


async def test_command_refreshes_before_expiry() -> None:
    clock = FakeClock()
    run = Script(sts("STS.one", iso(T0 + 3600)), sts("STS.two", iso(T0 + 2880 + 900)))
    p = C.CommandCredentials(["fetch", "--json"], 5.0, clock, run)
    await p._attempt()
    assert run.runs == [(("fetch", "--json"), 5.0)]
    assert p.get().access_key_id == "STS.one"
    assert p._next_attempt(clock()) == T0 + 2880
    clock.now = T0 + 2880
    await p._attempt()
    assert p.get().access_key_id == "STS.two"
    assert p._next_attempt(clock()) == clock() + 600  # 5 minutes before the new expiry


async def test_command_failures_back_off_and_keep_the_old_credentials() -> None:
    clock = FakeClock()
    fail = CredentialsError("exited with 1: role not found")
    run = Script(sts("STS.one", iso(T0 + 100)), fail, fail, sts("STS.two", iso(T0 + 3600)))
    p = C.CommandCredentials(["fetch"], 5.0, clock, run)
    with structlog.testing.capture_logs() as logs:
        await p._attempt()
        clock.now = T0 + 80
        await p._attempt()
        assert (p.failures, p._next_attempt(clock())) == (1, clock() + 1)
        assert p.get().access_key_id == "STS.one"  # still valid
        clock.now += 1
        await p._attempt()
        assert (p.failures, p._next_attempt(clock())) == (2, clock() + 2)
        clock.now = T0 + 100  # expired, no fresh ones
        with pytest.raises(CredentialsUnavailable, match="refreshing failed: exited with 1"):
            p.get()
        assert "expired at" in p.problem
        await p._attempt()
    assert p.get().access_key_id == "STS.two" and p.failures == 0
    failed = [e for e in logs if e["event"] == "credentials_load_failed"]
    assert [e["keeping"] for e in failed] == ["STS.one", "STS.one"]
    assert SECRET not in repr(logs) and TOKEN not in repr(logs)


async def test_command_that_prints_expired_credentials_has_failed() -> None:
    clock = FakeClock()
    p = C.CommandCredentials(["fetch"], 5.0, clock, Script(sts("STS.old", iso(T0 - 1))))
    await p._attempt()
    assert p.failures == 1
    with pytest.raises(CredentialsUnavailable, match="printed credentials that expired"):
        p.get()


async def test_command_without_expiration_runs_again_only_when_invalidated() -> None:
    clock = FakeClock()
    p = C.CommandCredentials(["fetch"], 5.0, clock, Script(sts("STS.a"), sts("STS.b")))
    await p._attempt()
    assert p._next_attempt(clock()) == float("inf")
    clock.now += 0.5
    p.invalidate()
    p.invalidate()  # a burst of auth errors: one reload
    assert p._next_attempt(clock()) == T0 + C.INVALIDATE_GAP_S
    clock.now = T0 + C.INVALIDATE_GAP_S
    await p._attempt()
    assert p.get().access_key_id == "STS.b"
    assert p._next_attempt(clock()) == float("inf")


async def test_refusals_of_replaced_credentials_are_ignored() -> None:
    """Requests signed before a reload and refused after it must not cause another run."""
    clock = FakeClock()
    p = C.CommandCredentials(["fetch"], 5.0, clock, Script(sts("STS.a"), sts("STS.b")))
    await p._attempt()
    old = p.get()
    p.invalidate(old)
    clock.now += C.INVALIDATE_GAP_S
    p.invalidate(old)  # a second refusal, while the command runs
    await p._attempt()
    assert p.get().access_key_id == "STS.b"
    assert p._next_attempt(clock()) == float("inf"), "the refusals were about STS.a"
    p.invalidate(old)  # answered late, signed with STS.a
    assert p._next_attempt(clock()) == float("inf")
    p.invalidate(p.get())
    assert p._next_attempt(clock()) == clock() + C.INVALIDATE_GAP_S


async def test_command_runs_are_spaced_even_near_expiry() -> None:
    clock = FakeClock()
    p = C.CommandCredentials(["fetch"], 5.0, clock, Script(sts("STS.a", iso(T0 + 0.5))))
    await p._attempt()
    assert p._next_attempt(clock()) == T0 + C.MIN_REFRESH_GAP_S


async def test_command_refresh_loop(tmp_path: Path) -> None:
    """Real time: a 2-second token is refreshed at 80 % of its life, before it expires."""
    source = tmp_path / "answer.json"
    calls = tmp_path / "calls"
    script = tmp_path / "fetch.py"
    script.write_text(
        "import pathlib, sys\n"
        f"pathlib.Path({str(calls)!r}).open('a').write('x')\n"
        f"sys.stdout.write(pathlib.Path({str(source)!r}).read_text())\n"
    )
    source.write_text(sts("STS.one", iso(time.time() + 2.0)))
    p = C.CommandCredentials([sys.executable, str(script)], 10.0)
    async with anyio.create_task_group() as tg:
        await tg.start(p.run_refresh)
        assert p.get().access_key_id == "STS.one"
        source.write_text(sts("STS.two", iso(time.time() + 3600)))
        await eventually(lambda: p.describe()["access_key_id"] == "STS.two")
        p.get()  # never expired on the way
        tg.cancel_scope.cancel()
    assert calls.read_text() == "xx"


async def test_run_command_outcomes(tmp_path: Path) -> None:
    py = sys.executable
    out = await C.run_command([py, "-c", f"print({sts('STS.a')!r})"], 10.0)
    assert C.parse(out).credentials.access_key_id == "STS.a"
    with pytest.raises(CredentialsError, match="exited with 3: no role"):
        await C.run_command([py, "-c", "import sys; sys.stderr.write('no role'); sys.exit(3)"], 10)
    # A failed login may print what it tried: logged and shown by /readyz, so masked.
    said = "vault: login failed for token=VaultTok5 password=Pw4 (https://u:Pw3@vault/)"
    with pytest.raises(CredentialsError) as info:
        await C.run_command([py, "-c", f"import sys; sys.stderr.write({said!r}); sys.exit(3)"], 10)
    assert str(info.value) == (
        "exited with 3: vault: login failed for token=*** password=*** (https://u:***@vault/)"
    )
    with pytest.raises(CredentialsError, match=r"no answer within 0\.3s"):
        await C.run_command([py, "-c", "import time; time.sleep(30)"], 0.3)
    with pytest.raises(CredentialsError, match="cannot run"):
        await C.run_command([str(tmp_path / "missing")], 10.0)


# -- the client's hook --------------------------------------------------------------------


@pytest.fixture
async def refusing_server() -> AsyncIterator[tuple[str, list[str]]]:
    """A fake SLS answering each request with the error named by its `?code=`."""
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("authorization", ""))
        code = request.query.get("code", "")
        status = {"ConsumerGroupNotExist": 404}.get(code, 401)
        body = json.dumps({"errorCode": code, "errorMessage": "no"})
        return web.Response(status=status, text=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("code", "token", "invalidated"),
    [
        ("SecurityTokenExpired", TOKEN, True),
        ("InvalidAccessKeyId", "", True),
        ("SignatureNotMatch", "", True),
        ("Unauthorized", TOKEN, True),
        ("Unauthorized", "", False),  # a long-term key refused by policy: nothing to refresh
        ("ConsumerGroupNotExist", TOKEN, False),
    ],
)
async def test_client_invalidates_on_auth_errors(
    refusing_server: tuple[str, list[str]], code: str, token: str, invalidated: bool
) -> None:
    endpoint, _seen = refusing_server
    calls: list[Credentials] = []
    async with aiohttp.ClientSession() as session:
        client = SlsClient(
            session,
            endpoint,
            "p",
            lambda: Credentials("STS.a", SECRET, token),
            on_auth_error=calls.append,
        )
        with pytest.raises(E.SlsError) as info:
            await client.request("GET", "/logstores", {"code": code})
    assert info.value.error_code == code
    assert calls == ([Credentials("STS.a", SECRET, token)] if invalidated else [])


async def test_client_asks_for_credentials_on_every_request(
    refusing_server: tuple[str, list[str]],
) -> None:
    endpoint, seen = refusing_server
    keys = iter(["STS.one", "STS.two"])
    async with aiohttp.ClientSession() as session:
        client = SlsClient(session, endpoint, "p", lambda: Credentials(next(keys), SECRET))
        for _ in range(2):
            with pytest.raises(E.SlsError):
                await client.request("GET", "/", {"code": "x"})
    assert [a.split(":")[0] for a in seen] == ["LOG STS.one", "LOG STS.two"]


async def test_unavailable_credentials_fail_the_request_before_sending(
    refusing_server: tuple[str, list[str]],
) -> None:
    endpoint, seen = refusing_server
    p = C.FileCredentials(Path("/nonexistent/creds.json"))
    async with aiohttp.ClientSession() as session:
        client = SlsClient(session, endpoint, "p", p.get)
        with pytest.raises(CredentialsUnavailable) as info:
            await client.request("GET", "/")
    assert info.value.retryable and not seen


def test_credentials_repr_hides_secrets() -> None:
    text = repr(Credentials("AK", SECRET, TOKEN))
    assert "AK" in text and SECRET not in text and TOKEN not in text
