"""Wakes result waiters (``App.result``) when the occurrence they wait for may be terminal.

A waiter subscribes with its occurrence id and a callback. A settle (succeeded, dead letter,
cancellation, an ``applied`` adjudication) committed through this store handle calls the
callbacks of exactly the ids it settled; on PostgreSQL the settling transaction also sends the
ids as the payload of a ``NOTIFY`` on the store's ``done`` channel, and the listener thread of
every other process hands them here. A notification without ids (too many for one payload, or
the listener (re)connecting after a gap in which some may have been missed) wakes every waiter.

Like :class:`~jobledger.store.tx.WorkSignal` it is a latency hint only: waiters still poll, so a
lost notification costs at most one poll interval.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

__all__ = ["MAX_PAYLOAD_BYTES", "SettleSignal", "decode_ids", "encode_ids"]

# PostgreSQL refuses NOTIFY payloads of 8,000 bytes or more.
MAX_PAYLOAD_BYTES = 7900
Callback = Callable[[], None]


def encode_ids(ids: Iterable[str]) -> str:
    """The NOTIFY payload for ``ids``: comma-separated, or ``""`` (everyone) if too long."""
    payload = ",".join(ids)
    return payload if len(payload.encode("utf-8")) <= MAX_PAYLOAD_BYTES else ""


def decode_ids(payload: str) -> list[str] | None:
    """The ids of a payload; ``None`` (everyone) for an empty one."""
    return [part for part in payload.split(",") if part] or None


class SettleSignal:
    """Callbacks per occurrence id, called when that occurrence may have settled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, list[Callback]] = {}
        self._source: Callable[[], None] | None = None

    def feed_from(self, start: Callable[[], None]) -> None:
        """Have the first :meth:`subscribe` call ``start`` (once): the PostgreSQL LISTEN
        thread, so a process that never waits for a result never opens its connection."""
        with self._lock:
            self._source = start

    def watch(self) -> None:
        """Start the source, if it has one that has not started (idempotent)."""
        with self._lock:
            start, self._source = self._source, None
        if start is not None:
            start()

    def subscribe(self, occurrence_id: str, callback: Callback) -> Callable[[], None]:
        """Call ``callback`` (from the notifying thread: it must be quick and must not raise)
        whenever ``occurrence_id`` may have settled, until the returned function is called."""
        self.watch()
        with self._lock:
            self._waiters.setdefault(occurrence_id, []).append(callback)

        def unsubscribe() -> None:
            with self._lock:
                waiting = self._waiters.get(occurrence_id)
                if waiting is not None and callback in waiting:
                    waiting.remove(callback)
                    if not waiting:
                        del self._waiters[occurrence_id]

        return unsubscribe

    def notify(self, ids: Iterable[str] | None = None) -> None:
        """Wake the waiters of ``ids`` (``None``: every waiter)."""
        with self._lock:
            if ids is None:
                callbacks = [cb for waiting in self._waiters.values() for cb in waiting]
            else:
                callbacks = [cb for key in set(ids) for cb in self._waiters.get(key, ())]
        for callback in callbacks:
            callback()

    def notify_payload(self, payload: str) -> None:
        """Wake the waiters a NOTIFY payload names (see :func:`encode_ids`)."""
        self.notify(decode_ids(payload))
