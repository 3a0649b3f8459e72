"""The lock a worker holds for as long as it lives (:meth:`Store.hold_owner_lock`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

__all__ = ["NoOwnerLock", "OwnerLockHandle"]


class OwnerLockHandle(Protocol):
    """A lock held for as long as its owner lives (see :meth:`Store.hold_owner_lock`).

    ``kind`` names the mechanism (``"flock"``, ``"advisory"``, or ``"none"``);
    ``refresh_interval`` how often its owner must call :meth:`refresh` (``None``: never — an
    ``flock`` cannot be lost while its process lives)."""

    kind: str

    @property
    def refresh_interval(self) -> timedelta | None: ...

    @property
    def held(self) -> bool: ...

    def refresh(self) -> None:
        """Check it is still held; take it again if it was lost (e.g. a new session)."""
        ...

    def close(self) -> None: ...


class NoOwnerLock:
    """For stores where no other process can see this owner's leases (``:memory:``)."""

    kind = "none"
    held = True
    refresh_interval = None

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass
