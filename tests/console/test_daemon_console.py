"""The daemon console (the ops listener's `/`) in a real headless Chromium, against a real
`loghubd run` with two sources: one consuming, one that cannot start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loghubd.testing.process import ServerProcess
from tests.console.conftest import OffLoop, assert_accessible, screenshot
from tests.integration.daemon_harness import Pool, source_entry


def test_daemon_page_shows_sources_shards_throughput_and_why_not_ready(
    console_server: ServerProcess, tmp_path: Path, page: Any, shots: Path
) -> None:
    pool = Pool(tmp_path / "pool", console_server.endpoint)
    pool.admin = OffLoop(pool.admin)  # type: ignore[assignment]
    try:
        pool.admin.create_logstore("daemonpage", 2)
        daemon = pool.daemon(
            "unused",
            "unused",
            "solo",
            sources=[
                source_entry("main", pool.endpoint, "daemonpage", consumer={"group": "pagegroup"}),
                source_entry("broken", pool.endpoint, "missing", consumer={"group": "pagegroup"}),
            ],
        )
        url = f"http://127.0.0.1:{daemon.ops_port}/"
        from loghubd.testing import wait_until

        def reachable() -> bool:
            try:
                return page.goto(url).status == 200
            except Exception:  # not listening yet
                return False

        wait_until(reachable, 20, daemon.log_tail, interval=0.3)
        page.evaluate("window.__sameDocument = true")
        shards = "#daemon-shards tbody"
        page.wait_for_function(
            f"""() => [...document.querySelectorAll("{shards} tr")]
                 .filter(r => r.innerText.includes('consuming')).length == 2""",
            timeout=20_000,
        )
        text = page.inner_text("#daemon")
        assert "not ready" in text
        assert "source broken: cannot start" in text and "LogStoreNotExist" in text
        sources = page.locator("#daemon-sources tbody tr")
        assert sources.count() == 2
        main = sources.filter(has_text="main").inner_text()
        assert "jsonl" in main and "daemonpage" in main
        errors = page.locator("#daemon-errors tbody tr")
        # Errors are noted by the sampler (every 2 s); the page shows them as they come.
        page.wait_for_function(
            "document.querySelector('#daemon-errors').innerText.includes('LogStoreNotExist')"
        )
        assert "LogStoreNotExist" in errors.first.inner_text()
        assert " UTC" in errors.first.inner_text()  # with its time
        assert "loghubd 0." in text  # the version

        # Logs written while the page is open show as throughput, without a reload.
        producer = pool.produce("daemonpage", count=3000, rate=600, group_size=50, prefix="t-")
        page.wait_for_function(
            f"""() => [...document.querySelectorAll("{shards} tr")]
                 .some(r => parseFloat(r.cells[2].innerText) > 0)""",
            timeout=20_000,
        )
        producer.wait()
        assert page.evaluate("window.__sameDocument") is True
        assert page.locator(f"{shards} svg[role=img]").count() == 4  # throughput and lag
        screenshot(page, shots, "daemon")
        assert_accessible(page)
    finally:
        pool.close()
