"""What an audit of `loghubd serve` through the official aliyun-log-python-sdk found (twenty-
third session), against a real server reached the way docs/serve.md says:

- ListProject pages (`offset`, `size`) and filters (`projectName`), `count` being the page's
  length and `total` what matched: it used to answer every project to every call, so a
  hand-written pager looped for ever;
- split/merge refusals keep "invalid shard id N" and give the true reason;
- SPL in the SLS search form (`level: ERROR`) is told that a statement starts with '*';
- UpdateCheckPoint refuses another shard's cursor (`InvalidShardCheckPoint`, naming both
  shards), where it used to accept it and make the official consumer skip to the shard's end;
- a project created through the service host with a mixed-case `projectName` is reachable
  (project hosts are read in lower case; it used to be stored as sent, and lost).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import requests
from aliyun.log import LogClient, LogException, LogItem, PutLogsRequest

from loghubd.testing.process import ServerProcess

LOGSTORE, GROUP = "events", "readers"
MID = "4" + "0" * 31


@pytest.fixture
def client(
    loghubd_server: ServerProcess, sdk_via_proxy: Callable[[ServerProcess], str]
) -> LogClient:
    return LogClient(sdk_via_proxy(loghubd_server), "any-key", "any-secret", source="audit")


def refusal(call: Callable[[], object]) -> LogException:
    with pytest.raises(LogException) as caught:
        call()
    return caught.value


def names(response: object) -> list[str]:
    return [p["projectName"] for p in response.get_projects()]  # type: ignore[attr-defined]


# -- ListProject -------------------------------------------------------------------


def test_list_project_pages_and_filters(client: LogClient) -> None:
    made = ["alpha-one", "audit-three", "audit-two", "zulu-four"]  # the server sorts by name
    for name in reversed(made):
        client.create_project(name, f"about {name}")

    first = client.list_project(size=1)
    assert (first.get_count(), first.get_total(), names(first)) == (1, 4, made[:1])
    middle = client.list_project(offset=1, size=2)
    assert (middle.get_count(), middle.get_total(), names(middle)) == (2, 4, made[1:3])
    past = client.list_project(offset=10, size=2)
    assert (past.get_count(), past.get_total(), names(past)) == (0, 4, [])
    audit = client.list_project(project_name_pattern="audit")
    assert (audit.get_count(), audit.get_total(), names(audit)) == (2, 2, made[1:3])
    one_audit = client.list_project(offset=1, size=1, project_name_pattern="audit")
    assert (one_audit.get_count(), one_audit.get_total(), names(one_audit)) == (1, 2, made[2:3])
    described = client.list_project(description="about zulu")
    assert names(described) == ["zulu-four"]
    assert names(client.list_project(size=-1)) == made  # the SDK pages itself (list_more)


def test_a_hand_written_project_pager_ends(client: LogClient) -> None:
    for i in range(5):
        client.create_project(f"pager-{i}", "")
    seen: list[str] = []
    offset = 0
    for _ in range(10):  # it used to get every project on every page, for ever
        page = client.list_project(offset=offset, size=2)
        if page.get_count() == 0:
            break
        seen += names(page)
        offset += page.get_count()
    assert seen == [f"pager-{i}" for i in range(5)]


def test_a_negative_project_offset_is_refused(client: LogClient) -> None:
    client.create_project("neg-offset", "")
    exc = refusal(lambda: client.list_project(offset=-1, size=1))
    assert (exc.resp_status, exc.get_error_code()) == (400, "ParameterInvalid")
    assert "offset" in exc.get_error_message()


# -- split and merge refusals ------------------------------------------------------


def test_split_and_merge_refusals_give_the_true_reason(client: LogClient) -> None:
    client.create_project("shards", "")
    client.create_logstore("shards", LOGSTORE, shard_count=2)  # 0: [00, 80), 1: [80, ff]
    client.split_shard("shards", LOGSTORE, 0, MID)  # 0 readonly; children 2 and 3
    cases = {
        "split readonly": (
            lambda: client.split_shard("shards", LOGSTORE, 0, "1" + "0" * 31),
            "invalid shard id 0: shard 0 is readonly",
        ),
        "split missing": (
            lambda: client.split_shard("shards", LOGSTORE, 99, "2" + "0" * 31),
            "invalid shard id 99: shard 99 does not exist",
        ),
        "merge missing": (
            lambda: client.merge_shard("shards", LOGSTORE, 99),
            "invalid shard id 99: shard 99 does not exist",
        ),
        "merge readonly": (
            lambda: client.merge_shard("shards", LOGSTORE, 0),
            "invalid shard id 0: shard 0 is readonly",
        ),
        "merge last": (
            lambda: client.merge_shard("shards", LOGSTORE, 1),
            "invalid shard id 1: shard 1 has no readwrite right-hand neighbour",
        ),
    }
    got = {}
    for name, (call, _want) in cases.items():
        exc = refusal(call)
        got[name] = (exc.resp_status, exc.get_error_code(), exc.get_error_message())
    assert got == {name: (400, "ParameterInvalid", want) for name, (_c, want) in cases.items()}
    merged = client.merge_shard("shards", LOGSTORE, 2)  # 2 and 3 are neighbours: still works
    assert merged.get_shards_info()[0]["status"] == "readwrite"


# -- SPL in the SLS search form ----------------------------------------------------


def test_the_sls_search_form_is_told_a_statement_starts_with_a_star(client: LogClient) -> None:
    client.create_project("spl", "")
    client.create_logstore("spl", LOGSTORE, shard_count=1)
    items = [LogItem(contents=[("level", level)]) for level in ("ERROR", "INFO")]
    client.put_logs(PutLogsRequest("spl", LOGSTORE, logitems=items))
    begin = client.get_cursor("spl", LOGSTORE, 0, "begin").get_cursor()

    def pull(query: str) -> object:
        return client.pull_logs("spl", LOGSTORE, 0, begin, 100, query=query)

    exc = refusal(lambda: pull("level: ERROR"))
    assert (exc.resp_status, exc.get_error_code()) == (400, "ParameterInvalid")
    assert exc.get_error_message().startswith(
        "invalid SPL query: position 0: a statement starts with '*' (search conditions "
        "before the first '|' are not supported when consuming)"
    )
    exc = refusal(lambda: pull("* | where level: 'ERROR'"))  # a real lexer error, after '*'
    assert exc.get_error_message() == "invalid SPL query: position 15: unexpected character ':'"
    matched = pull("* | where level = 'ERROR'")
    assert [
        dict((c.Key, c.Value) for c in log.Contents)["level"]
        for group in matched.get_loggroup_list().LogGroups  # type: ignore[attr-defined]
        for log in group.Logs
    ] == ["ERROR"]


# -- a checkpoint of another shard -------------------------------------------------


def test_a_checkpoint_of_another_shard_is_refused(client: LogClient) -> None:
    client.create_project("cps", "")
    client.create_logstore("cps", LOGSTORE, shard_count=3)
    client.put_logs(PutLogsRequest("cps", LOGSTORE, logitems=[LogItem(contents=[("a", "1")])]))
    client.create_consumer_group("cps", LOGSTORE, GROUP, 30)
    foreign = client.get_end_cursor("cps", LOGSTORE, 2).get_cursor()
    own_begin = client.get_begin_cursor("cps", LOGSTORE, 1).get_cursor()
    client.update_check_point("cps", LOGSTORE, GROUP, 1, own_begin, consumer="c1")

    exc = refusal(
        lambda: client.update_check_point("cps", LOGSTORE, GROUP, 1, foreign, consumer="c1")
    )
    assert (exc.resp_status, exc.get_error_code()) == (400, "InvalidShardCheckPoint")
    assert "a cursor of shard 2, not of shard 1" in exc.get_error_message()
    stored = client.get_check_point("cps", LOGSTORE, GROUP, 1).get_consumer_group_check_points()
    assert stored[0]["checkpoint"] == own_begin  # the refused one was not stored

    # A cursor of the shard itself is accepted wherever it points (PROTOCOL.md §16.7: be
    # conservative, a refused commit can kill the Python consumer's worker thread).
    own_end = client.get_end_cursor("cps", LOGSTORE, 1).get_cursor()
    client.update_check_point("cps", LOGSTORE, GROUP, 1, own_end, consumer="c1")


def test_a_mixed_case_project_created_on_the_service_host_is_reachable(
    loghubd_server: ServerProcess,
) -> None:
    """The SDK sends CreateProject to the project host; other clients send `projectName` in
    the body to the service host, where the name kept its case and no host could name it."""
    base = f"http://127.0.0.1:{loghubd_server.port}/"
    headers = {"x-log-apiversion": "0.6.0", "x-log-bodyrawsize": "0"}
    body = json.dumps({"projectName": "MixedCase", "description": "created by name"})
    made = requests.post(base, data=body, headers={**headers, "Host": "sls.local"}, timeout=10)
    assert made.status_code == 200, made.text
    got = requests.get(base, headers={**headers, "Host": "mixedcase.sls.local"}, timeout=10)
    assert got.status_code == 200, got.text
    assert got.json()["projectName"] == "mixedcase"
