"""The `loghubd serve` console in a real headless Chromium, against real `loghubd serve` and
real `loghubd run` daemons: owners and hand-over on the group page without a reload, a live
tail with an SPL filter, and a key whose policy denies a logstore not seeing it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loghubd.testing import wait_until
from loghubd.testing.process import ServerProcess
from tests.console.conftest import DESKTOP, OffLoop, assert_accessible, screenshot
from tests.integration.daemon_harness import PROJECT, TIMEOUT, Admin, Pool

CONSOLE = "/console/p/" + PROJECT + "/l/"


def _url(server: ServerProcess, path: str) -> str:
    return f"{server.endpoint}{path}"


def _owners_on_page(page: Any) -> dict[int, str]:
    """shard → owner cell, read from the group page's shard table as the browser shows it."""
    rows = page.eval_on_selector_all(
        "#group-shards tbody tr",
        "rows => rows.map(r => [r.cells[0].innerText, r.cells[1].innerText])",
    )
    return {int(shard): owner for shard, owner in rows}


@pytest.fixture
def pool(console_server: ServerProcess, tmp_path: Path) -> Iterator[Pool]:
    pool = Pool(tmp_path / "pool", console_server.endpoint)
    pool.admin = OffLoop(pool.admin)  # type: ignore[assignment]
    yield pool
    pool.close()


def test_group_page_shows_owners_and_the_hand_over_live(
    console_server: ServerProcess, pool: Pool, page: Any, shots: Path
) -> None:
    pool.admin.create_logstore("groups", 4)
    pool.admin.create_group("groups", "readers", int(TIMEOUT), False)
    pool.produce("groups", count=200, group_size=20).wait()
    alpha = pool.daemon("groups", "readers", "alpha")
    beta = pool.daemon("groups", "readers", "beta")

    def balanced() -> dict[int, str] | None:
        owners = pool.admin.owners("groups", "readers")
        ok = sorted(owners.values()) == ["alpha", "alpha", "beta", "beta"]
        return owners if ok else None

    owners = wait_until(balanced, 30, alpha.log_tail, interval=0.3)
    page.goto(_url(console_server, CONSOLE + "groups/g/readers"))
    assert _owners_on_page(page) == owners
    # Committed positions appear as the daemons commit (every second), without a reload.
    page.wait_for_function("!document.querySelector('#group').innerText.includes('no checkpoint')")
    consumers = page.locator("#group-consumers tbody")
    assert "alpha" in consumers.inner_text() and "beta" in consumers.inner_text()
    screenshot(page, shots, "serve-group")
    # The small picture docs/img/console-group.png is a copy of this one.
    page.set_viewport_size({"width": 900, "height": 560})
    page.screenshot(path=str(shots / "serve-group-readme.png"))
    page.set_viewport_size(DESKTOP)
    assert_accessible(page)

    # alpha stops (SIGTERM: it hands its shards back); the open page shows beta taking
    # them over, with no reload (the marker set on this document survives).
    page.evaluate("window.__sameDocument = true")
    assert alpha.stop() == 0, alpha.log_tail()
    page.wait_for_function(
        """() => [...document.querySelectorAll("#group-shards tbody tr")]
             .every(r => r.cells[1].innerText == 'beta')""",
        timeout=20_000,
    )
    assert page.evaluate("window.__sameDocument") is True
    assert _owners_on_page(page) == {s: "beta" for s in range(4)}
    assert pool.admin.owners("groups", "readers") == {s: "beta" for s in range(4)}
    assert beta.alive()


def test_logstore_page_without_javascript(
    console_server: ServerProcess, console_admin: Admin, browser: Any, shots: Path
) -> None:
    """The read-only views are complete as served: shards with state, range and lineage."""
    console_admin.create_logstore("nojs", 2)
    console_admin.split("nojs", 0, "20000000000000000000000000000000")
    context = browser.new_context(java_script_enabled=False, viewport=DESKTOP)
    try:
        page = context.new_page()
        page.goto(_url(console_server, "/console"))
        page.get_by_role("link", name="nojs").click()
        table = page.locator("#logstore-shards")
        rows = table.locator("tbody tr").all_inner_texts()
        assert len(rows) == 4, rows
        assert "readonly" in rows[0] and "children 2, 3" in rows[0]
        assert "parent 0" in rows[2] and "readwrite" in rows[2]
        assert "20000000000000000000000000000000" in rows[2]
        screenshot(page, shots, "serve-logstore")
    finally:
        context.close()


def test_a_long_shard_table_pages_with_and_without_javascript(
    console_server: ServerProcess, console_admin: Admin, browser: Any, page: Any
) -> None:
    """60 shards: 50 to a page; the pager's plain links work without JavaScript, and the
    live refresh of page 2 keeps showing page 2 (it renders only the visible page)."""
    console_admin.create_logstore("paged", 60)
    console_admin.create_group("paged", "many", 60, False)
    shards = "#logstore-shards tbody tr th"
    context = browser.new_context(java_script_enabled=False, viewport=DESKTOP)
    try:
        nojs = context.new_page()
        nojs.goto(_url(console_server, CONSOLE + "paged"))
        assert nojs.locator(shards).all_inner_texts() == [str(i) for i in range(50)]
        assert "shards 1 to 50 of 60" in nojs.inner_text("nav.pager")
        nojs.get_by_role("navigation", name="Pages of shards").get_by_role("link", name="2").click()
        assert nojs.locator(shards).all_inner_texts() == [str(i) for i in range(50, 60)]
        assert nojs.url.endswith("?page=2")
    finally:
        context.close()
    page.goto(_url(console_server, CONSOLE + "paged/g/many?page=2"))
    page.evaluate("window.__sameDocument = true")
    assert page.get_attribute("#group", "data-live").endswith("/g/many?page=2")
    # After a live refresh (every second) the table still holds page 2's shards.
    page.evaluate("document.querySelector('#group-shards').dataset.old = '1'")
    page.wait_for_function("!document.querySelector('#group-shards').dataset.old")
    rows = page.locator("#group-shards tbody tr th").all_inner_texts()
    assert rows == [str(i) for i in range(50, 60)], rows
    assert page.evaluate("window.__sameDocument") is True
    assert_accessible(page)


