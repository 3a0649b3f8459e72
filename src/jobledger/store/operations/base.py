"""The base every operation group builds on: engine hooks and shared helpers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar

from ...errors import DataCorrupt
from ...models import SchemaInfo
from .. import common
from ..tx import Row, Tx, WorkSignal

__all__ = ["OperationsBase", "required"]

T = TypeVar("T")


class OperationsBase(ABC):
    """What every operation group needs: the engine hooks and the shared row helpers."""

    _target: str
    _work_signal: WorkSignal | None = None

    @property
    def work_signal(self) -> WorkSignal:
        """Bumped when work may have become claimable (see :class:`WorkSignal`)."""
        if self._work_signal is None:
            self._work_signal = WorkSignal()
        return self._work_signal

    @property
    def target(self) -> str:
        return self._target

    # -- engine hooks -----------------------------------------------------------------------

    @abstractmethod
    def _write(self, body: Callable[[Tx], T]) -> T:
        """Run ``body`` in one write transaction (commit on return, roll back on error)."""

    @abstractmethod
    def _read(self, body: Callable[[Tx], T]) -> T:
        """Run ``body`` with read access (a consistent snapshot where the engine offers one)."""

    @abstractmethod
    def _assert_open(self) -> None: ...

    @abstractmethod
    def schema_info(self) -> SchemaInfo: ...

    @abstractmethod
    def close(self) -> None: ...

    def now(self) -> int:
        """The store's current instant (see :meth:`jobledger.store.base.Store.now`)."""
        self._assert_open()
        return self._read(lambda tx: tx.now())

    def _after_enqueue(self) -> None:
        """Called after new work commits; the PostgreSQL store also sends a NOTIFY."""
        self.work_signal.notify()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _append_event(
        tx: Tx,
        *,
        job_id: str,
        event_type: str,
        occurred_at: int,
        data: Mapping[str, Any],
        occurrence_id: str | None = None,
        owner_id: str | None = None,
        fence: int | None = None,
    ) -> None:
        tx.run(
            "insert_event",
            {
                "job_id": job_id,
                "occurrence_id": occurrence_id,
                "event_type": event_type,
                "occurred_at": occurred_at,
                "owner_id": owner_id,
                "fence": fence,
                "data_json": common.event_json(data),
            },
        )

    @staticmethod
    def _job_row(tx: Tx, job_id: str) -> Row | None:
        return tx.one("get_job", {"job_id": job_id})

    @staticmethod
    def _occurrence_row(tx: Tx, occurrence_id: str) -> Row | None:
        return tx.one("get_occurrence", {"occurrence_id": occurrence_id})


def required(row: Row | None) -> Row:
    if row is None:
        raise DataCorrupt("A row written in this transaction could not be read back")
    return row
