"""The console's HTML building blocks (pure)."""

from __future__ import annotations

import math
import re

import pytest

from loghubd.console import html as H
from loghubd.console.paging import Pages


@pytest.mark.parametrize(
    ("value", "out"),
    [
        ("<script>alert('x')</script>", "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"),
        ('a "b" & c', "a &quot;b&quot; &amp; c"),
        (42, "42"),
        (H.Markup("<b>kept</b>"), "<b>kept</b>"),
    ],
)
def test_esc_escapes_what_came_from_outside_once(value: object, out: str) -> None:
    assert H.esc(value) == out
    assert H.esc(H.esc(value)) == out  # Markup is never escaped twice


def test_tag_attributes_and_void_elements() -> None:
    assert H.tag("input", name="q", aria_invalid="true", disabled=False, required=True) == (
        '<input name="q" aria-invalid="true" required>'
    )
    assert H.tag("p", ["a<", H.Markup("<b>b</b>")], class_="x") == '<p class="x">a&lt;<b>b</b></p>'


def test_url_encodes_segments_and_drops_empty_query_values() -> None:
    assert H.url("/console", "p", "a b", "l", "x/y", shard=None, q="* | where a = 'b'") == (
        "/console/p/a%20b/l/x%2Fy?q=%2A+%7C+where+a+%3D+%27b%27"
    )


def test_table_has_caption_headers_and_escapes_cells() -> None:
    out = H.table("Shards", [H.Column("Shard"), H.Column("Size", True)], [("<1>", "2")], id="t")
    assert '<table id="t"><caption>Shards</caption>' in out
    assert '<th scope="row">&lt;1&gt;</th><td class="num">2</td>' in out
    assert 'aria-label="Shards"' in out
    empty = H.table("Nothing", [H.Column("A"), H.Column("B")], [])
    assert '<td colspan="2" class="empty">none</td>' in empty


@pytest.mark.parametrize(
    "values",
    [[], [0.0], [0.0, 0.0, 0.0], [1.0, 5.0, 2.0], [math.nan, math.inf, 3.0], list(range(90))],
)
def test_sparkline_points_stay_inside_the_box(values: list[float]) -> None:
    svg = H.sparkline(values, "rate <now>", width=120, height=24)
    assert 'aria-label="rate &lt;now&gt;"' in svg and "<title>rate &lt;now&gt;</title>" in svg
    points = re.search(r'points="([^"]*)"', svg)
    assert points is not None
    for pair in points.group(1).split():
        x, y = map(int, pair.split(","))
        assert 0 <= x <= 120 and 0 <= y <= 24, svg


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.04, "0.0 s"), (3.26, "3.3 s"), (42, "42 s"), (250, "4 min 10 s"), (7500, "2 h 5 min"),
     (90000, "1 d 1 h"), (-5, "0.0 s"), (math.nan, "0.0 s")],
)  # fmt: skip
def test_ago_says_durations_as_people_do(seconds: float, text: str) -> None:
    assert H.ago(seconds) == text


def test_badges_always_show_the_word() -> None:
    assert H.badge("already_alloc") == '<span class="badge ok">assigned</span>'
    assert H.badge("failed") == '<span class="badge bad">failed</span>'
    assert H.badge("something new") == '<span class="badge plain">something new</span>'


def test_a_pager_links_every_other_page_and_marks_this_one() -> None:
    pages = Pages.of("2", 120)
    out = H.pager(pages, lambda n: H.url("/console/p/a/l/b", page=n), "shards")
    assert "shards 51 to 100 of 120" in out
    assert '<a href="/console/p/a/l/b">1</a>' in out  # the first page's URL names none
    assert '<span aria-current="page">2</span>' in out
    assert '<a href="/console/p/a/l/b?page=3">3</a>' in out
    assert H.pager(Pages.of(None, 50), lambda n: "", "shards") == ""  # one page: no pager
    assert (Pages.of("0", 120).number, Pages.of("999999999999", 120).number) == (1, 1)
