"""The shards family: ListShards, GetCursor, GetCursorTime, PullLogs (with SPL queries),
split, merge and delete, with invalid and foreign cursors and out-of-range shard ids."""

from __future__ import annotations

from hypothesis import strategies as st

from loghubd.protocol import cursor as cursors
from tests.reliability.fuzz.layout import KEEP, SCRATCH_PROJECT, Layout, q, seg
from tests.reliability.fuzz.values import (
    ODD_INT_TEXT,
    ODD_INTS,
    SCRATCH_NAMES,
    is_hex_like_server,
    junk_query,
)
from tests.reliability.fuzz.wire import Req


def cursor_values(layout: Layout, shard: int) -> st.SearchStrategy[str]:
    own = layout.cursors.get(shard, [])
    foreign = [c for s, cs in layout.cursors.items() if s != shard for c in cs]
    return st.one_of(
        st.sampled_from(own or ["x"]),
        st.sampled_from(foreign or ["y"]),
        st.text(max_size=30),
        ODD_INTS.map(lambda n: cursors.encode(abs(n))),
        ODD_INTS.map(lambda n: cursors.from_seq(shard, abs(n)) if 0 <= shard < 10**6 else "z"),
        st.sampled_from(["", "@@@", "MA==", "LTE=", "MDA=", "=" * 8, "\u00ff\u00fe"]),
    )


SPL = st.one_of(
    st.sampled_from(
        [
            "*",
            "* | where id = 'keep-1-0'",
            "* | where",
            "* | extend a = ",
            "* | project -wildcard",
            "* | where " + "(" * 3000 + "1" + ")" * 3000,
            "* | where " + "not " * 3000 + "true",
            "* | where a like '%%%'",
            "* | where cast(a as bigint) > 1",
            "* | where a in ()",
            "* | extend x = 1/0",
            "* | extend x = 9999999999999999999999 * 99999999999999999",
            "* | where __time__ between 1 and 'a'",
            '* | where "\xff" = 1',
        ]
    ),
    st.text(alphabet="*|()'\"=<>!%-+/ aAnwhereotxildbc0123456789,.", max_size=60).map(
        lambda t: "* | " + t
    ),
    st.text(max_size=30),
)


