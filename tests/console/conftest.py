"""Fixtures for the console's browser tests: ONE headless Chromium per test session (Debian's
`/usr/bin/chromium`, driven by Playwright through `executable_path`: no browser download),
a fresh context per test, screenshots and the axe-core accessibility check.

The tests run together, back to back, on one xdist worker (conftest.py GROUPS: `console`),
so the browser and the shared `loghubd serve` start once. Screenshots go to
`test-artifacts/console/` (kept after the run, ignored by git).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import Admin

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = REPO / "test-artifacts" / "console"
AXE = Path(__file__).with_name("vendor") / "axe-core-4.14.1" / "axe.min.js"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
NARROW = {"width": 390, "height": 844}


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """Package scope, not session: Playwright's sync API keeps an asyncio loop running in
    this thread while it is open, which would break any later test on this worker that runs
    a loop of its own (`anyio.run`). The console tests run back to back on one worker, so
    this is still one browser for all of them."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the console tests drive Debian's chromium "
            "(scripts/debs.sh chromium:chromium, as scripts/test.sh does)"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: install the test extra (pip install -e .[test])")
    with sync_playwright() as pw:
        # Playwright gives every launch a fresh temporary profile (--user-data-dir).
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page in a fresh context (no cookies). CSP is bypassed only so that the test can
    inject axe-core; the pages themselves load nothing but their own files."""
    context = browser.new_context(viewport=DESKTOP, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture(scope="session")
def shots() -> Path:
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    return SHOTS


def screenshot(page: Any, folder: Path, name: str) -> None:
    """The page at a desktop and a narrow width (full length); the viewport is restored."""
    page.screenshot(path=str(folder / f"{name}-desktop.png"), full_page=True)
    page.set_viewport_size(NARROW)
    page.screenshot(path=str(folder / f"{name}-narrow.png"), full_page=True)
    # The narrow layout must not scroll sideways as a whole (wide tables scroll in place).
    width = page.evaluate("document.documentElement.scrollWidth")
    page.set_viewport_size(DESKTOP)
    assert width <= NARROW["width"], f"{name}: the page is {width}px wide at {NARROW}"


def assert_accessible(page: Any) -> None:
    """axe-core (vendored, pinned) finds no WCAG 2 A/AA violation on the page as shown."""
    page.add_script_tag(path=str(AXE))
    violations = page.evaluate(
        """async () => (await axe.run(document, {runOnly: ['wcag2a', 'wcag2aa', 'wcag21aa',
             'best-practice']})).violations.map(v => ({id: v.id, impact: v.impact,
             help: v.help, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))"""
    )
    assert violations == [], json.dumps(violations, indent=1)


class OffLoop:
    """Calls a helper that runs an event loop of its own (`Admin`: `anyio.run` per call) in a
    thread: Playwright's sync API keeps an event loop running in the test's thread."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with ThreadPoolExecutor(1) as pool:
                return pool.submit(attr, *args, **kwargs).result()

        return call


@pytest.fixture(scope="session")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One `loghubd serve` without access keys, shared by the tests (each uses logstores of
    its own)."""
    server = ServerProcess(tmp_path_factory.mktemp("console") / "server").start()
    yield server
    server.kill()


@pytest.fixture(scope="session")
def console_admin(console_server: ServerProcess) -> Admin:
    return OffLoop(Admin(console_server.endpoint))  # type: ignore[return-value]
