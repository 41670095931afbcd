"""The daemon console's page as HTML: readiness in words, sources, shards with throughput and
lag sparklines, and the last errors. Pure: the daemon's snapshot and the history in, a `View`
out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loghubd.console import html as H
from loghubd.console.daemon_data import History
from loghubd.console.paging import Pages
from loghubd.console.web import View
from loghubd.consumer.snapshot import DaemonSnapshot, SourceSnapshot

C = H.Column
LIVE_MS = 2000


def daemon(
    snap: DaemonSnapshot,
    history: History,
    processors: Mapping[str, str],
    version: str,
    page: str | None = None,
) -> View:
    """The page, with page `page` (a `page=` value) of the shard table."""
    pages = Pages.of(page, sum(len(s.shards) for s in snap.sources))
    live = _live(snap, history, processors, version, pages)
    return View(
        "Daemon", H.live("daemon", live, _here(pages.query), LIVE_MS), regions={"daemon": live}
    )


def _here(page: int | None) -> str:
    return "/" if page is None else f"/?page={page}"


def _live(
    snap: DaemonSnapshot,
    history: History,
    processors: Mapping[str, str],
    version: str,
    pages: Pages,
) -> H.Markup:
    sources = snap.sources
    facts = H.tag(
        "dl",
        [
            H.tag("dt", "Readiness"),
            H.tag("dd", H.badge("ready" if snap.ready else "not ready")),
            H.tag("dt", "Consumer"),
            H.tag("dd", snap.consumer),
            H.tag("dt", "Version"),
            H.tag("dd", f"loghubd {version}"),
        ],
        class_="facts",
    )
    parts = [facts]
    if snap.reasons:
        parts.append(H.tag("h2", "Why it is not ready"))
        parts.append(H.tag("ul", [H.tag("li", r) for r in snap.reasons], class_="reasons"))
    parts.append(H.tag("h2", "Sources"))
    parts.append(
        H.table(
            "Sources: what each consumes and with which processor",
            [
                C("Source"),
                C("State"),
                C("Logstore"),
                C("Consumer group"),
                C("Processor"),
                C("Shards held", True),
            ],
            (
                (
                    s.name,
                    H.badge(s.state),
                    f"{s.project}/{s.logstore} at {s.endpoint}"
                    + (f" via proxy {s.proxy}" if s.proxy else ""),
                    s.group,
                    processors.get(s.name, "?"),
                    str(len(s.shards)),
                )
                for s in sources
            ),
            id="daemon-sources",
        )
    )
    parts.append(H.tag("h2", "Shards"))
    parts.append(H.pager(pages, _here, "shards"))
    parts.append(_shards(sources, history, pages))
    parts.append(H.tag("h2", "Last errors"))
    errors = history.errors()[:20]
    parts.append(
        H.table(
            "Last errors, newest first",
            [C("Time"), C("Source"), C("Shard"), C("Error")],
            (
                (H.clock(e.when), e.source, "source" if e.shard < 0 else str(e.shard), e.text)
                for e in errors
            ),
            id="daemon-errors",
        )
    )
    return H.join(parts)


def _shards(sources: Sequence[SourceSnapshot], history: History, pages: Pages) -> H.Markup:
    rows = []
    held = [(src, shard) for src in sources for shard in src.shards]
    for src, shard in held[pages.first : pages.stop]:
        key = (src.name, shard.shard)
        rate = history.throughput(key)
        lag = history.lag(key)
        window = f"over the last {history.span(key) / 60:.1f} minutes"
        rate_now = rate[-1] if rate else 0.0
        lag_now = shard.lag_seconds or 0.0
        # While pulls fail the lag is unknown: not the "0 s" its absence would read as.
        lag_text = (
            " unknown"
            if shard.pull_failing_for is not None
            else " caught up"
            if shard.caught_up
            else f" {H.ago(lag_now)}"
        )
        problem = shard.reason or shard.processor_error
        rows.append(
            (
                f"{src.name} / {shard.shard}",
                H.badge(shard.state),
                H.Markup(
                    H.sparkline(
                        rate,
                        f"throughput of shard {shard.shard} {window}, now {rate_now:.1f} logs/s",
                    )
                    + f" {rate_now:.1f}/s"
                ),
                H.Markup(
                    H.sparkline(lag, f"lag of shard {shard.shard} {window}, now{lag_text}")
                    + lag_text
                ),
                f"unknown: pulls failing for {shard.pull_failing_for:.0f}s"
                if shard.pull_failing_for is not None
                else "not measured yet"
                if shard.lag_log_groups is None
                else H.count(shard.lag_log_groups),
                problem or "—",
            )
        )
    return H.table(
        "Shards this daemon holds: state, throughput and lag",
        [
            C("Source / shard"),
            C("State"),
            C("Throughput (logs/s)"),
            C("Lag"),
            C("Behind (log groups)", True),
            C("Reason"),
        ],
        rows,
        id="daemon-shards",
    )
