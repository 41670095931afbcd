"""The serve console's pages as HTML: the project index, a logstore (shards and groups), a
consumer group (consumers, owners, positions, lag) and the tail. Pure: views in, `View` out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from loghubd.console import access as A
from loghubd.console import html as H
from loghubd.console.serve_data import (
    RATE_BUCKET_S,
    RATE_WINDOW_S,
    GroupView,
    LogstoreView,
    TailView,
)
from loghubd.console.web import View
from loghubd.server.storage import Logstore

C = H.Column
LIVE_MS = 1000  # groups and tail refresh every second


def _ls_url(frame: H.Frame, project: str, logstore: str, *more: str, **query: object) -> str:
    return H.url(frame.prefix, "p", project, "l", logstore, *more, **query)


def _crumbs(frame: H.Frame, ls: Logstore, *more: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return ((f"{ls.project} / {ls.name}", _ls_url(frame, ls.project, ls.name)), *more)


def index(frame: H.Frame, projects: Sequence[tuple[str, Sequence[Logstore]]]) -> View:
    parts: list[H.Markup] = []
    for project, stores in projects:
        rows = [
            (
                H.link(_ls_url(frame, project, ls.name), ls.name),
                f"{ls.ttl} days",
                H.clock(ls.create_time),
            )
            for ls in stores
        ]
        parts.append(H.tag("h2", f"Project {project}"))
        parts.append(
            H.table(
                f"Logstores of project {project}",
                [C("Logstore"), C("Retention"), C("Created")],
                rows,
            )
        )
    if not parts:
        parts.append(H.tag("p", "No projects to show yet.", class_="note"))
    return View("Projects and logstores", H.join(parts))


def _rate_label(what: str, rate: Sequence[float]) -> str:
    minutes = RATE_WINDOW_S / 60
    return (
        f"{what}: writes over the last {minutes:.0f} minutes, now {rate[-1]:.1f} logs/s, "
        f"peak {max(rate):.1f} logs/s"
    )


def logstore(frame: H.Frame, view: LogstoreView, viewer: A.Viewer) -> View:
    """The logstore page; its shard table shows one page of rows (`view.pages`)."""
    ls = view.logstore
    pages = view.pages

    def here(page: int | None) -> str:
        return _ls_url(frame, ls.project, ls.name, page=page)

    shards = (
        _shards(view, H.pager(pages, here, "shards"))
        if viewer.may(A.SEE_SHARDS, ls.project, ls.name)
        else H.tag("p", "Your access key may not list this logstore's shards.", class_="note")
    )

    def body() -> H.Markup:
        parts: list[H.Markup] = [
            H.tag(
                "p",
                [
                    H.link(_ls_url(frame, ls.project, ls.name, "tail"), "Tail this logstore"),
                    f" · retention {ls.ttl} days",
                ],
            )
        ]
        parts.append(H.tag("h2", "Shards"))
        parts.append(H.live("shards", shards, here(pages.query), 5000))
        parts.append(H.tag("h2", "Consumer groups"))
        if viewer.may(A.SEE_GROUPS, ls.project, ls.name, "*"):
            items = [
                H.tag("li", H.link(_ls_url(frame, ls.project, ls.name, "g", g), g))
                for g in view.groups
            ]
            parts.append(H.tag("ul", items) if items else H.tag("p", "none", class_="note"))
        else:
            parts.append(H.tag("p", "Your access key may not list consumer groups.", class_="note"))
        return H.join(parts)

    return View(
        f"Logstore {ls.name}",
        body,
        crumbs=((f"{ls.project} / {ls.name}", ""),),
        regions={"shards": shards},
    )


def _shards(view: LogstoreView, pager: H.Markup) -> H.Markup:
    rows = []
    for r in view.shards:
        s = r.shard
        rel = []
        if s.parents:
            rel.append(f"parent {', '.join(map(str, s.parents))}")
        if r.children:
            rel.append(f"children {', '.join(map(str, r.children))}")
        rows.append(
            (
                str(s.shard_id),
                H.badge(r.state),
                H.Markup(f'<span class="mono">{s.begin_key} to {s.end_key}</span>'),
                "; ".join(rel) or "—",
                H.size(s.stored_bytes),
                H.count(s.next_seq - s.min_seq),
                H.Markup(
                    H.sparkline(r.rate, _rate_label(f"shard {s.shard_id}", r.rate))
                    + f" {r.rate[-1]:.1f}/s"
                ),
            )
        )
    total = H.tag(
        "p",
        [
            H.sparkline(view.rate, _rate_label("whole logstore", view.rate), width=240, height=32),
            f" {view.rate[-1]:.1f} logs/s now (buckets of {RATE_BUCKET_S:.0f} s)",
        ],
    )
    return H.join(
        [
            total,
            pager,
            H.table(
                "Shards: state, key range, lineage, size and write rate",
                [
                    C("Shard"),
                    C("State"),
                    C("Key range"),
                    C("Split / merge"),
                    C("Size", True),
                    C("Log groups", True),
                    C("Write rate"),
                ],
                rows,
                id="logstore-shards",
            ),
        ]
    )


def group(frame: H.Frame, view: GroupView, now: float) -> View:
    """The group page; its shard and consumer tables each show one page of rows
    (`view.pages`, `view.consumer_pages`), and each pager keeps the other's page."""
    ls = view.logstore
    pages, cpages = view.pages, view.consumer_pages

    def here(page: int | None, consumers_page: int | None) -> str:
        return _ls_url(
            frame, ls.project, ls.name, "g", view.name, page=page, consumers_page=consumers_page
        )

    live = _group_live(
        view,
        H.pager(pages, lambda n: here(n, cpages.query), "shards"),
        H.pager(cpages, lambda n: here(pages.query, n), "consumers"),
    )

    def body() -> H.Markup:
        settings = H.tag(
            "dl",
            [
                H.tag("dt", "Timeout"),
                H.tag("dd", f"{view.timeout:g} s"),
                H.tag("dt", "In order"),
                H.tag("dd", "yes" if view.order else "no"),
            ],
            class_="facts",
        )
        return H.join([settings, H.live("group", live, here(pages.query, cpages.query), LIVE_MS)])

    return View(
        f"Consumer group {view.name}",
        body,
        crumbs=_crumbs(frame, ls, (view.name, "")),
        regions={"group": live},
    )


