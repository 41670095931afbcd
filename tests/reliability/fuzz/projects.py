"""The projects family: create, get, update, delete and list projects and logstores."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.reliability.fuzz.layout import (
    HOST_SUFFIX,
    KEEP,
    KEEP_PROJECT,
    SCRATCH_PROJECT,
    Layout,
    q,
    seg,
)
from tests.reliability.fuzz.values import (
    JSON_TYPE,
    NEVER_NAMES,
    ODD_INTS,
    RAW_BYTES,
    SCRATCH_NAMES,
    WEIRD_TEXT,
    broken_json,
    dumps,
    json_value,
    junk_query,
    non_dict_json,
    parses_as_int,
)
from tests.reliability.fuzz.wire import Req


def projects(layout: Layout) -> st.SearchStrategy[Req]:
    logstore_def = st.fixed_dictionaries(
        {"logstoreName": st.text(max_size=10), "ttl": ODD_INTS, "shardCount": ODD_INTS}
    )

    def bad_name(n: str) -> bool:
        return not (2 <= len(n) <= 128 and n.isascii() and all(c.isalnum() or c in "-_" for c in n))

    @st.composite
    def protected_changes(draw: st.DrawFn) -> Req:
        kind = draw(
            st.sampled_from(
                ["create-project", "update-project", "delete-project", "create-logstore",
                 "update-logstore", "delete-logstore"]
            )
        )  # fmt: skip
        if kind == "create-project":  # it exists: refused whatever the body
            body = draw(st.one_of(json_value(2).map(dumps), RAW_BYTES))
            return Req("CreateProject", "POST", "/", (), (JSON_TYPE,), body, must_refuse=True)
        if kind == "update-project":
            body = draw(
                st.one_of(
                    broken_json(st.fixed_dictionaries({"description": st.text(max_size=10)})),
                    non_dict_json(),
                )
            )
            return Req("UpdateProject", "PUT", "/", (), (JSON_TYPE,), body, must_refuse=True)
        if kind == "delete-project":  # only projects that do not exist
            name = draw(NEVER_NAMES)
            return Req("DeleteProject", "DELETE", "/", project=name, must_refuse=True)
        if kind == "create-logstore":
            body = draw(
                st.one_of(
                    broken_json(logstore_def),
                    non_dict_json(),
                    st.builds(
                        lambda name, ttl, count: dumps(
                            {"logstoreName": name, "ttl": ttl, "shardCount": count}
                        ),
                        st.one_of(st.just(KEEP), st.text(max_size=12).filter(bad_name)),
                        st.integers(1, 30),
                        st.integers(1, 4),
                    ),
                    st.builds(
                        lambda ttl, count: dumps(
                            {"logstoreName": "nxstore", "ttl": ttl, "shardCount": count}
                        ),
                        st.one_of(
                            st.integers(-(2**70), 0),
                            st.integers(3651, 2**70),
                            st.text(max_size=4).filter(lambda t: not parses_as_int(t)),
                            st.none(),
                            st.lists(st.integers(), max_size=2),
                        ),
                        st.integers(1, 4),
                    ),
                    st.builds(
                        lambda count: dumps(
                            {"logstoreName": "nxstore", "ttl": 7, "shardCount": count}
                        ),
                        st.one_of(
                            st.integers(-(2**70), 0),
                            st.integers(257, 2**70),
                            st.text(max_size=4).filter(lambda t: not parses_as_int(t)),
                            st.none(),
                        ),
                    ),
                    st.fixed_dictionaries({"ttl": st.integers(1, 5)}).map(dumps),  # no name
                )
            )
            return Req(
                "CreateLogStore", "POST", "/logstores", (), (JSON_TYPE,), body, must_refuse=True
            )
        if kind == "update-logstore":
            name = draw(st.one_of(st.just(KEEP), NEVER_NAMES))
            bad = st.one_of(
                broken_json(st.fixed_dictionaries({"ttl": ODD_INTS})),
                st.fixed_dictionaries(
                    {
                        "ttl": st.one_of(
                            st.integers(-(2**70), 0),
                            st.integers(3651, 2**70),
                            st.text(max_size=4).filter(lambda t: not parses_as_int(t)),
                            st.lists(st.integers(), max_size=2),
                        )
                    }
                ).map(dumps),
            )
            body = draw(bad) if name == KEEP else draw(st.one_of(bad, logstore_def.map(dumps)))
            return Req(
                "UpdateLogStore",
                "PUT",
                f"/logstores/{seg(name)}",
                (),
                (JSON_TYPE,),
                body,
                must_refuse=True,
            )
        name = draw(NEVER_NAMES)
        return Req("DeleteLogStore", "DELETE", f"/logstores/{seg(name)}", must_refuse=True)

    @st.composite
    def reads(draw: st.DrawFn) -> Req:
        kind = draw(
            st.sampled_from(["get-project", "list-projects", "list-logstores", "get-logstore"])
        )
        if kind == "get-project":
            return Req(
                "GetProject",
                "GET",
                "/",
                q(**draw(junk_query())),
                project=draw(st.one_of(st.just(KEEP_PROJECT), NEVER_NAMES)),
            )
        if kind == "list-projects":
            host = draw(
                st.sampled_from(
                    [b"127.0.0.1", HOST_SUFFIX.encode(), b"localhost", b"[::1]:7100", b"sls"]
                )
            )
            return Req("ListProject", "GET", "/", q(**draw(junk_query())), host=host)
        if kind == "list-logstores":
            return Req("ListLogStores", "GET", "/logstores", q(**draw(junk_query())))
        name = draw(st.one_of(st.just(KEEP), NEVER_NAMES, WEIRD_TEXT.filter(bool)))
        return Req("GetLogStore", "GET", f"/logstores/{seg(name)}", q(**draw(junk_query())))

    @st.composite
    def scratch(draw: st.DrawFn) -> Req:
        method = draw(st.sampled_from(["POST", "PUT", "DELETE", "GET"]))
        body = draw(
            st.one_of(logstore_def.map(dumps), json_value(2).map(dumps), broken_json(logstore_def))
        )
        if draw(st.booleans()):
            path = "/"
            project = draw(
                st.one_of(st.just(SCRATCH_PROJECT), st.from_regex(r"\Azp[a-z0-9]{0,3}\Z"))
            )
            api = "Project:scratch"
        else:
            name = draw(SCRATCH_NAMES)
            path = "/logstores" if method == "POST" else f"/logstores/{seg(name)}"
            project = SCRATCH_PROJECT
            api = "LogStore:scratch"
        return Req(api, method, path, (), (JSON_TYPE,), body, project=project)

    return st.one_of(protected_changes(), reads(), scratch())
