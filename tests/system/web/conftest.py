"""Fixtures for the dashboard tests: seeded stores on both backends, a live uvicorn server in a
thread, and a headless Chromium driven by Playwright.

The browser is Debian's ``chromium`` package (``apt-get install chromium``), launched through
Playwright's ``executable_path`` — Playwright's own browser download is never used. Browser
tests are marked ``browser`` and skipped, with the reason, only when that executable or the
``playwright`` package is missing (``JOBLEDGER_CHROMIUM`` names another executable).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger.testing import DEFAULT_START_MS, FakeClock
from tests.system.web.seed import Seeded, make_app, seed

CHROMIUM = os.environ.get("JOBLEDGER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).parent / "artifacts"
DOC_IMAGES = Path(__file__).resolve().parents[3] / "docs" / "images"
TOKEN = "test-token-0123456789abcdef"
USERS = {"alice": "correct horse battery staple"}


def _browser_missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM} (apt-get install chromium, or set JOBLEDGER_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; no browser download needed)"
    return None


BROWSER_MISSING = _browser_missing()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(DEFAULT_START_MS)


@pytest.fixture
def target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return str(tmp_path / "db" / "jobledger.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))


@pytest.fixture(scope="session")
def seeded_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, Seeded]:
    """The seeded SQLite store, made once per session; tests get copies of the file."""
    path = tmp_path_factory.mktemp("seed") / "db" / "jobledger.sqlite3"
    clock = FakeClock(DEFAULT_START_MS)
    app, made = make_app(str(path), clock)
    with app:
        seed(app, clock, made)
    return path, clock(), made


@pytest.fixture
def sqlite_seeded(
    seeded_template: tuple[Path, int, Seeded], tmp_path: Path, clock: FakeClock
) -> Iterator[tuple[jobledger.App, Seeded]]:
    """A private copy of the seeded SQLite store, its clock where the seed left it."""
    template, now, made = seeded_template
    copy = tmp_path / "db" / "jobledger.sqlite3"
    copy.parent.mkdir(mode=0o700)
    shutil.copy2(template, copy)
    clock.set(now)
    app, fresh = make_app(str(copy), clock)
    for name in ("dead_letters", "running", "cancelled", "reclaimed"):
        setattr(fresh, name, copy_of(getattr(made, name)))
    with app:
        yield app, fresh


def copy_of(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


@pytest.fixture
def seeded(
    backend: str, target: str, clock: FakeClock, request: pytest.FixtureRequest
) -> Iterator[tuple[jobledger.App, Seeded]]:
    """The seeded store on this backend (PostgreSQL is seeded afresh for every test)."""
    if backend == "sqlite":
        yield request.getfixturevalue("sqlite_seeded")
        return
    app, made = make_app(target, clock)
    with app:
        seed(app, clock, made)
        yield app, made


class LiveServer:
    """uvicorn serving an ASGI app on a free loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", server_header=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def serve_app() -> Iterator[Callable[[Any], LiveServer]]:
    servers: list[LiveServer] = []

    def start(app: Any) -> LiveServer:
        server = LiveServer(app).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def playwright_instance() -> Iterator[Any]:
    # Module scope, not session: while Playwright's sync API is open, its event loop counts as
    # running in this thread, so any later test of the same xdist worker that calls
    # asyncio.run() would fail. Closing it after each browser module ends that.
    if BROWSER_MISSING:
        pytest.skip(BROWSER_MISSING)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as instance:
        yield instance


@pytest.fixture
def browser_page(playwright_instance: Any) -> Iterator[Any]:
    """A page in a fresh Chromium profile (its own user data dir), 1280×860."""
    profile = tempfile.mkdtemp(prefix="jobledger-chromium-")
    context = playwright_instance.chromium.launch_persistent_context(
        profile,
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1280, "height": 860},
        device_scale_factor=1,
        locale="en-GB",
        timezone_id="UTC",
    )
    errors: list[str] = []
    try:
        page = context.pages[0] if context.pages else context.new_page()
        page.set_default_timeout(15_000)
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.console_errors = errors
        yield page
    finally:
        context.close()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(page: Any, name: str, *, doc: bool = False) -> Path:
    """Save the whole page as ``tests/system/web/artifacts/<name>.png``. With ``doc`` and
    ``JOBLEDGER_UPDATE_DOC_IMAGES=1`` (SQLite runs only), also save its top 1,100 pixels as
    ``docs/images/web-<page>.png`` for ``docs/web.md`` (smaller files)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    backend, _, page_name = name.partition("-")
    if doc and backend == "sqlite" and os.environ.get("JOBLEDGER_UPDATE_DOC_IMAGES") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        height = min(int(page.evaluate("document.documentElement.scrollHeight")), 1100)
        page.screenshot(
            path=str(DOC_IMAGES / f"web-{page_name}.png"),
            full_page=True,
            clip={"x": 0, "y": 0, "width": 1280, "height": height},
        )
    return path