def test_tail_is_live_and_an_spl_filter_narrows_it(
    console_server: ServerProcess, pool: Pool, page: Any, shots: Path
) -> None:
    pool.admin.create_logstore("tail", 2)
    pool.produce("tail", count=40, group_size=10, prefix="old-").wait()
    page.goto(_url(console_server, CONSOLE + "tail/tail"))
    page.evaluate("window.__sameDocument = true")
    logs = page.locator("#tail details.log summary")
    assert logs.count() == 40
    assert "new-3" not in page.inner_text("#tail")

    pool.produce("tail", count=5, group_size=5, prefix="new-").wait()
    page.wait_for_function("document.querySelector('#tail').innerText.includes('id=new-3')")
    assert page.evaluate("window.__sameDocument") is True

    # A log opens as a readable record, by keyboard.
    first = page.locator("#tail details.log").first
    first.locator("summary").focus()
    page.keyboard.press("Enter")
    assert first.evaluate("d => d.open") is True
    assert first.locator("dt", has_text="msg").count() == 1
    screenshot(page, shots, "serve-tail")
    assert_accessible(page)

    # The filter box is reached with the keyboard from the top; Enter applies it.
    page.reload()
    for _ in range(8):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "q":
            break
    assert page.evaluate("document.activeElement.id") == "q"
    page.keyboard.type("* | where level = 'ERROR'")
    page.keyboard.press("Enter")
    page.wait_for_url("**q=*")
    shown = page.locator("#tail details.log summary").all_inner_texts()
    # `loghubd produce` writes level ERROR for every fifth id: 8 of old, 1 of new.
    assert len(shown) == 9, shown
    assert all("level=ERROR" in s for s in shown), shown

    # A wrong statement is reported next to the box, with its position.
    page.fill("#q", "* | where level = ")
    page.keyboard.press("Enter")
    assert page.get_by_role("alert").inner_text()
    assert page.locator("#q").get_attribute("aria-invalid") == "true"


KEYS = """
[[keys]]
id = "admin"
secret = "admin-secret"

[[keys]]
id = "limited"
secret = "limited-secret"
policy = "no-secrets"

[[policies.no-secrets.statements]]
effect = "Allow"
actions = ["log:*"]
resources = ["acs:log:*:*:project/*"]

[[policies.no-secrets.statements]]
effect = "Deny"
actions = ["log:*"]
resources = ["acs:log:*:*:project/PROJECT/logstore/secret*"]
""".replace("PROJECT", PROJECT)


def _sign_in(page: Any, key_id: str, secret: str) -> None:
    page.get_by_label("Access key id").fill(key_id)
    page.get_by_label("Access key secret").fill(secret)
    page.get_by_role("button", name="Sign in").click()


def test_a_key_sees_only_what_its_policy_allows(tmp_path: Path, page: Any, shots: Path) -> None:
    # The logstores are made by an open server; the same data is then served with keys.
    data = tmp_path / "keyed"
    open_server = ServerProcess(data).start()
    try:
        admin = OffLoop(Admin(open_server.endpoint))
        admin.create_logstore("public", 1)
        admin.create_logstore("secret-stuff", 1)
    finally:
        open_server.kill()
    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS)
    server = ServerProcess(
        data, extra_args=["--access-keys", str(keys), "--console-token", "the-token"]
    ).start()
    try:
        page.goto(_url(server, "/console"))
        assert "/console/login" in page.url
        screenshot(page, shots, "serve-login")
        assert_accessible(page)
        _sign_in(page, "limited", "wrong")
        assert "do not match" in page.get_by_role("alert").inner_text()

        _sign_in(page, "limited", "limited-secret")
        page.wait_for_url("**/console")
        assert page.get_by_role("link", name="public").count() == 1
        assert "secret-stuff" not in page.content()
        screenshot(page, shots, "serve-index")
        assert_accessible(page)
        for path in ("secret-stuff", "secret-stuff/tail"):
            response = page.goto(_url(server, CONSOLE + path))
            assert response is not None and response.status == 404
            assert "secret-stuff" not in page.inner_text("main").replace(
                "No logstore secret-stuff", ""
            )

        page.goto(_url(server, "/console"))
        page.get_by_role("button", name="Sign out").click()
        _sign_in(page, "admin", "admin-secret")
        page.wait_for_url("**/console")
        assert page.get_by_role("link", name="secret-stuff").count() == 1
        # The console token signs in too, with the full view.
        page.get_by_role("button", name="Sign out").click()
        page.get_by_label("Console token (instead of a key)").fill("the-token")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/console")
        assert "signed in as console token" in page.inner_text("header")
        assert page.get_by_role("link", name="secret-stuff").count() == 1
    finally:
        server.kill()