def _group_live(view: GroupView, pager: H.Markup, consumer_pager: H.Markup) -> H.Markup:
    consumers = H.table(
        "Consumers",
        [C("Consumer"), C("Last heartbeat"), C("Shards held", True)],
        ((c.name, f"{H.ago(c.heartbeat_age)} ago", str(c.held)) for c in view.consumers),
        id="group-consumers",
    )
    rows = []
    for s in view.shards:
        owner: object = s.owner or "—"
        if s.next:
            owner = f"{s.owner} → {s.next}"
        rows.append(
            (
                str(s.shard),
                owner,
                H.badge(s.state),
                H.clock(s.checkpoint_time) if s.checkpoint_time is not None else "no checkpoint",
                ("≈ " if s.lag_estimated else "") + H.count(s.lag_logs),
                H.ago(s.lag_seconds) if s.lag_logs else "caught up",
            )
        )
    shards = H.table(
        "Shards of this group: owner, state, committed position and lag",
        [
            C("Shard"),
            C("Owner"),
            C("State"),
            C("Committed position (receive time)"),
            C("Lag (logs)", True),
            C("Lag (time)", True),
        ],
        rows,
        id="group-shards",
    )
    return H.join(
        [H.tag("h2", "Consumers"), consumer_pager, consumers, H.tag("h2", "Shards"), pager, shards]
    )


def tail(
    frame: H.Frame,
    ls: Logstore,
    shard_ids: Callable[[], Sequence[int]],
    shard: int | None,
    query: str,
    view: TailView,
) -> View:
    here = _ls_url(frame, ls.project, ls.name, "tail", shard=shard, q=query)
    logs = _tail_logs(view)
    return View(
        f"Tail of {ls.name}",
        lambda: _tail_body(
            frame, ls, shard_ids, shard, query, view, H.live("tail", logs, here, LIVE_MS)
        ),
        crumbs=_crumbs(frame, ls, ("tail", "")),
        regions={"tail": logs},
    )


def _tail_body(
    frame: H.Frame,
    ls: Logstore,
    shard_ids: Callable[[], Sequence[int]],
    shard: int | None,
    query: str,
    view: TailView,
    live: H.Markup,
) -> H.Markup:
    options = [H.tag("option", "all shards", value="", selected=shard is None)] + [
        H.tag("option", f"shard {sid}", value=sid, selected=sid == shard) for sid in shard_ids()
    ]
    error = (
        H.tag("p", view.error, class_="error", id="spl-error", role="alert") if view.error else ""
    )
    form = H.tag(
        "form",
        [
            H.tag("label", ["Shard", H.tag("select", options, name="shard", id="shard")]),
            H.tag(
                "label",
                [
                    "SPL filter",
                    H.tag(
                        "input",
                        name="q",
                        id="q",
                        value=query,
                        class_="spl",
                        placeholder="* | where level = 'ERROR'",
                        aria_describedby="spl-error" if view.error else None,
                        aria_invalid="true" if view.error else None,
                    ),
                ],
            ),
            H.tag("button", "Apply", type="submit"),
        ],
        method="get",
        action=_ls_url(frame, ls.project, ls.name, "tail"),
        class_="filter",
        role="search",
    )
    return H.join([form, error, live])


def _tail_logs(view: TailView) -> H.Markup:
    if view.error:
        return H.tag("p", "Fix the SPL statement to see logs.", class_="note")
    items = [
        _log_html(log.shard, log.seq, log.index, tuple(log.record.items())) for log in view.logs
    ]
    note = H.tag(
        "p",
        f"{len(view.logs)} newest logs shown, newest first ({view.scanned_logs} looked at).",
        class_="note",
    )
    body = H.Markup("".join(items)) if items else H.tag("p", "No logs match yet.", class_="note")
    return H.join([note, body])


@lru_cache(maxsize=4096)
def _log_html(shard: int, seq: int, index: int, record: tuple[tuple[str, str], ...]) -> str:
    """One log as a `<details>` record. Memoised on everything it shows: a live tail shows
    mostly the logs it showed a second ago, and only new ones are rendered."""
    t = H.ESCAPES  # f-strings and one translate per text: fifty records of a dozen fields
    when = ""
    fields = []
    meta = []
    for k, v in record:
        pair = f'<dt>{k.translate(t)}</dt><dd class="mono">{v.translate(t)}</dd>'
        if k.startswith("__"):
            meta.append(pair)
            if k == "__time__":
                when = v
        else:
            fields.append(pair)
    head = H.clock(int(when)) if when.isdigit() else "no time"
    preview = " ".join([f"{k}={v}" for k, v in record if not k.startswith("__")][:4])[:160]
    key = f"{shard}-{seq}-{index}"
    return (
        f'<details class="log" id="log-{key}"><summary id="sum-{key}">'
        f"{head} · shard {shard} · {preview.translate(t)}</summary>"
        f'<dl class="facts">{"".join(fields)}{"".join(meta)}<dt>shard / position</dt>'
        f"<dd>{shard} / {seq}:{index}</dd></dl></details>"
    )
