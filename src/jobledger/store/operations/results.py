"""Reading a handler's result (SPEC §9): the occurrence, its first read of a result recorded."""

from __future__ import annotations

from ... import contract
from ...models import Occurrence
from ..tx import Tx
from .base import OperationsBase

__all__ = ["ResultOperations"]


class ResultOperations(OperationsBase):
    """The read behind :meth:`jobledger.App.result`."""

    def read_result(self, occurrence_id: str) -> Occurrence | None:
        """The occurrence (``None`` if missing). The first read of a succeeded one records
        ``result_read_at`` — a write only then, so waiting for a result is read-only."""
        self._assert_open()
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")

        def read(tx: Tx) -> tuple[Occurrence | None, bool]:
            row = self._occurrence_row(tx, key)
            if row is None:
                return None, False
            unread = row["status"] == "succeeded" and row["result_read_at"] is None
            return self._occurrence(tx, row), unread

        occurrence, unread = self._read(read)
        if unread:
            self._write(
                lambda tx: tx.run("mark_result_read", {"occurrence_id": key, "now": tx.now()})
            )
        return occurrence
