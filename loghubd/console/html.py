"""HTML building blocks shared by both consoles: escaping, the page frame, tables, badges,
durations, sizes and SVG sparklines. Pure: strings in, strings out.

Every value that came from outside (names, log contents, error texts) goes through `esc`;
functions here return markup (`Markup`), so a caller never escapes twice or forgets to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, urlencode

from loghubd.admin.view import STATE_WORDS
from loghubd.console.paging import Pages


class Markup(str):
    """A string that is already HTML: `esc` leaves it alone."""

    __slots__ = ()


# The five characters html.escape(quote=True) replaces, as one C-level translate (a page of
# 256 shards escapes thousands of cells: see bench/console_bench.py).
ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"})


def esc(value: object) -> Markup:
    if isinstance(value, Markup):
        return value
    return Markup(str(value).translate(ESCAPES))


def join(parts: Iterable[object]) -> Markup:
    return Markup("".join(esc(p) for p in parts))


_VOID = frozenset({"input", "meta", "link", "br"})


def tag(name: str, content: object = "", /, **attrs: object) -> Markup:
    """`<name attrs>content</name>`; attribute names use `_` for `-` and a trailing `_` to
    dodge keywords (`class_`); None or False leave an attribute out, True writes it bare."""
    out = [f"<{name}"]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        attr = key.rstrip("_").replace("_", "-")
        out.append(f" {attr}" if value is True else f' {attr}="{esc(value)}"')
    out.append(">")
    if name in _VOID:
        return Markup("".join(out))
    out.append(esc(content) if not isinstance(content, list) else join(content))
    out.append(f"</{name}>")
    return Markup("".join(out))


def link(href: str, text: object, **attrs: object) -> Markup:
    return tag("a", text, href=href, **attrs)


def url(base: str, *segments: str, **query: object) -> str:
    """`base/seg/seg?query`; segments are percent-encoded, empty query values dropped."""
    path = base.rstrip("/") + "".join("/" + quote(s, safe="") for s in segments)
    q = {k: v for k, v in query.items() if v not in (None, "")}
    return path + ("?" + urlencode(q) if q else "")


# -- values ---------------------------------------------------------------------------------


def ago(seconds: float) -> str:
    """A duration as people say it: "3 s", "4 min 10 s", "2 h 5 min"."""
    if seconds != seconds or seconds < 0:  # NaN, or a clock step backwards
        seconds = 0.0
    if seconds < 10:
        return f"{seconds:.1f} s"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def count(n: float) -> str:
    if n >= 10_000_000:
        return f"{n / 1_000_000:.0f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    return f"{n:,.0f}" if n == int(n) else f"{n:.1f}"


def clock(when: float) -> str:
    """A UTC wall-clock time, to the second (the same on every viewer's screen)."""
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(when)) + " UTC"


# Badge tone by state word: the word itself is always shown (colour is never the only cue).
_TONES = {
    "ok": ("already_alloc", "consuming", "running", "ready", "readwrite", "caught up", "alive"),
    "warn": ("transfer", "wait", "starting", "stopping", "not_alloc", "behind", "readonly"),
    "bad": ("failed", "not ready", "error", "expired", "lease_expired", "stopped"),
}


@lru_cache(maxsize=64)
def badge(word: str) -> Markup:
    """A state as a badge; the coordinator's shard states in the words `loghubd status` and
    `group describe` use (`already_alloc` reads "assigned")."""
    tone = next((t for t, words in _TONES.items() if word in words), "plain")
    shown = STATE_WORDS.get(word, word.replace("_", " "))
    return tag("span", shown, class_=f"badge {tone}")


def sparkline(values: Sequence[float], label: str, *, width: int = 120, height: int = 24) -> Markup:
    """A small SVG line chart of `values` (oldest first), labelled for screen readers."""
    pts = _points(tuple(values) or (0.0,), width, height)
    text = esc(label)
    return Markup(
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}"'
        f' role="img" aria-label="{text}"><title>{text}</title>'
        f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{pts}"/>'
        "</svg>"
    )


@lru_cache(maxsize=1024)
def _points(values: tuple[float, ...], width: int, height: int) -> str:
    """The polyline's points in whole pixels (cached: idle shards share one flat line)."""
    if not all(map(math.isfinite, values)):
        values = tuple(v if math.isfinite(v) else 0.0 for v in values)
    top = max(values) or 1.0
    step = width / max(len(values) - 1, 1)
    scale = (height - 4) / top
    flat: list[float] = []
    for i, v in enumerate(values):
        flat += (i * step, height - 2 - v * scale)
    return " ".join(["%d,%d"] * len(values)) % tuple(flat)


