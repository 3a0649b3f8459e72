"""Who is asking, and may they: credentials, signed session cookies, CSRF tokens, flash notes.

Three ways to be someone, checked in this order:

1. ``Authorization: Bearer <token>`` — scripts and Prometheus. Browsers never attach it on
   their own, so a bearer request needs no CSRF token.
2. ``Authorization: Basic …`` — browsers *do* replay basic credentials to any page of the
   site, so POSTs made with them need the CSRF token the pages carry (derived from the user).
3. The session cookie the login form sets: ``HttpOnly``, ``SameSite=Strict``, signed with a key
   derived from ``secret_key`` *and* the configured credentials (changing a password or the
   token ends every session), expiring after ``session_ttl``. It names a session in this
   dashboard's :class:`~jobledger.web.sessions.SessionRegistry`, which holds the random CSRF
   token every form posts back; signing out ends that session on the server, so a copy of the
   cookie stops working too.

Wrong credentials in a header are an error (401), never a silent fall back to anonymous. How
often they may be tried is :mod:`jobledger.web.limits`' business, not this module's.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .sessions import SessionRegistry
from .settings import WebSettings

__all__ = ["ANONYMOUS", "AuthError", "Guard", "Identity"]

SESSION_COOKIE = "jobledger_session"
FLASH_COOKIE = "jobledger_flash"
TOKEN_USER = "token"  # noqa: S105 - the user name of token sign-ins, not a secret
MAX_COOKIE_BYTES = 3800
Via = Literal["anonymous", "bearer", "basic", "session"]


@dataclass(frozen=True, slots=True)
class Identity:
    """The requester: ``user`` (``None`` when anonymous), how they proved it, and the CSRF token
    their forms must carry (``None`` for bearer requests, which need none)."""

    user: str | None
    via: Via
    csrf: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.user is not None

    @property
    def actor(self) -> str:
        """What the audit log records for this user's actions: ``web:<user>``."""
        return f"web:{self.user or 'anonymous'}"


ANONYMOUS = Identity(None, "anonymous")


