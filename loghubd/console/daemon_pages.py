"""The daemon console's page as HTML: readiness in words, sources, shards with throughput and
lag sparklines, and the last errors. Pure: the status snapshot and the history in, a `View`
out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loghubd.console import html as H
from loghubd.console.daemon_data import History
from loghubd.console.web import View
from loghubd.ops.health import Verdict

C = H.Column
LIVE_MS = 2000


def daemon(
    status: Mapping[str, Any],
    verdict: Verdict,
    history: History,
    processors: Mapping[str, str],
    version: str,
    now: float,
) -> View:
    live = _live(status, verdict, history, processors, version)
    return View("Daemon", H.live("daemon", live, "/", LIVE_MS), regions={"daemon": live})


def _live(
    status: Mapping[str, Any],
    verdict: Verdict,
    history: History,
    processors: Mapping[str, str],
    version: str,
) -> H.Markup:
    sources = list(status.get("sources", ()))
    facts = H.tag(
        "dl",
        [
            H.tag("dt", "Readiness"),
            H.tag("dd", H.badge("ready" if verdict.ready else "not ready")),
            H.tag("dt", "Consumer"),
            H.tag("dd", str(status.get("consumer", ""))),
            H.tag("dt", "Version"),
            H.tag("dd", f"loghubd {version}"),
        ],
        class_="facts",
    )
    parts = [facts]
    if verdict.reasons:
        parts.append(H.tag("h2", "Why it is not ready"))
        parts.append(H.tag("ul", [H.tag("li", r) for r in verdict.reasons], class_="reasons"))
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
                    s.get("name", ""),
                    H.badge(str(s.get("state", ""))),
                    f"{s.get('project')}/{s.get('logstore')} at {s.get('endpoint')}",
                    s.get("group", ""),
                    processors.get(str(s.get("name", "")), "?"),
                    str(len(s.get("shards", ()))),
                )
                for s in sources
            ),
            id="daemon-sources",
        )
    )
    parts.append(H.tag("h2", "Shards"))
    parts.append(_shards(sources, history))
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


def _shards(sources: list[Mapping[str, Any]], history: History) -> H.Markup:
    rows = []
    for src in sources:
        name = str(src.get("name", ""))
        for row in src.get("shards", ()):
            key = (name, int(row["shard"]))
            rate = history.throughput(key)
            lag = history.lag(key)
            minutes = max(history.span(key) / 60, 0.0)
            window = f"over the last {minutes:.1f} minutes"
            rate_now = rate[-1] if rate else 0.0
            lag_now = float(row.get("lag_seconds") or 0.0)
            rows.append(
                (
                    f"{name} / {row['shard']}",
                    H.badge(str(row.get("state", ""))),
                    H.join(
                        [
                            H.sparkline(
                                rate,
                                f"throughput of shard {row['shard']} {window}, "
                                f"now {rate_now:.1f} logs/s",
                            ),
                            f" {rate_now:.1f}/s",
                        ]
                    ),
                    H.join(
                        [
                            H.sparkline(
                                lag, f"lag of shard {row['shard']} {window}, now {lag_now:.1f} s"
                            ),
                            " caught up" if row.get("caught_up") else f" {H.ago(lag_now)}",
                        ]
                    ),
                    H.count(float(row.get("lag_log_groups") or 0)),
                    str(row.get("reason") or "—"),
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
