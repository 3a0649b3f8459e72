"""Bring a job to exactly a wanted definition: create it, leave it, or update it with CAS.

The one loop behind :meth:`App.ensure_job <jobledger.App.ensure_job>` and
:func:`jobledger.planning.declare.declare_schedule` (``App.schedule``): declaring the same job on
every start-up writes nothing (no new revision, no ``job_updated`` event); a changed definition
updates the job with a compare-and-swap on the revision it read; only a new kind or authority
makes the occurrences enqueued under the old definition stale (SPEC §14).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..errors import Conflict, RevisionConflict
from ..models import Job
from ..store.base import Store

__all__ = ["ensure_job"]

# Another process may create or update the same job between our read and our write; after this
# many rounds of "read, compare, write" the job is changing too fast to declare.
TRIES: Final = 3


def ensure_job(store: Store, job_id: str, wanted: Mapping[str, Any]) -> Job:
    """Create ``job_id`` with the ``wanted`` fields (``create_job``'s keywords), return it
    unchanged when it already has them, or update exactly the fields that differ.

    Raises ``SCHEDULER_REVISION_CONFLICT`` when other writers changed the job on every one of
    three rounds; any other refusal (a bad field, ``SCHEDULER_JOB_DISABLED`` …) as the store
    raises it.
    """
    for _ in range(TRIES):
        current = store.get_job(job_id)
        if current is None:
            try:
                return store.create_job(id=job_id, declared=wanted, **wanted)
            except Conflict as exc:
                if exc.code != "SCHEDULER_CONFLICT":
                    raise
                continue  # created meanwhile by another process: compare with it
        patch = current.declaration_changes(wanted)
        if not patch:
            if current.declared is not None and not current.changes_from_declared(wanted):
                return current  # the same declaration as last applied: nothing is written
            try:
                # What the code declares now, recorded (no new revision): the next change of
                # it is told apart from what an operator set (SPEC §14).
                return store.record_job_declaration(
                    job_id, expected_revision=current.revision, declared=wanted
                )
            except RevisionConflict:
                continue
        try:
            return store.update_job(
                job_id,
                expected_revision=current.revision,
                patch=patch,
                source="declaration",
                declared=wanted,
            )
        except RevisionConflict:
            continue  # changed meanwhile: compare again
    raise RevisionConflict(
        f"Job {job_id} kept changing while it was being declared",
        details={"jobId": job_id, "tries": TRIES},
    )
