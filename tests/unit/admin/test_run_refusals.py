"""`loghubd run`'s words for a start-up call the service refused are `loghubd status`'s
(`errors.refusal` over `connect.source_context`): the key to fix, named as the source's own
(`source.logstore`, `sources.web-app.logstore`), the variables that really override it, the
file, and still the service's words and request id; the exit code stays `exit_code_of`'s."""

from __future__ import annotations

import argparse

import anyio
import pytest

from loghubd.admin import connect, errors
from loghubd.config import loads
from loghubd.consumer.startup import StartupError, retry_until_ok
from loghubd.protocol import errors as E

SINGLE = (
    '[source]\nendpoint = "http://127.0.0.1:1"\nproject = "sec"\nlogstore = "app"\n'
    'access_key_id = "id"\naccess_key_secret = "wrong"\n[consumer]\ngroup = "ga"\n'
)
MULTI = (
    '[consumer]\ngroup = "ga"\n'
    '[[sources]]\nname = "ok"\nendpoint = "http://127.0.0.1:1"\nproject = "sec"\n'
    'logstore = "app"\n'
    '[[sources]]\nname = "web-app"\nendpoint = "http://127.0.0.1:1"\nproject = "sec"\n'
    'logstore = "apps"\naccess_key_id = "id"\naccess_key_secret = "in-file"\n'
)
SIGNATURE = E.SignatureNotMatch("signature does not match", request_id="92794BBF")
NO_LOGSTORE = E.LogStoreNotExist("logstore apps does not exist", request_id="R-2")


def test_refused_credentials_name_the_file_the_variables_and_keep_the_request_id() -> None:
    spec = loads(SINGLE, {}, origin="cfg/auth.toml").sources[0]
    assert connect.explain_refusal(spec, SIGNATURE) == (
        "the service refused the credentials (SignatureNotMatch): check the [source] of "
        "cfg/auth.toml, or LOGHUBD_SOURCE__ACCESS_KEY_ID and LOGHUBD_SOURCE__ACCESS_KEY_SECRET, "
        "which override it (signature does not match; request 92794BBF)"
    )


def test_a_missing_logstore_names_the_key_and_keeps_the_services_answer() -> None:
    spec = loads(SINGLE, {}, origin="c.toml").sources[0]
    assert connect.explain_refusal(spec, NO_LOGSTORE) == (
        "logstore 'app' does not exist in project 'sec': check source.logstore "
        "(LogStoreNotExist: logstore apps does not exist; request R-2)"
    )


def test_with_several_sources_the_keys_and_variables_are_the_sources_own() -> None:
    spec = loads(MULTI, {}, origin="/etc/m.toml").sources[1]
    line = connect.explain_refusal(spec, NO_LOGSTORE)
    assert "check sources.web-app.logstore (" in line, line
    line = connect.explain_refusal(spec, E.InvalidAccessKeyId("no such key"))
    assert "check the [[sources]] 'web-app' of /etc/m.toml, or " in line, line
    variables = (
        "LOGHUBD_SOURCES_WEB_APP__ACCESS_KEY_ID and LOGHUBD_SOURCES_WEB_APP__ACCESS_KEY_SECRET"
    )
    assert variables in line, line
    # ... and those are the variables the configuration reads for that source.
    env = {"LOGHUBD_SOURCES_WEB_APP__ACCESS_KEY_SECRET": "from-env"}
    assert loads(MULTI, env).sources[1].source.access_key_secret == "from-env"


def test_credentials_from_the_environment_name_the_sdk_variables() -> None:
    keys = 'access_key_id = "id"\naccess_key_secret = "wrong"\n'
    env_form = SINGLE.replace(keys, 'credentials = "env"\n')
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "i", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s"}
    line = connect.explain_refusal(loads(env_form, env).sources[0], SIGNATURE)
    assert "check ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET" in line, line
    assert 'credentials = "env" in the [source] of the configuration' in line, line


def test_status_still_names_the_flag_and_with_several_sources_the_first_sources_key() -> None:
    ctx = errors.Context("http://h:1", "sec", "apps", "ga")
    got = errors.explain(NO_LOGSTORE, ctx)
    assert got is not None and got[1].endswith("check --logstore (source.logstore)"), got
    args = argparse.Namespace(config="/etc/m.toml")
    multi = loads(MULTI, {}, origin="/etc/m.toml")
    got = errors.explain(NO_LOGSTORE, connect.target(args, multi, {}).context)
    assert got is not None and got[1].endswith("--logstore (sources.ok.logstore)"), got
    got = errors.explain(E.ProjectNotExist("x"), errors.Context(keys="source", flags=False))
    assert got is not None and got[1].endswith("check source.project"), got


@pytest.mark.parametrize(
    ("refused", "code"),
    [(NO_LOGSTORE, 3), (SIGNATURE, 1), (E.ParameterInvalid("bad group name"), 2)],
)
def test_retry_until_ok_words_a_refusal_with_explain_and_keeps_the_exit_code(
    refused: E.SlsError, code: int
) -> None:
    spec = loads(SINGLE, {}, origin="c.toml").sources[0]

    async def call() -> None:
        raise refused

    async def start() -> None:
        await retry_until_ok(
            "finding or creating consumer group ga on sec/app at http://127.0.0.1:1",
            call,
            explain=lambda exc: connect.explain_refusal(spec, exc),
        )

    with pytest.raises(StartupError) as raised:
        anyio.run(start)
    message = str(raised.value)
    assert message.startswith("finding or creating consumer group ga on sec/app at ")
    assert message.endswith(connect.explain_refusal(spec, refused)) and "\n" not in message
    assert raised.value.exit_code == code


def test_retry_until_ok_without_explain_says_what_the_service_said() -> None:
    async def call() -> None:
        raise NO_LOGSTORE

    with pytest.raises(StartupError, match=r"^step: LogStoreNotExist: logstore apps does not"):
        anyio.run(lambda: retry_until_ok("step", call))
