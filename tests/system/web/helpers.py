"""Shared helpers for the TestClient tests."""

from __future__ import annotations

import re
from typing import Any

from starlette.testclient import TestClient

from jobledger.web import WebSettings, create_app
from tests.system.web.conftest import TOKEN, USERS

HTML = {"accept": "text/html"}
JSON = {"accept": "application/json"}
BEARER = {"authorization": f"Bearer {TOKEN}"}
SECRET = "route-test-secret-key-0123456789"


def settings_for(**options: Any) -> WebSettings:
    """The test dashboard's settings: alice and the token, unless read-only says otherwise."""
    if not options.get("read_only") or options.get("token") or options.get("basic_auth"):
        options.setdefault("basic_auth", USERS)
        options.setdefault("token", TOKEN)
    options.setdefault("secret_key", SECRET)
    return WebSettings(**options)


def client_for(store: Any, **options: Any) -> TestClient:
    app = create_app(store, settings_for(**options))
    return TestClient(app, headers=HTML, follow_redirects=False)


def sign_in(client: TestClient, user: str = "alice") -> str:
    """Sign in through the login form; return the CSRF token the pages now carry."""
    response = client.post("/login", data={"user": user, "password": USERS[user], "next": "/"})
    assert response.status_code == 303, response.text
    return csrf_of(client.get("/dead-letters").text)


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]*)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


def cell(html: str, kind: str, status: str) -> str:
    match = re.search(
        rf'data-kind="{re.escape(kind)}" data-status="{status}">(?:<a [^>]*>)?(\d+)', html
    )
    assert match, (kind, status)
    return match.group(1)
