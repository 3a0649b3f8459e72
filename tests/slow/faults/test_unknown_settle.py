"""A group commit whose COMMIT outcome is unknown, retried by the worker's settler.

``Settler`` keeps a batch that failed with ``SCHEDULER_STORAGE_UNAVAILABLE`` and commits it
again (``batching.py``). When the failure was at COMMIT (``commitState: "unknown"``) and the
commit had in fact happened — PostgreSQL commits locally before a cut-off connection reports
anything; SQLite can do the same after a failed fsync once its WAL is recovered — the retry finds
the occurrence already settled. It must report the settlement as made — not as a lost lease,
which would make the worker summary and the observers count a success as a loss (found by
``test_postgres_faults.py::test_a_worker_runs_through_terminations_stalls_and_a_restart``: 10–11
of 300; fixed in 2bf617d). Reproduced deterministically here.
"""

from __future__ import annotations

import threading
from typing import Any

import jobledger
from jobledger.engine.batching import Settler
from jobledger.errors import StorageUnavailable

AUTHORITY = {"principal": {"type": "user", "id": "faults"}}


class CommitsThenLosesTheAnswer:
    """A store whose first ``settle_batch`` commits and then reports the commit unknown."""

    def __init__(self, store: jobledger.Store) -> None:
        self._store = store
        self.failed = False

    def settle_batch(self, settlements: Any) -> Any:
        outcomes = self._store.settle_batch(settlements)
        if not self.failed:
            self.failed = True
            raise StorageUnavailable.during(
                "Scheduler storage is unavailable (PostgreSQL connection lost or server refused)",
                phase="write",
                storage_code="OperationalError",
                commit_state="unknown",
                retryable=True,
            )
        return outcomes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_settle_committed_behind_an_unknown_commit_is_reported_as_succeeded(tmp_path):
    with jobledger.open_store(tmp_path / "db" / "s.sqlite3") as store:
        store.create_job(id="job", kind="work", authority=AUTHORITY)
        store.enqueue_occurrence(job_id="job", scheduled_for=0, trigger_key="t")
        claimed = store.claim_next(owner_id="w", lease_ms=60_000)
        assert claimed is not None
        wrapper = CommitsThenLosesTheAnswer(store)
        settler = Settler(wrapper)  # type: ignore[arg-type]
        done = threading.Event()
        outcome: list[Any] = []
        settler.start()
        settler.submit(
            jobledger.Settlement(
                occurrence_id=claimed.id, owner_id="w", fence=claimed.fence, outcome="succeeded"
            ),
            lambda result: (outcome.append(result), done.set()),
        )
        assert done.wait(10)
        settler.close(5)
        stored = store.get_occurrence(claimed.id)
        assert stored.status == "succeeded"  # storage is right either way
        assert wrapper.failed
        assert isinstance(outcome[0], jobledger.Occurrence), outcome[0]
