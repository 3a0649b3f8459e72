"""The dashboard's settings, defined and validated once (:class:`WebSettings`).

Who may do what:

* **Actions** (requeue, cancel, enable/disable) always need an authenticated user and, from a
  browser, a CSRF token; with ``read_only`` they are hidden and refused for everyone.
* **Reads** need the same authentication unless ``public_reads`` is set — or the dashboard is
  ``read_only`` with no credentials configured, which is open by construction.
* A dashboard that can act must have credentials: ``token``, ``basic_auth`` or both.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..clock import Clock, system_clock
from ..contract import normalize_identifier
from ..durations import ms_from_timedelta
from ..errors import InvalidArgument

__all__ = ["DEFAULT_TITLE", "WebSettings", "normalize_basic_auth"]

DEFAULT_TITLE = "jobledger"
DEFAULT_SESSION_TTL = timedelta(hours=12)
DEFAULT_REFRESH = timedelta(seconds=5)
MIN_TOKEN_LENGTH = 16


def normalize_basic_auth(value: object) -> dict[str, str]:
    """``("user", "password")`` or ``{"user": "password", …}`` as a dict; ``None`` → ``{}``."""
    if value is None or (isinstance(value, Mapping) and not value):
        return {}
    if isinstance(value, tuple) and len(value) == 2:
        pairs: Any = [value]
    elif isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        raise InvalidArgument(
            "basic_auth must be a (user, password) pair or a mapping of users to passwords",
            details={"field": "basic_auth"},
        )
    users: dict[str, str] = {}
    for user, password in pairs:
        name = normalize_identifier(user, "basic_auth user", max_length=64)
        if ":" in name:
            raise InvalidArgument(
                "a basic_auth user name may not contain ':'", details={"field": "basic_auth"}
            )
        if not isinstance(password, str) or not password:
            raise InvalidArgument(
                f"basic_auth password for {name!r} must be a non-empty string",
                details={"field": "basic_auth"},
            )
        users[name] = password
    return users


@dataclass(frozen=True, slots=True)
class WebSettings:
    """How a dashboard runs: what :func:`~jobledger.web.create_app` and
    :func:`~jobledger.web.serve` take (every setting is defined here once).

    * ``token`` — a bearer token (at least 16 characters): ``Authorization: Bearer …`` for
      scripts and Prometheus, or typed into the login form; its user is ``token``.
    * ``basic_auth`` — ``{user: password}`` (or one ``(user, password)`` pair): HTTP basic auth
      or the login form.
    * ``read_only`` — hide and refuse every action.
    * ``public_reads`` — let anyone read the pages and ``/metrics`` (actions still need a login).
    * ``title`` — shown in the header and the browser tab.
    * ``secret_key`` — signs session cookies (default: random per process). Sessions
      themselves live in the dashboard process (:mod:`jobledger.web.sessions`).
    * ``session_ttl`` — how long a login lasts; ``refresh`` — the live-refresh period.
    * ``metrics`` — serve ``/metrics``; ``clock`` — the clock (epoch ms) for session expiry and
      the sign-in rate limit only (pages show the store's own "now").
    * ``login_link`` — no configured credentials: make a token for this run (what
      ``jobledger web`` does on loopback), which the sign-in link ``serve`` prints carries in
      its URL fragment. Never for a configured token, which would end up in browser history.
    """

    token: str | None = None
    basic_auth: Mapping[str, str] = field(default_factory=dict)
    read_only: bool = False
    public_reads: bool = False
    title: str = DEFAULT_TITLE
    secret_key: bytes | str | None = None
    session_ttl: timedelta = DEFAULT_SESSION_TTL
    refresh: timedelta = DEFAULT_REFRESH
    metrics: bool = True
    clock: Clock = system_clock
    login_link: bool = False

    def __post_init__(self) -> None:
        if self.login_link is True:
            if self.token is not None or self.basic_auth:
                raise InvalidArgument(
                    "login_link makes its own token for this run: leave token and basic_auth unset",
                    details={"field": "login_link"},
                )
            object.__setattr__(self, "token", secrets.token_urlsafe(24))
        if self.token is not None and (
            not isinstance(self.token, str)
            or len(self.token) < MIN_TOKEN_LENGTH
            or not self.token.isprintable()
            or self.token != self.token.strip()
        ):
            raise InvalidArgument(
                f"token must be a string of at least {MIN_TOKEN_LENGTH} printable characters "
                "(generate one with: python -c 'import secrets; print(secrets.token_urlsafe())')",
                details={"field": "token"},
            )
        object.__setattr__(self, "basic_auth", normalize_basic_auth(self.basic_auth))
        for name in ("read_only", "public_reads", "metrics", "login_link"):
            if type(getattr(self, name)) is not bool:
                raise InvalidArgument(f"{name} must be a boolean", details={"field": name})
        if not isinstance(self.title, str) or not self.title.strip() or len(self.title) > 80:
            raise InvalidArgument("title must be 1–80 characters", details={"field": "title"})
        key = self.secret_key
        if key is None:
            key = secrets.token_bytes(32)
        elif isinstance(key, str):
            key = key.encode()
        object.__setattr__(self, "secret_key", key)
        if not isinstance(key, bytes) or len(key) < MIN_TOKEN_LENGTH:
            raise InvalidArgument(
                "secret_key must be at least 16 bytes", details={"field": "secret_key"}
            )
        ms_from_timedelta(self.session_ttl, "session_ttl", minimum_ms=60_000)
        ms_from_timedelta(self.refresh, "refresh", minimum_ms=1000)
        if not callable(self.clock):
            raise InvalidArgument("clock must be a callable returning epoch ms")
        if not self.read_only and not self.has_credentials:
            raise InvalidArgument(
                "a dashboard that can act needs credentials: pass token= or basic_auth=, "
                "or read_only=True (or login_link=True for a token made for this run)",
                details={"field": "token"},
            )

    @property
    def has_credentials(self) -> bool:
        return self.token is not None or bool(self.basic_auth)

    @property
    def reads_open(self) -> bool:
        """Whether pages and ``/metrics`` can be read without logging in."""
        return self.public_reads or (self.read_only and not self.has_credentials)

    @property
    def key(self) -> bytes:
        """``secret_key`` as bytes."""
        key = self.secret_key
        assert isinstance(key, bytes)  # made bytes by __post_init__
        return key

    @property
    def session_ttl_ms(self) -> int:
        return ms_from_timedelta(self.session_ttl, "session_ttl")

    @property
    def refresh_seconds(self) -> int:
        return max(1, ms_from_timedelta(self.refresh, "refresh") // 1000)

    def credentials_fingerprint(self) -> bytes:
        """Changes whenever a credential changes, so old sessions stop working."""
        digest = hashlib.sha256()
        digest.update(b"token\0" + (self.token or "").encode())
        for user in sorted(self.basic_auth):
            digest.update(b"\0user\0" + user.encode() + b"\0" + self.basic_auth[user].encode())
        return digest.digest()
