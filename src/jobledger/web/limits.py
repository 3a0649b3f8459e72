"""Rate limits on failed sign-ins, per client address and per user name.

A few failures are free; past them an address (or a user name) may try again only at a steady
pace, and every attempt in between is answered ``429 Too Many Requests`` with ``Retry-After``
— *without* checking the credentials, so a guess made while limited tells an attacker nothing.
Successful sign-ins cost nothing.

Two limits, because each alone has a hole: per address only, an attacker with many addresses
guesses one user's password at full speed; per user name only, one address tries every name.
The user-name limit is higher than the address limit, and one address's failures on other names
never reach a user's own limit, so another user signing in from elsewhere is not blocked. The
bearer token has no per-name limit (see :func:`jobledger.web.core.limited_names`).

Each limit is a generic cell rate algorithm (a token bucket kept as one number per key): the
key's *theoretical arrival time* moves ``period`` ahead with every failure; an attempt is
allowed while that time is at most ``(burst - 1) * period`` ahead of now. Time comes from the
dashboard's injected clock (:attr:`WebSettings.clock`), so tests move it instead of sleeping.
The tables are bounded: keys whose time has passed are forgotten, and past ``limit`` keys the
least recently failed one is.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable
from datetime import timedelta

from ..clock import Clock

__all__ = [
    "ADDRESS_BURST",
    "ADDRESS_PERIOD",
    "USER_BURST",
    "USER_PERIOD",
    "FailureLimit",
    "SignInLimits",
    "client_key",
]

ADDRESS_BURST = 5  # failed sign-ins from one address before it is slowed down
ADDRESS_PERIOD = timedelta(seconds=30)  # then one more try per period
USER_BURST = 10  # failed sign-ins for one user name, from anywhere
USER_PERIOD = timedelta(minutes=1)
MAX_KEYS = 10_000
MAX_NAME = 128  # longer names are cut: no configured user is that long (64 at most)


class FailureLimit:
    """``burst`` failures per key, then one more per ``period``."""

    def __init__(
        self, clock: Clock, *, burst: int, period: timedelta, limit: int = MAX_KEYS
    ) -> None:
        self._clock = clock
        self._burst = burst
        self._period_ms = period // timedelta(milliseconds=1)
        self._limit = limit
        self._due: dict[str, int] = {}  # key -> theoretical arrival time (epoch ms)
        self._lock = threading.Lock()

    def wait_ms(self, key: str) -> int:
        """How long ``key`` must wait before its next attempt (0: it may try now)."""
        with self._lock:
            due = self._due.get(key)
        if due is None:
            return 0
        return max(0, due - self._clock() - (self._burst - 1) * self._period_ms)

    def failed(self, key: str) -> None:
        now = self._clock()
        with self._lock:
            due = max(self._due.pop(key, now), now) + self._period_ms
            if len(self._due) >= self._limit:
                self._forget(now)
            self._due[key] = due  # re-inserted last: the table runs from least recent failure

    def __len__(self) -> int:
        with self._lock:
            return len(self._due)

    def _forget(self, now: int) -> None:
        for key in [key for key, due in self._due.items() if due <= now]:
            del self._due[key]
        while len(self._due) >= self._limit:
            del self._due[next(iter(self._due))]


class SignInLimits:
    """The two limits a sign-in attempt passes: its client address's and its user names'."""

    def __init__(self, clock: Clock) -> None:
        self.by_address = FailureLimit(clock, burst=ADDRESS_BURST, period=ADDRESS_PERIOD)
        self.by_user = FailureLimit(clock, burst=USER_BURST, period=USER_PERIOD)

    def wait_ms(self, address: str, users: Iterable[str]) -> int:
        """How long this attempt must wait (0: check its credentials now)."""
        waits = [self.by_address.wait_ms(address)]
        waits += [self.by_user.wait_ms(_name(user)) for user in users]
        return max(waits)

    def failed(self, address: str, users: Iterable[str]) -> None:
        self.by_address.failed(address)
        for user in dict.fromkeys(_name(user) for user in users):
            self.by_user.failed(user)


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