class AuthError(Exception):
    """Credentials were presented and are wrong (or malformed)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Guard:
    """Checks credentials and signs/verifies cookies for one dashboard's settings."""

    def __init__(self, settings: WebSettings) -> None:
        self.settings = settings
        secret = settings.key
        fingerprint = settings.credentials_fingerprint()
        self._session_key = hmac.digest(secret, b"session\0" + fingerprint, "sha256")
        self._csrf_key = hmac.digest(secret, b"csrf\0" + fingerprint, "sha256")
        self._flash_key = hmac.digest(secret, b"flash\0", "sha256")
        self.sessions = SessionRegistry(settings.clock, settings.session_ttl_ms)

    # -- credentials ------------------------------------------------------------------------

    def check_token(self, token: str) -> bool:
        expected = self.settings.token
        if expected is None:
            return False
        return hmac.compare_digest(token.encode(), expected.encode())

    def check_password(self, user: str, password: str) -> bool:
        known = self.settings.basic_auth.get(user)
        # Compare against something even for unknown users, so timing says nothing about names.
        expected = (known if known is not None else "\0" * 16).encode()
        same = hmac.compare_digest(password.encode(), expected)
        return known is not None and same

    @staticmethod
    def claimed_user(authorization: str) -> str | None:
        """The user an ``Authorization`` header claims to be (before checking it): ``token``
        for a bearer token, the user of basic credentials, ``None`` when malformed."""
        scheme, _, value = authorization.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return TOKEN_USER
        if scheme == "basic":
            try:
                return _basic_credentials(value.strip())[0]
            except AuthError:
                return None
        return None

    def identify(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> Identity:
        """The requester, from the ``Authorization`` header or else the session cookie.

        Raises :class:`AuthError` for a header with wrong or malformed credentials.
        """
        authorization = headers.get("authorization")
        if authorization:
            scheme, _, value = authorization.partition(" ")
            scheme = scheme.lower()
            value = value.strip()
            if scheme == "bearer":
                if self.check_token(value):
                    return Identity(TOKEN_USER, "bearer")
                raise AuthError("the bearer token is not valid")
            if scheme == "basic":
                user, password = _basic_credentials(value)
                if self.check_password(user, password):
                    return Identity(user, "basic", self._basic_csrf(user))
                raise AuthError("the user name or password is not valid")
            raise AuthError(f"unsupported authorization scheme {scheme!r}")
        cookie = cookies.get(SESSION_COOKIE)
        if cookie:
            session = self.read_session(cookie)
            if session is not None:
                return session
        return ANONYMOUS

    def _basic_csrf(self, user: str) -> str:
        return hmac.new(self._csrf_key, b"basic\0" + user.encode(), "sha256").hexdigest()[:32]

    # -- sessions ---------------------------------------------------------------------------

    def new_session(self, user: str) -> tuple[str, Identity]:
        """A new session for ``user``: the signed cookie value naming it, and its identity."""
        session_id, session = self.sessions.open(user)
        payload = json.dumps({"s": session_id, "e": session.expires_at}, separators=(",", ":"))
        value = self._sign(self._session_key, payload.encode())
        return value, Identity(user, "session", session.csrf)

    def read_session(self, value: str) -> Identity | None:
        """The identity of a live session's cookie; ``None`` if forged, malformed, expired or
        ended (signed out, or made by another dashboard process)."""
        session_id = self._session_id(value)
        if session_id is None:
            return None
        session = self.sessions.get(session_id)
        if session is None:
            return None
        user = session.user
        if user == TOKEN_USER and self.settings.token is None:
            return None
        if user != TOKEN_USER and user not in self.settings.basic_auth:
            return None
        return Identity(user, "session", session.csrf)

    def end_session(self, value: str) -> None:
        """Sign out the session a cookie names (nothing for a cookie that names none)."""
        session_id = self._session_id(value)
        if session_id is not None:
            self.sessions.end(session_id)

    def _session_id(self, value: str) -> str | None:
        data = self._unsign(self._session_key, value)
        if not isinstance(data, dict):
            return None
        session_id, expires = data.get("s"), data.get("e")
        if not isinstance(session_id, str):
            return None
        if type(expires) is not int or expires <= self.settings.clock():
            return None
        return session_id

    # -- CSRF -------------------------------------------------------------------------------

    @staticmethod
    def csrf_ok(identity: Identity, submitted: str | None) -> bool:
        """Whether a state-changing request from ``identity`` may proceed."""
        if not identity.authenticated:
            return False
        if identity.via == "bearer":
            return True
        if identity.csrf is None or not submitted:
            return False
        return hmac.compare_digest(submitted.encode(), identity.csrf.encode())

    # -- flash notes (shown once after a redirect) ------------------------------------------

    def encode_flash(self, notes: list[dict[str, Any]]) -> str:
        payload = json.dumps(notes, separators=(",", ":")).encode()
        while len(payload) > MAX_COOKIE_BYTES // 2 and len(notes) > 1:
            notes = [*notes[: len(notes) // 2], {"level": "info", "text": "(more not shown)"}]
            payload = json.dumps(notes, separators=(",", ":")).encode()
        return self._sign(self._flash_key, payload)

    def decode_flash(self, value: str) -> list[dict[str, Any]]:
        data = self._unsign(self._flash_key, value)
        if not isinstance(data, list):
            return []
        return [
            {
                "level": note["level"],
                "text": note["text"],
                "occurrences": [i for i in note.get("occurrences", []) if isinstance(i, str)],
                "more": note.get("more") if type(note.get("more")) is int else 0,
            }
            for note in data
            if isinstance(note, dict)
            and isinstance(note.get("text"), str)
            and note.get("level") in ("info", "success", "error")
            and isinstance(note.get("occurrences", []), list)
        ]

    # -- signing ----------------------------------------------------------------------------

    @staticmethod
    def _sign(key: bytes, payload: bytes) -> str:
        signature = hmac.digest(key, payload, "sha256")
        return f"{_b64(payload)}.{_b64(signature)}"

    @staticmethod
    def _unsign(key: bytes, value: str) -> Any:
        body, _, signature = value.partition(".")
        if not body or not signature or len(value) > MAX_COOKIE_BYTES:
            return None
        try:
            payload = _unb64(body)
            given = _unb64(signature)
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(given, hmac.digest(key, payload, "sha256")):
            return None
        try:
            return json.loads(payload)
        except ValueError:
            return None


def _basic_credentials(value: str) -> tuple[str, str]:
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise AuthError("malformed basic credentials") from exc
    user, colon, password = decoded.partition(":")
    if not colon:
        raise AuthError("malformed basic credentials")
    return user, password
