"""The consumer-group family: create, list, update, delete, heartbeats, checkpoints, leave
and the status extension, with broken and ill-typed JSON and unknown consumers."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from tests.reliability.fuzz.layout import (
    KEEP,
    KEEP_GROUPS,
    SCRATCH_GROUP,
    SCRATCH_LOGSTORES,
    SCRATCH_PROJECT,
    Layout,
    q,
    seg,
)
from tests.reliability.fuzz.shards import cursor_values
from tests.reliability.fuzz.values import (
    JSON_TYPE,
    NEVER_NAMES,
    ODD_INT_TEXT,
    ODD_INTS,
    SCRATCH_NAMES,
    WEIRD_TEXT,
    broken_json,
    dumps,
    json_value,
    junk_query,
    non_dict_json,
)
from tests.reliability.fuzz.wire import Req


def groups(layout: Layout) -> st.SearchStrategy[Req]:
    base = f"/logstores/{KEEP}/consumergroups"
    group_def = st.fixed_dictionaries(
        {"consumerGroup": st.text(max_size=10), "timeout": ODD_INTS, "order": st.booleans()}
    )

    @st.composite
    def protected_changes(draw: st.DrawFn) -> Req:
        kind = draw(
            st.sampled_from(
                ["create", "update", "delete", "heartbeat", "checkpoint", "type", "leave"]
            )
        )
        if kind == "create":
            body = draw(
                st.one_of(
                    broken_json(group_def),
                    non_dict_json(),
                    st.builds(  # an existing name, or a bad name, or bad settings
                        lambda name, timeout, order: dumps(
                            {"consumerGroup": name, "timeout": timeout, "order": order}
                        ),
                        st.one_of(
                            st.sampled_from(KEEP_GROUPS),
                            st.text(max_size=3).filter(lambda n: len(n) < 2),
                            st.text(min_size=2, max_size=8).filter(
                                lambda n: (
                                    not (n.isascii() and all(c.isalnum() or c in "-_" for c in n))
                                )
                            ),
                            st.integers(0, 5),
                        ),
                        st.one_of(st.integers(1, 60), st.integers(-5, 0), st.text(max_size=3)),
                        st.booleans(),
                    ),
                    st.builds(
                        lambda timeout, order: dumps(
                            {"consumerGroup": "nxgroup", "timeout": timeout, "order": order}
                        ),
                        st.one_of(
                            st.integers(-(2**40), 0),
                            st.integers(2**31, 2**80),  # more seconds than SQLite can hold
                            st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
                            st.text(max_size=4),
                            st.none(),
                            st.booleans(),
                        ),
                        st.one_of(
                            st.booleans(),
                            st.integers(0, 2),
                            st.text(max_size=4).filter(
                                lambda t: t.lower() not in ("true", "false")
                            ),
                        ),
                    ),
                )
            )
            return Req(
                "CreateConsumerGroup", "POST", base, (), (JSON_TYPE,), body, must_refuse=True
            )
        if kind == "update":
            name = draw(st.one_of(st.sampled_from(KEEP_GROUPS), NEVER_NAMES))
            bad = st.one_of(
                broken_json(st.fixed_dictionaries({"timeout": ODD_INTS})),
                non_dict_json(),
                st.dictionaries(
                    st.text(max_size=5).filter(lambda k: k not in ("timeout", "order")),
                    json_value(1),
                    max_size=3,
                ).map(dumps),
                st.fixed_dictionaries(
                    {
                        "timeout": st.one_of(
                            st.integers(-(2**40), 0),
                            st.integers(2**31, 2**80),
                            st.text(max_size=3),
                            st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
                            st.booleans(),
                            st.none(),
                        )
                    }
                ).map(dumps),
                st.fixed_dictionaries(
                    {
                        "order": st.one_of(
                            st.integers(),
                            st.text(max_size=4).filter(
                                lambda t: t.lower() not in ("true", "false")
                            ),
                            st.none(),
                        )
                    }
                ).map(dumps),
            )
            body = draw(bad) if name in KEEP_GROUPS else draw(st.one_of(bad, group_def.map(dumps)))
            return Req(
                "UpdateConsumerGroup",
                "PUT",
                f"{base}/{seg(name)}",
                (),
                (JSON_TYPE,),
                body,
                must_refuse=True,
            )
        if kind == "delete":
            name = draw(NEVER_NAMES)
            return Req("DeleteConsumerGroup", "DELETE", f"{base}/{seg(name)}", must_refuse=True)
        group = draw(st.sampled_from(KEEP_GROUPS))
        consumer = draw(st.from_regex(r"\Afz[a-z0-9]{1,10}\Z"))
        if kind == "heartbeat":
            body = draw(
                st.one_of(
                    broken_json(st.just({"x": [0, 1]})),
                    st.dictionaries(st.text(max_size=4), json_value(1), max_size=2).map(dumps),
                    st.lists(
                        st.one_of(st.text(max_size=3), st.booleans(), st.floats(), st.none()),
                        min_size=1,
                        max_size=4,
                    ).map(lambda v: json.dumps(v).encode()),
                    st.lists(ODD_INTS, min_size=1, max_size=5).map(dumps),  # unknown consumer
                )
            )
            params = {"type": "heartbeat", "consumer": consumer}
            if draw(st.booleans()):
                params["shards"] = draw(st.one_of(st.text(max_size=10), st.just("0,1,99")))
            return Req(
                "ConsumerGroupHeartBeat",
                "POST",
                f"{base}/{group}",
                q(**params),
                (JSON_TYPE,),
                body,
                must_refuse=True,
            )
        if kind == "checkpoint":
            how = draw(st.sampled_from(["broken", "cursor", "force", "owner", "shard"]))
            shard = draw(st.sampled_from(layout.shard_ids))
            good = layout.cursors[shard][0]
            params = {"type": "checkpoint", "consumer": consumer, "forceSuccess": "true"}
            payload: Any = {"shard": shard, "checkpoint": good}
            if how == "broken":
                body = draw(st.one_of(broken_json(st.just(payload)), non_dict_json()))
            else:
                if how == "cursor":  # not a canonical cursor at all
                    payload["checkpoint"] = draw(
                        st.one_of(
                            st.text(min_size=1, max_size=20).map(lambda t: t + "!"),
                            st.sampled_from(["", "MDA=", "LTE=", "MA", "=MA=", " MA=="]),
                        )
                    )
                elif how == "force":
                    params["forceSuccess"] = draw(
                        st.text(max_size=6).filter(lambda t: t.lower() not in ("true", "false"))
                    )
                elif how == "owner":  # not forced, and not the owner (an unknown consumer)
                    params["forceSuccess"] = draw(st.sampled_from(["false", "FALSE", "False"]))
                    if draw(st.booleans()):
                        del params["consumer"]
                else:
                    payload["shard"] = draw(
                        st.one_of(
                            ODD_INTS.filter(lambda n: n not in layout.shard_ids),
                            st.text(max_size=3),
                            st.none(),
                            st.floats(),
                        )
                    )
                body = json.dumps(payload).encode()
            return Req(
                "ConsumerGroupUpdateCheckPoint",
                "POST",
                f"{base}/{group}",
                q(**params),
                (JSON_TYPE,),
                body,
                must_refuse=True,
            )
        if kind == "leave":  # of consumers the group does not know: accepted or not, no change
            params = {"type": "leave"}
            if draw(st.booleans()):
                params["consumer"] = consumer
            return Req("ConsumerGroupLeave", "POST", f"{base}/{group}", q(**params))
        kind_value = draw(
            st.text(max_size=10).filter(lambda t: t not in ("heartbeat", "checkpoint", "leave"))
        )
        return Req(
            "ConsumerGroupPost:other",
            "POST",
            f"{base}/{group}",
            q(type=kind_value, consumer=consumer),
            (JSON_TYPE,),
            b"[]",
            must_refuse=True,
        )

    @st.composite
    def reads(draw: st.DrawFn) -> Req:
        if draw(st.booleans()):
            return Req("ListConsumerGroup", "GET", base, q(**draw(junk_query())))
        name = draw(st.one_of(st.sampled_from(KEEP_GROUPS), NEVER_NAMES, WEIRD_TEXT.filter(bool)))
        params: dict[str, str] = {}
        if draw(st.booleans()):
            params["type"] = draw(st.sampled_from(["status", "", "x"]))
        if draw(st.booleans()):
            params["shard"] = draw(ODD_INT_TEXT)
        return Req("GetCheckPoint", "GET", f"{base}/{seg(name)}", q(**params))

    @st.composite
    def scratch(draw: st.DrawFn) -> Req:
        ls = draw(st.one_of(*[st.just(SCRATCH_LOGSTORES[0])] * 3, SCRATCH_NAMES))
        sbase = f"/logstores/{seg(ls)}/consumergroups"
        name = draw(st.one_of(st.just(SCRATCH_GROUP), st.just(SCRATCH_GROUP), SCRATCH_NAMES))
        method = draw(st.sampled_from(["POST", "POST", "PUT", "DELETE", "GET"]))
        kind = draw(st.sampled_from(["heartbeat", "checkpoint", "leave", "create"]))
        consumer = draw(st.one_of(st.sampled_from(["a", "b", "c"]), WEIRD_TEXT))
        body = draw(
            st.one_of(
                st.lists(st.one_of(st.integers(-3, 20), ODD_INTS), max_size=5).map(dumps),
                json_value(2).map(dumps),
                group_def.map(dumps),
                st.fixed_dictionaries(
                    {
                        "shard": st.one_of(st.integers(0, 10), ODD_INTS),
                        "checkpoint": cursor_values(layout, 0),
                    }
                ).map(dumps),
                broken_json(group_def),
            )
        )
        if method == "POST" and kind == "create":
            return Req(
                "Groups:scratch", "POST", sbase, (), (JSON_TYPE,), body, project=SCRATCH_PROJECT
            )
        params = {
            "type": kind,
            "consumer": consumer,
            "forceSuccess": draw(st.sampled_from(["true", "false", "x"])),
        }
        if draw(st.booleans()):
            params["shards"] = draw(st.one_of(st.just("0,1"), st.text(max_size=8)))
        return Req(
            "Groups:scratch",
            method,
            f"{sbase}/{seg(name)}",
            q(**params),
            (JSON_TYPE,),
            body,
            project=SCRATCH_PROJECT,
        )

    return st.one_of(protected_changes(), reads(), scratch())