# -- structure ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Column:
    title: str
    numeric: bool = False


def table(
    caption: str,
    columns: Sequence[Column],
    rows: Iterable[Sequence[object]],
    *,
    id: str | None = None,
) -> Markup:
    """A scrollable table with a caption (its accessible name) and column headers."""
    head = "".join(
        f'<th scope="col" class="num">{esc(c.title)}</th>'
        if c.numeric
        else f'<th scope="col">{esc(c.title)}</th>'
        for c in columns
    )
    opens = ["<td>" if not c.numeric else '<td class="num">' for c in columns[1:]]
    body = []
    for row in rows:
        # Plain f-strings, not `tag`: this loop runs for every cell of a 256-row table.
        # `esc` inlined: markup as is, text through one translate (no Markup made per cell).
        first, *rest = row
        cells = "".join(
            [
                f"{o}{v if v.__class__ is Markup else str(v).translate(ESCAPES)}</td>"
                for o, v in zip(opens, rest, strict=True)
            ]
        )
        body.append(f'<tr><th scope="row">{esc(first)}</th>{cells}</tr>')
    if not body:
        body.append(f'<tr><td colspan="{len(columns)}" class="empty">none</td></tr>')
    table_id = f' id="{esc(id)}"' if id else ""
    return Markup(
        f'<div class="scroll" tabindex="0" role="region" aria-label="{esc(caption)}">'
        f"<table{table_id}><caption>{esc(caption)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def pager(pages: Pages, href: Callable[[int | None], str], what: str) -> Markup:
    """Links to the other pages of a long table (plain links: they work without JavaScript);
    nothing when everything fits on one page."""
    if pages.count <= 1:
        return Markup("")
    shown = f"{what} {pages.first + 1} to {pages.stop} of {pages.total}"
    links = []
    for n in range(1, pages.count + 1):
        if n == pages.number:
            links.append(f'<span aria-current="page">{n}</span>')
        else:
            links.append(f'<a href="{esc(href(n if n > 1 else None))}">{n}</a>')
    return Markup(
        f'<nav class="pager" aria-label="Pages of {esc(what)}">'
        f'<span class="shown">{esc(shown)}</span> {" ".join(links)}</nav>'
    )


def live(region_id: str, content: Markup, source: str, every_ms: int) -> Markup:
    """A region the script refreshes in place from `source` (the same page, asking for this
    region alone); without JavaScript it is simply the content as rendered."""
    return tag("div", content, id=region_id, data_live=source, data_every=every_ms, class_="live")


@dataclass(frozen=True, slots=True)
class Frame:
    """Where a console lives: its URL prefix ("" or "/console") and its name."""

    prefix: str
    product: str

    def static(self, name: str) -> str:
        return f"{self.prefix}/static/{name}"


def page(
    frame: Frame,
    title: str,
    body: Markup,
    *,
    crumbs: Sequence[tuple[str, str]] = (),
    user: str = "",
) -> Markup:
    """The whole document: header with breadcrumbs, main content, the script (deferred)."""
    trail = [link(frame.prefix + "/" if frame.prefix else "/", frame.product)]
    trail += [link(href, text) if href else esc(text) for text, href in crumbs]
    nav = Markup(" <span aria-hidden='true'>/</span> ").join(trail)
    who = ""
    if user:
        who = tag(
            "form",
            [
                tag("span", f"signed in as {user}", class_="who"),
                tag("button", "Sign out", type="submit"),
            ],
            method="post",
            action=f"{frame.prefix}/logout",
            class_="signout",
        )
    return Markup(
        "<!doctype html>"
        f'<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · {esc(frame.product)}</title>"
        f'<link rel="stylesheet" href="{esc(frame.static("console.css"))}">'
        f'<script defer src="{esc(frame.static("console.js"))}"></script>'
        "</head><body>"
        '<a class="skip" href="#main">Skip to content</a>'
        f'<header><nav aria-label="Breadcrumb">{nav}</nav>{who}</header>'
        f'<main id="main" tabindex="-1"><h1>{esc(title)}</h1>{body}</main>'
        '<footer><p class="updated" id="updated"></p></footer>'
        "</body></html>"
    )
