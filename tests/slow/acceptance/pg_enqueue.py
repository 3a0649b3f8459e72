"""Enqueue many occurrences into a PostgreSQL store quickly (several threads, one pool)."""

from __future__ import annotations

import threading

import jobledger

AUTHORITY = {"principal": {"type": "user", "id": "acceptance"}}
ENQUEUE_THREADS = 4


def enqueue_many(
    url: str, *, job_id: str, kind: str, count: int, max_attempts: int = 3
) -> list[str]:
    """Create the job and enqueue ``count`` due occurrences; return their ids in order."""
    ids: list[str] = [""] * count
    with jobledger.open_store(url, listen=False, pool_max_size=ENQUEUE_THREADS) as store:
        store.create_job(id=job_id, kind=kind, authority=AUTHORITY, max_attempts=max_attempts)

        def enqueue(part: int) -> None:
            for index in range(part, count, ENQUEUE_THREADS):
                ids[index] = store.enqueue_occurrence(
                    job_id=job_id, scheduled_for=index, trigger_key=f"tick-{index}"
                ).id

        threads = [threading.Thread(target=enqueue, args=(p,)) for p in range(ENQUEUE_THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert all(ids)
    assert len(set(ids)) == count
    return ids
