"""The route table (`loghubd.server.routes`): what the policy is asked about is what the handler
acts on, for every route and generated requests (issue 13 item 1: a JSON number for a name
was evaluated as `*` by the policy and used as `str()` by the handler).

For each generated request the test computes the (action, resource) the server asks the
policy about (the route's API and `routes.resource(routes.target(...))`, as `api._handle`
does), then runs the route's handler against a real `LogService` on a real SQLite file whose
operations record what they are asked to act on (whether they then succeed or not). Every
operation with an effect must be that action on that resource; every lookup must be that
resource or one that contains it; a request the handler answered must have touched that very
resource. One test per route; hypothesis prints the request that breaks it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loghubd.protocol import errors as E
from loghubd.server import policy as P
from loghubd.server import routes
from loghubd.server.call import Call
from loghubd.server.metrics import ServerMetrics
from loghubd.server.service import Limits, LogService
from loghubd.server.storage import Logstore, Storage

ACCOUNT = "0"
PROJECT = "proj"
LOGSTORE = "ls"
GROUP = "grp"

Record = tuple[str | None, str]  # (action, resource); action None: a lookup


def _res(kind: str, args: tuple[Any, ...], ids: dict[int, Logstore]) -> str:
    if kind == "project":
        return P.resource(ACCOUNT, args[0])
    if kind == "projects":
        return P.resource(ACCOUNT, "*")
    if kind == "logstores":
        return P.resource(ACCOUNT, args[0], "*")
    if kind == "project-ls":
        return P.resource(ACCOUNT, args[0], args[1])
    ls = args[0] if isinstance(args[0], Logstore) else ids[args[0]]
    if kind == "ls":
        return P.resource(ACCOUNT, ls.project, ls.name)
    if kind == "groups":
        return P.resource(ACCOUNT, ls.project, ls.name, "*")
    assert kind == "group", kind
    return P.resource(ACCOUNT, ls.project, ls.name, args[1])


# LogService operation → (RAM action it performs, None for a lookup; how its resource is named)
SERVICE_OPS: dict[str, tuple[str | None, str]] = {
    "project": (None, "project"),
    "logstore": (None, "project-ls"),
    "shard": (None, "ls"),
    "create_project": ("log:CreateProject", "project"),
    "delete_project": ("log:DeleteProject", "project"),
    "create_logstore": ("log:CreateLogStore", "project-ls"),
    "delete_logstore": ("log:DeleteLogStore", "project-ls"),
    "shards": ("log:ListShards", "ls"),
    "split": ("log:SplitShard", "ls"),
    "merge": ("log:MergeShard", "ls"),
    "delete_shard": ("log:DeleteShard", "ls"),
    "put": ("log:PostLogStoreLogs", "ls"),
    "pull": ("log:GetCursorOrData", "ls"),
    "cursor": ("log:GetCursorOrData", "ls"),
    "cursor_time": ("log:GetCursorOrData", "ls"),
    "create_group": ("log:CreateConsumerGroup", "group"),
    "update_group": ("log:UpdateConsumerGroup", "group"),
    "delete_group": ("log:DeleteConsumerGroup", "group"),
    "list_groups": ("log:ListConsumerGroup", "groups"),
    "heartbeat": ("log:ConsumerGroupHeartBeat", "group"),
    "leave": ("log:ConsumerGroupHeartBeat", "group"),
    "commit": ("log:ConsumerGroupUpdateCheckPoint", "group"),
    "checkpoints": ("log:GetConsumerGroupCheckPoint", "group"),
    "group_view": ("log:GetConsumerGroupCheckPoint", "group"),
}
# Storage calls the handlers make themselves (not through LogService).
STORAGE_OPS: dict[str, tuple[str | None, str]] = {
    "get_project": (None, "project"),
    "list_shards": (None, "ls"),
    "list_projects": ("log:ListProject", "projects"),
    "update_project": ("log:UpdateProject", "project"),
    "list_logstores": ("log:ListLogStores", "logstores"),
    "update_logstore": ("log:UpdateLogStore", "ls"),
}


class Recording:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.ids: dict[int, Logstore] = {}
        self.depth = 0  # only the outermost call is what a handler asked for


def _recorded(
    base: type, ops: dict[str, tuple[str | None, str]], rec: Recording
) -> dict[str, Callable[..., Any]]:
    def wrap(name: str, action: str | None, kind: str) -> Callable[..., Any]:
        original = getattr(base, name)

        def method(self: Any, *args: Any, **kw: Any) -> Any:
            if rec.depth == 0:  # recorded when attempted, whether it then fails or not
                rec.records.append((action, _res(kind, args, rec.ids)))
            rec.depth += 1
            try:
                result = original(self, *args, **kw)
            finally:
                rec.depth -= 1
            if isinstance(result, Logstore):
                rec.ids[result.id] = result
            return result

        return method

    return {name: wrap(name, action, kind) for name, (action, kind) in ops.items()}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LogService, Recording]]:
    rec = Recording()
    storage_cls = type("RecordingStorage", (Storage,), _recorded(Storage, STORAGE_OPS, rec))
    service_cls = type("RecordingService", (LogService,), _recorded(LogService, SERVICE_OPS, rec))
    storage = storage_cls(tmp_path_factory.mktemp("routes") / "db.sqlite3")
    service = service_cls(storage, time.time, Limits(max_body_bytes=100_000))
    yield service, rec
    storage.close()


def _ensure_data(service: LogService) -> None:
    """The project, logstore and group the generated requests mostly name (they may have been
    deleted by an earlier example)."""
    if service.storage.get_project(PROJECT) is None:
        service.create_project(PROJECT, "")
    if service.storage.get_logstore(PROJECT, LOGSTORE) is None:
        service.create_logstore(PROJECT, LOGSTORE, 30, 2)
    ls = service.logstore(PROJECT, LOGSTORE)
    if not any(r.name == GROUP for r in service.storage.list_groups(ls.id)):
        service.create_group(ls, GROUP, 30, False)


NAMES = st.sampled_from([PROJECT, LOGSTORE, GROUP, "other", "12345", "00", "1"])
ODD_JSON = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 2**40), st.floats(allow_nan=False),
    NAMES, st.lists(NAMES, max_size=2), st.dictionaries(NAMES, NAMES, max_size=2),
)  # fmt: skip
FIELDS = ["logstoreName", "consumerGroup", "projectName", "ttl", "shardCount", "timeout",
          "order", "description", "shard", "checkpoint"]  # fmt: skip


IMPLEMENTED = [r for r in routes.ROUTES if r.api.implemented]


@st.composite
def requests(
    draw: st.DrawFn, route: routes.Route
) -> tuple[routes.Route, tuple[str, ...], dict[str, str], bytes, str]:
    # mostly the names that exist, so that handlers get past their lookups
    usual = {1: LOGSTORE, 3: GROUP}
    parts = tuple(
        s if s != "*" else draw(st.one_of(st.just(usual[i]), NAMES) if i in usual else NAMES)
        for i, s in enumerate(route.shape)
    )
    if route.shard:
        parts = (*parts[:3], draw(st.sampled_from(["0", "1", "7", "x", "-1"])))
    query: dict[str, str] = {}
    if route.refine:
        query[route.refine] = draw(st.sampled_from([*route.variants, "bogus"]))
    query.update(
        draw(
            st.dictionaries(
                st.sampled_from(["consumer", "from", "cursor", "forceSuccess", "key", "count"]),
                st.sampled_from(["c1", "begin", "end", "true", "MTAwMDAwMDAwMDAwMDAw", "8" * 32]),
                max_size=3,
            )
        )
    )
    fields = draw(st.dictionaries(st.sampled_from(FIELDS), ODD_JSON, max_size=5))
    body = draw(st.one_of(st.just(json.dumps(fields).encode()), st.just(b"[0, 1]"), st.just(b"")))
    project = "" if route.host == "service" else draw(st.sampled_from([PROJECT] * 3 + ["other"]))
    return route, parts, query, body, project


@pytest.mark.parametrize(
    "route", IMPLEMENTED, ids=[f"{r.api.name}-{r.method}-{r.host}" for r in IMPLEMENTED]
)
def test_the_policy_is_asked_about_what_the_handler_acts_on(
    world: tuple[LogService, Recording], route: routes.Route
) -> None:
    @settings(
        max_examples=40,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
        print_blob=True,
    )
    @given(request=requests(route))
    def one(request: tuple[routes.Route, tuple[str, ...], dict[str, str], bytes, str]) -> None:
        check(world, request)

    one()


def check(
    world: tuple[LogService, Recording],
    request: tuple[routes.Route, tuple[str, ...], dict[str, str], bytes, str],
) -> None:
    service, rec = world
    route, parts, query, body, project = request
    _ensure_data(service)
    try:
        target = routes.target(route, parts, body, project)
    except E.SlsError:  # refused before anything else: the handler never runs
        return
    action = route.api_for(query).action
    resource = routes.resource(target, ACCOUNT)
    rec.records.clear()
    call = Call(
        route.api_for(query).name, target, route.method, parts, query, {}, body, service,
        ServerMetrics(),
    )  # fmt: skip
    answered = True
    try:
        asyncio.run(route.handler(call))
    except E.SlsError:
        answered = False
    for did, where in rec.records:
        if did is None:  # a lookup: this resource or one that contains it
            assert resource == where or resource.startswith(where + "/"), (where, resource)
        else:
            assert (did.lower(), where) == (action.lower(), resource), (did, where)
    if answered:
        assert any(where == resource for _did, where in rec.records), (rec.records, resource)


def test_update_group_saves_the_group_once(tmp_path: Path) -> None:
    """`service.update_group` saved the group twice (issue 12)."""
    saves: list[str] = []

    class CountingStorage(Storage):
        def save_group(self, ls: int, name: str, timeout: int, order: bool, state: str) -> None:
            saves.append(name)
            super().save_group(ls, name, timeout, order, state)

    storage = CountingStorage(tmp_path / "db.sqlite3")
    service = LogService(storage, time.time)
    service.create_project("pp", "")
    service.create_logstore("pp", "ls", 30, 2)
    ls = service.logstore("pp", "ls")
    service.create_group(ls, "gg", 30, False)
    service.update_group(ls, "gg", 60, None)
    assert saves == ["gg"]
    assert service.list_groups(ls)[0].timeout == 60
    service.update_group(ls, "gg", 60, None)  # no change: nothing to save
    assert saves == ["gg"]
    storage.close()