def shards(layout: Layout) -> st.SearchStrategy[Req]:
    ids = st.one_of(st.sampled_from(layout.shard_ids), ODD_INTS)

    @st.composite
    def reads(draw: st.DrawFn) -> Req:
        shard = draw(ids)
        shard_seg = draw(st.one_of(st.just(str(shard)), ODD_INT_TEXT.map(seg)))
        kind = draw(st.sampled_from(["cursor", "cursor_time", "log", "logs", "other", "list"]))
        path = f"/logstores/{KEEP}/shards/{shard_seg}"
        if kind == "list":
            return Req("ListShards", "GET", f"/logstores/{KEEP}/shards", q(**draw(junk_query())))
        if kind == "cursor":
            where = draw(st.one_of(st.sampled_from(["begin", "end"]), ODD_INT_TEXT))
            return Req("GetShard:cursor", "GET", path, q(type="cursor", **{"from": where}))
        if kind == "cursor_time":
            cur = draw(cursor_values(layout, shard))
            return Req("GetShard:cursor_time", "GET", path, q(type="cursor_time", cursor=cur))
        if kind in ("log", "logs"):
            params = {"type": kind, "cursor": draw(cursor_values(layout, shard))}
            if draw(st.booleans()):
                params["count"] = draw(ODD_INT_TEXT)
            if draw(st.booleans()):
                params["end_cursor"] = draw(cursor_values(layout, shard))
            if draw(st.integers(0, 3)) == 0:
                params["query"] = draw(SPL)
                params["pullMode"] = draw(st.sampled_from(["scan_on_stream", "", "x"]))
            if draw(st.integers(0, 10)) == 0:
                params["processor"] = draw(st.text(max_size=8))
            headers = (
                (
                    b"accept-encoding",
                    draw(st.sampled_from([b"lz4", b"zstd", b"deflate", b"", b"gzip", b"\xff"])),
                ),
            )
            return Req(f"GetShard:{kind}", "GET", path, q(**params), headers)
        other = draw(st.one_of(st.none(), st.text(max_size=10)))
        return Req("GetShard:other", "GET", path, () if other is None else q(type=other))

    @st.composite
    def protected_changes(draw: st.DrawFn) -> Req:
        kind = draw(st.sampled_from(["split", "merge", "action", "delete"]))
        rw = layout.readwrite()
        rw_ids = {int(s["shardID"]) for s in rw}
        if kind == "split":
            how = draw(st.sampled_from(["missing-shard", "readonly", "bad-key", "outside"]))
            shard, key = int(rw[0]["shardID"]), "8" + "0" * 31
            if how == "missing-shard":
                shard = draw(ODD_INTS.filter(lambda n: n not in layout.shard_ids))
                key = draw(st.from_regex(r"\A[0-9a-f]{32}\Z"))
            elif how == "readonly":
                shard = draw(st.sampled_from([i for i in layout.shard_ids if i not in rw_ids]))
                key = draw(st.from_regex(r"\A[0-9a-f]{32}\Z"))
            elif how == "bad-key":
                s = draw(st.sampled_from(rw))
                shard = int(s["shardID"])
                key = draw(
                    st.text(max_size=40).filter(
                        lambda k: not (len(k) == 32 and is_hex_like_server(k))
                    )
                )
            else:  # 32 hex digits, at or outside the shard's range
                s = draw(st.sampled_from(rw))
                shard = int(s["shardID"])
                begin, end = int(s["inclusiveBeginKey"], 16), int(s["exclusiveEndKey"], 16)
                k = draw(
                    st.one_of(
                        st.integers(0, begin),
                        st.integers(min(end, 2**128 - 1), 2**128 - 1),
                    )
                )
                key = f"{k:032x}"
            return Req(
                "SplitShard",
                "POST",
                f"/logstores/{KEEP}/shards/{shard}",
                q(action="split", key=key),
                must_refuse=True,
            )
        if kind == "merge":
            shard = draw(
                st.one_of(
                    st.sampled_from([i for i in layout.shard_ids if i not in rw_ids]),
                    st.just(layout.last_readwrite()),
                    ODD_INTS.filter(lambda n: n not in layout.shard_ids),
                )
            )
            return Req(
                "MergeShard",
                "POST",
                f"/logstores/{KEEP}/shards/{shard}",
                q(action="merge"),
                must_refuse=True,
            )
        if kind == "action":
            shard = draw(ids)
            action = draw(
                st.one_of(
                    st.none(), st.text(max_size=10).filter(lambda a: a not in ("split", "merge"))
                )
            )
            return Req(
                "SplitOrMergeShard",
                "POST",
                f"/logstores/{KEEP}/shards/{shard}",
                () if action is None else q(action=action, key="8" + "0" * 31),
                must_refuse=True,
            )
        # DeleteShard: readwrite shards and missing ones only (a read-only one would go)
        shard = draw(
            st.one_of(
                st.sampled_from(sorted(rw_ids)),
                ODD_INTS.filter(lambda n: n not in layout.shard_ids),
            )
        )
        return Req("DeleteShard", "DELETE", f"/logstores/{KEEP}/shards/{shard}", must_refuse=True)

    @st.composite
    def scratch(draw: st.DrawFn) -> Req:
        ls = draw(SCRATCH_NAMES)
        shard = draw(st.one_of(st.integers(0, 12), ODD_INTS))
        method = draw(st.sampled_from(["GET", "POST", "DELETE"]))
        params: dict[str, str] = {}
        if method == "POST":
            params["action"] = draw(st.sampled_from(["split", "merge", "split", "x"]))
            params["key"] = draw(
                st.one_of(st.from_regex(r"\A[0-9a-f]{32}\Z"), st.text(max_size=34))
            )
        elif method == "GET":
            params["type"] = draw(st.sampled_from(["cursor", "log", "cursor_time"]))
            params["from"] = draw(st.one_of(st.just("begin"), ODD_INT_TEXT))
            params["cursor"] = draw(cursor_values(layout, shard))
        return Req(
            "Shards:scratch",
            method,
            f"/logstores/{seg(ls)}/shards/{shard}",
            q(**params),
            project=SCRATCH_PROJECT,
        )

    return st.one_of(reads(), protected_changes(), scratch())
