"""``serve`` (what ``jobledger web`` runs): loopback by default, refusals, the generated sign-in
link; and the ``jobledger web`` arguments."""

from __future__ import annotations

import argparse
import io
import logging
import logging.config
import re
from urllib.parse import unquote

import pytest
import uvicorn
from starlette.testclient import TestClient

import jobledger
from jobledger.errors import InvalidArgument
from jobledger.web import WebSettings, serve
from jobledger.web.cli import add_arguments, options_from
from jobledger.web.server import is_loopback
from tests.system.web.conftest import TOKEN


@pytest.fixture
def captured(monkeypatch):
    """Replace uvicorn's run loop: keep the config serve() built instead of serving."""
    seen: list[uvicorn.Config] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: seen.append(self.config))
    return seen


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "jobs.sqlite3"
    jobledger.open_store(path).close()
    return path


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False),
     ("example.com", False)],
)  # fmt: skip
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_serve_binds_to_loopback_and_prints_a_sign_in_link(store_path, captured):
    out = io.StringIO()
    serve(store_path, out=out)
    [config] = captured
    assert (config.host, config.port) == ("127.0.0.1", 8642)
    assert config.server_header is False
    text = out.getvalue()
    # The token rides in the fragment, which browsers never send: no access log sees it.
    link = re.search(r"sign in with http://127\.0\.0\.1:8642/login#token=(\S+)", text)
    assert link, text
    token = unquote(link.group(1))
    with TestClient(config.app, headers={"accept": "text/html"}, follow_redirects=False) as client:
        assert client.get("/").status_code == 303
        assert client.get(f"/login?token={token}").status_code == 200  # no sign-in by GET
        assert client.get("/").status_code == 303
        signed_in = client.post("/login", data={"token": token})
        assert signed_in.status_code == 303
        assert client.get("/").status_code == 200


def test_the_access_log_never_shows_a_token(store_path, captured, caplog):
    """Even a stale ``/login?token=…`` bookmark leaves no token in uvicorn's access log."""
    serve(store_path, WebSettings(token=TOKEN), out=io.StringIO())
    [config] = captured
    logging.config.dictConfig(config.log_config)
    access = logging.getLogger("uvicorn.access")
    access.addHandler(caplog.handler)  # dictConfig replaced the root's handlers
    try:
        access.info(
            '%s - "%s %s HTTP/%s" %d',
            "127.0.0.1:5000",
            "GET",
            f"/login?next=%2F&token={TOKEN}&Password=hunter2hunter2",
            "1.1",
            200,
        )
    finally:
        access.removeHandler(caplog.handler)
    [line] = [record.getMessage() for record in caplog.records]
    assert TOKEN not in line and "hunter2" not in line
    assert "/login?next=%2F&token=[redacted]&Password=[redacted]" in line


def test_serve_refuses_a_public_address_without_authentication(store_path, captured):
    with pytest.raises(InvalidArgument, match="without authentication"):
        serve(store_path, host="0.0.0.0")
    with pytest.raises(InvalidArgument, match="without authentication"):
        serve(store_path, host="10.1.2.3")
    assert captured == []
    serve(store_path, WebSettings(token=TOKEN), host="0.0.0.0", out=io.StringIO())
    out = io.StringIO()
    serve(store_path, WebSettings(read_only=True), host="0.0.0.0", out=out)
    assert "read-only and open" in out.getvalue()
    assert [config.host for config in captured] == ["0.0.0.0", "0.0.0.0"]


def test_serve_checks_the_port(store_path, captured):
    with pytest.raises(InvalidArgument):
        serve(store_path, port=70000)


def test_serve_refuses_a_missing_store(tmp_path, captured):
    with pytest.raises(jobledger.StoreNotFound):
        serve(tmp_path / "nope.sqlite3", WebSettings(token=TOKEN), out=io.StringIO())


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_web_arguments_read_credentials_from_files_and_environment(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    users = tmp_path / "users"
    users.write_text("# operators\nalice:pw one\nbob:pw:two\n")
    options = options_from(
        parse("jobs.sqlite3", "--token-file", str(token_file), "--basic-auth-file", str(users),
              "--port", "9000", "--read-only"),
        {},
    )  # fmt: skip
    assert options["target"] == "jobs.sqlite3"
    settings = options["settings"]
    assert settings.token == TOKEN
    assert settings.basic_auth == {"alice": "pw one", "bob": "pw:two"}
    assert options["port"] == 9000 and settings.read_only is True
    assert settings.login_link is False
    from_env = options_from(
        parse(),
        {
            "JOBLEDGER_DB": "postgresql://db/jobs",
            "JOBLEDGER_WEB_TOKEN": TOKEN,
            "JOBLEDGER_WEB_BASIC_AUTH": "alice:a, bob:b",
            "JOBLEDGER_WEB_SECRET": "s" * 32,
        },
    )
    assert from_env["target"] == "postgresql://db/jobs"
    assert from_env["settings"].basic_auth == {"alice": "a", "bob": "b"}
    assert from_env["settings"].secret_key == b"s" * 32
    nothing = options_from(parse("jobs.sqlite3", "--title", "billing"), {})["settings"]
    assert nothing.login_link is True and nothing.title == "billing"  # a token for this run
    assert options_from(parse("x", "--read-only"), {})["settings"].has_credentials is False
    with pytest.raises(InvalidArgument, match="name the store"):
        options_from(parse(), {})
    with pytest.raises(InvalidArgument, match="cannot read"):
        options_from(parse("x", "--token-file", str(tmp_path / "missing")), {})
    users.write_text("nocolon\n")
    with pytest.raises(InvalidArgument, match="user:password"):
        options_from(parse("x", "--basic-auth-file", str(users)), {})
