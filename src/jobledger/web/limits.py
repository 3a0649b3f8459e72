"""A back-off on failed sign-ins, per (client address, user name).

Every failed sign-in for a user name from a client address makes that *pair* wait before its
next attempt: 1 s after the first failure, doubling with each further one (2, 4, 8, … s) up to
:data:`BACKOFF_CAP`. While a pair waits, its attempts are answered ``429 Too Many Requests``
with ``Retry-After`` — *without* checking the credentials, so a guess made then tells an
attacker nothing. A successful sign-in clears its pair; a pair with no failure for
:data:`BACKOFF_RESET` starts again from 1 s.

Keyed on the pair, and on nothing wider, on purpose (issue 30, item 8): a per-address limit let
a flood of wrong passwords from one client lock every account out for everyone behind that
address (an office behind one NAT), and a per-user limit let anyone, from anywhere, lock a user
out. Now a flood slows down only the pair it hits: the same user from another address, and
other users from the same address, sign in at once. The bearer token is never limited (see
:func:`jobledger.web.core.limited_names`). What an attacker can and cannot do is in
``docs/web.md``.

Time comes from the dashboard's injected clock (:attr:`WebSettings.clock`), so tests move it
instead of sleeping. The table is bounded: when it is full, pairs past their reset are dropped,
then the least recently failed.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from ..clock import Clock

__all__ = [
    "BACKOFF_CAP",
    "BACKOFF_FIRST",
    "BACKOFF_RESET",
    "BackOff",
    "SignInLimits",
    "client_key",
]

BACKOFF_FIRST = timedelta(seconds=1)  # the wait after a pair's first failure
BACKOFF_CAP = timedelta(minutes=1)  # doubling per failure up to this
BACKOFF_RESET = timedelta(minutes=15)  # a pair quiet this long starts again from the first
MAX_KEYS = 10_000
MAX_NAME = 128  # longer names are cut: no configured user is that long (64 at most)

Pair = tuple[str, str]


@dataclass(slots=True)
class _Failures:
    count: int  # consecutive failures (since the last success or reset)
    last_ms: int  # when the last one happened
    until_ms: int  # no attempt before this instant


class BackOff:
    """Per key: after ``n`` consecutive failures, no attempt for ``min(cap, first * 2**(n-1))``;
    a key quiet for ``reset`` (or cleared by :meth:`succeeded`) starts again."""

    def __init__(
        self,
        clock: Clock,
        *,
        first: timedelta = BACKOFF_FIRST,
        cap: timedelta = BACKOFF_CAP,
        reset: timedelta = BACKOFF_RESET,
        limit: int = MAX_KEYS,
    ) -> None:
        self._clock = clock
        self._first_ms = first // timedelta(milliseconds=1)
        self._cap_ms = cap // timedelta(milliseconds=1)
        self._reset_ms = reset // timedelta(milliseconds=1)
        self._limit = limit
        self._keys: dict[Pair, _Failures] = {}  # least recently failed first
        self._lock = threading.Lock()

    def wait_ms(self, key: Pair) -> int:
        """How long ``key`` must wait before its next attempt (0: it may try now)."""
        now = self._clock()
        with self._lock:
            failures = self._keys.get(key)
            return 0 if failures is None else max(0, failures.until_ms - now)

    def failed(self, key: Pair) -> int:
        """Count a failure of ``key``; the wait it starts, in ms."""
        now = self._clock()
        with self._lock:
            failures = self._keys.pop(key, None)
            count = 1
            if failures is not None and now - failures.last_ms < self._reset_ms:
                count = failures.count + 1
            # 2**(count - 1) stays small: past the cap the exponent no longer matters.
            wait = min(self._cap_ms, self._first_ms << min(count - 1, 62))
            if len(self._keys) >= self._limit:
                self._forget(now)
            self._keys[key] = _Failures(count, now, now + wait)  # last: the most recent
            return wait

    def succeeded(self, key: Pair) -> None:
        with self._lock:
            self._keys.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)

    def _forget(self, now: int) -> None:
        for key in [k for k, f in self._keys.items() if now - f.last_ms >= self._reset_ms]:
            del self._keys[key]
        while len(self._keys) >= self._limit:
            del self._keys[next(iter(self._keys))]


class SignInLimits:
    """The back-off a sign-in attempt passes: one per (client address, user name)."""

    def __init__(self, clock: Clock) -> None:
        self.pairs = BackOff(clock)

    def wait_ms(self, address: str, users: Iterable[str]) -> int:
        """How long this attempt must wait (0: check its credentials now)."""
        return max((self.pairs.wait_ms((address, _name(user))) for user in users), default=0)

    def failed(self, address: str, users: Iterable[str]) -> None:
        for user in dict.fromkeys(_name(user) for user in users):
            self.pairs.failed((address, user))

    def succeeded(self, address: str, users: Iterable[str]) -> None:
        for user in users:
            self.pairs.succeeded((address, _name(user)))


def _name(user: str) -> str:
    return user[:MAX_NAME]


def client_key(host: str | None) -> str:
    """The key of a client address: the address itself, or its /64 for IPv6 (one machine
    usually holds a whole /64, and could step through it to dodge a per-address limit)."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host[:MAX_NAME]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)
