"""Server-side sessions: who is signed in, held in the dashboard process.

The session cookie carries only a random session id (signed, with the user and the expiry, so
a forged or expired cookie is refused before any look-up). The registry here is what makes a
session real: signing out removes its entry, so a copy of the cookie taken before sign-out is
worth nothing afterwards. The price is stated in ``docs/web.md``: sessions live in this
process's memory, so a restart signs everyone out and every dashboard process has its own
sign-ins (run one per sign-in domain, not several behind a load balancer).

The registry is bounded: expired sessions are dropped as new ones open, and past
:data:`MAX_SESSIONS` live sessions the oldest is ended (its user signs in again).
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass

from ..clock import Clock

__all__ = ["MAX_SESSIONS", "Session", "SessionRegistry"]

MAX_SESSIONS = 10_000


@dataclass(frozen=True, slots=True)
class Session:
    """One sign-in: its user, the CSRF token its forms carry, and when it ends (epoch ms)."""

    user: str
    csrf: str
    expires_at: int


class SessionRegistry:
    """The live sessions of one dashboard, by session id.

    Every session lasts ``ttl_ms`` from its sign-in, so insertion order is expiry order and
    dropping expired ones only ever looks at the oldest. A lock makes it safe for a dashboard
    mounted in a threaded server as well as on one event loop.
    """

    def __init__(self, clock: Clock, ttl_ms: int, *, limit: int = MAX_SESSIONS) -> None:
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._limit = limit
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, user: str) -> tuple[str, Session]:
        """A new session for ``user``: its id and what it holds."""
        now = self._clock()
        session_id = secrets.token_urlsafe(24)
        session = Session(user, secrets.token_hex(16), now + self._ttl_ms)
        with self._lock:
            self._drop_expired(now)
            while len(self._sessions) >= self._limit:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[session_id] = session
        return session_id, session

    def get(self, session_id: str) -> Session | None:
        """The live session ``session_id``, or ``None`` when it ended, expired or never was."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if session.expires_at <= self._clock():
                del self._sessions[session_id]
                return None
            return session

    def end(self, session_id: str) -> None:
        """Sign out: the session (and every copy of its cookie) stops working now."""
        with self._lock:
            self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _drop_expired(self, now: int) -> None:
        while self._sessions:
            oldest = next(iter(self._sessions))
            if self._sessions[oldest].expires_at > now:
                return
            del self._sessions[oldest]
