"""The browser tests use the dashboard's fixtures (``tests/system/web/conftest.py``): seeded
stores on both backends, a live uvicorn server in a thread, and headless Chromium."""

from __future__ import annotations

from tests.system.web.conftest import (
    browser_page,
    clock,
    playwright_instance,
    seeded,
    seeded_template,
    serve_app,
    sqlite_seeded,
    target,
)

__all__ = [
    "browser_page",
    "clock",
    "playwright_instance",
    "seeded",
    "seeded_template",
    "serve_app",
    "sqlite_seeded",
    "target",
]
