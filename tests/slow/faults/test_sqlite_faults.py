"""Storage faults on SQLite, real or injected at the system-call boundary, against a real store.

Each fault must surface as ``SCHEDULER_STORAGE_UNAVAILABLE`` with the right
``details["commitState"]`` — ``"not_committed"`` only when jobledger knows the transaction rolled
back (checked here: nothing of it is in the file afterwards), ``"unknown"`` when the commit's
fate is unknown — leave the file consistent (``PRAGMA integrity_check``, ``Store.verify()``),
and let work resume once the fault clears, in the same process.

* I/O errors, fsync failure and ENOSPC/EROFS from ``write(2)``: the LD_PRELOAD shim
  (``fault_shim.c``) in a driver process (``fault_driver.py``), switched on and off between calls.
* Disk full: a small tmpfs holding the database, filled with a file, then freed.
* Read-only remount: an operator cannot remount a file system read-only while a database on it
  is open for writing (``mount`` answers EBUSY, checked below), so the store is opened on the
  read-only file system and must refuse writes, coded; a running process meets a read-only
  file system only as the kernel's emergency remount after errors, which the shim's EROFS
  reproduces (``test_worker_through_faults.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Driven, fill, remount, tmpfs

pytestmark = [pytest.mark.xdist_group("faults")]


def unavailable(answer: dict[str, Any], *commit_states: str) -> str:
    assert not answer["ok"], f"the fault was not reported: {answer}"
    assert answer["code"] == "SCHEDULER_STORAGE_UNAVAILABLE", answer
    state = answer["details"]["commitState"]
    assert state in commit_states, answer
    return str(state)


def integrity(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


@pytest.fixture
def faulty(shim: Path, tmp_path: Path):
    """A driver process on ``tmp_path/db/store.sqlite3`` under the shim; ``fault(cls, errno)``
    turns a class of calls on the database's files into failures, ``fault(cls, None)`` off."""
    control = tmp_path / "control"
    control.mkdir()
    db = tmp_path / "db" / "store.sqlite3"
    driven = Driven(
        str(db),
        env={
            "LD_PRELOAD": str(shim),
            "JL_FAULT_DIR": str(control),
            "JL_FAULT_MATCH": str(db.parent),
        },
    )

    def fault(cls: str, errno_name: str | None) -> None:
        path = control / cls
        if errno_name is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(errno_name)

    def hits() -> int:
        path = control / "hits"
        return len(path.read_bytes()) if path.exists() else 0

    driven.ok("open")
    driven.ok("create_job", job_id="before")
    driven.ok("enqueue", job_id="before", count=5)
    try:
        yield driven, fault, hits, db
    finally:
        driven.close()


@pytest.mark.parametrize(
    ("cls", "errno_name", "storage_code"),
    [
        ("sync", "EIO", "SQLITE_IOERR"),
        ("write", "EIO", "SQLITE_IOERR"),
        ("write", "ENOSPC", "SQLITE_FULL"),
        ("write", "EROFS", "SQLITE_IOERR"),
    ],
)
def test_a_failed_commit_is_reported_and_work_resumes(faulty, cls, errno_name, storage_code):
    driven, fault, hits, db = faulty
    fault(cls, errno_name)
    answer = driven.call("create_job", job_id="during")
    fault(cls, None)
    assert hits() > 0, "the shim never fired"
    # The failure came from COMMIT (the WAL frames are written and synced there): unknown.
    unavailable(answer, "unknown")
    assert answer["details"]["storageCode"] == storage_code
    assert answer["details"]["phase"] == "write"
    # The same process carries on once the fault is gone.
    jobs = driven.ok("jobs")
    driven.ok("create_job", job_id="after")
    driven.ok("enqueue", job_id="after", count=3)
    assert driven.ok("claim_settle") is not None
    assert driven.ok("verify") is True
    assert integrity(db) == ["ok"]
    assert "before" in jobs and "after" in driven.ok("jobs")


@pytest.mark.parametrize("errno_name", ["EIO", "ENOSPC"])
def test_a_write_failing_inside_the_transaction_is_not_committed(faulty, errno_name):
    """A transaction larger than SQLite's page cache spills pages to the WAL before COMMIT; a
    write failing there fails the body, which is rolled back: ``not_committed``, and true."""
    driven, fault, hits, db = faulty
    before = driven.ok("counts")
    fault("write", errno_name)
    answer = driven.call("enqueue", job_id="before", count=120, size=40_000)
    fault("write", None)
    assert hits() > 0
    state = unavailable(answer, "not_committed", "unknown")
    print(f"write {errno_name} inside a large transaction: commitState={state}")
    after = driven.ok("counts")
    if state == "not_committed":
        assert after == before, "reported not_committed, but the batch is in the store"
    assert driven.ok("enqueue", job_id="before", count=120, size=40_000) == 120
    assert driven.ok("verify") is True
    assert integrity(db) == ["ok"]


def test_a_read_error_is_storage_unavailable_and_reads_resume(faulty):
    driven, fault, hits, db = faulty
    driven.ok("enqueue", job_id="before", count=3)  # the readers' page caches are now stale
    fault("read", "EIO")
    answer = driven.call("counts")
    fault("read", None)
    if hits() == 0:
        pytest.skip("every page the read needed was cached; no read(2) to fail")
    unavailable(answer, "not_committed")
    assert driven.ok("counts") == {"queued": 8}
    assert integrity(db) == ["ok"]


def test_an_unknown_commit_may_have_committed_after_a_crash(faulty, tmp_path):
    """Why fsync failure is ``unknown``: the WAL frames are written before the fsync fails.
    This process does not see them, but after a crash the next open recovers the WAL and the
    transaction can be there. Either way the file is consistent."""
    driven, fault, hits, db = faulty
    fault("sync", "EIO")
    unavailable(driven.call("create_job", job_id="maybe"), "unknown")
    driven.process.send_signal(signal.SIGKILL)
    driven.process.wait(10)
    fault("sync", None)
    again = Driven(str(db))
    try:
        again.ok("open")
        jobs = again.ok("jobs")
        assert "before" in jobs
        assert again.ok("verify") is True
        again.ok("create_job", job_id="after-crash")
    finally:
        again.close()
    assert integrity(db) == ["ok"]
    print(f"after the crash the unknown commit is {'present' if 'maybe' in jobs else 'absent'}")


def test_disk_full_on_a_real_file_system(tmp_path):
    with tmpfs("3m") as mount:
        db = mount / "db" / "store.sqlite3"
        driven = Driven(str(db))
        try:
            driven.ok("open")
            driven.ok("create_job", job_id="job")
            driven.ok("enqueue", job_id="job", count=20)
            before = driven.ok("counts")
            filler = fill(mount)
            states = set()
            for count, size in ((1, 10), (50, 20_000)):
                states.add(
                    unavailable(
                        driven.call("enqueue", job_id="job", count=count, size=size),
                        "not_committed",
                        "unknown",
                    )
                )
            answer = driven.call("create_job", job_id="while-full")
            if not answer["ok"]:
                states.add(unavailable(answer, "not_committed", "unknown"))
            print(f"disk full: commitState={sorted(states)}")
            if states == {"not_committed"}:
                assert driven.ok("counts") == before
            assert integrity(db) == ["ok"]
            filler.unlink()
            assert driven.ok("enqueue", job_id="job", count=50, size=20_000) == 50
            assert driven.ok("claim_settle") is not None
            assert driven.ok("verify") is True
        finally:
            driven.close()
        assert integrity(db) == ["ok"]


def _digest(path: Path) -> dict[str, str]:
    return {
        candidate.name: hashlib.sha256(candidate.read_bytes()).hexdigest()
        for candidate in sorted(path.parent.iterdir())
        if candidate.is_file()
    }


@contextlib.contextmanager
def read_only_store() -> Iterator[Path]:
    """A store with a job and 5 occurrences, closed, on a file system remounted read-only; the
    caller remounts it read-write with ``remount(db.parent.parent, "rw")``."""
    with tmpfs("4m") as mount:
        db = mount / "db" / "store.sqlite3"
        driven = Driven(str(db))
        driven.ok("open")
        driven.ok("create_job", job_id="job")
        driven.ok("enqueue", job_id="job", count=5)
        # An operator cannot remount it read-only under an open database.
        busy = remount(mount, "ro")
        assert busy.returncode != 0 and "busy" in busy.stderr
        driven.close()
        assert remount(mount, "ro").returncode == 0
        try:
            yield db
        finally:
            remount(mount, "rw")


def test_a_read_only_file_system_refuses_the_store_and_resumes_after_remount():
    with read_only_store() as db:
        before = _digest(db)
        ro = Driven(str(db))
        try:
            opened = ro.call("open")  # Driven.call asserts the refusal is coded
            if opened["ok"]:
                # Opened for reading: every write is refused, coded, and changes nothing.
                unavailable(ro.call("create_job", job_id="nope"), "not_committed", "unknown")
        finally:
            ro.close()
        assert _digest(db) == before
        assert remount(db.parent.parent, "rw").returncode == 0
        again = Driven(str(db))
        try:
            again.ok("open")
            assert again.ok("counts") == {"queued": 5}
            again.ok("create_job", job_id="after")
            assert again.ok("verify") is True
        finally:
            again.close()
        assert integrity(db) == ["ok"]


def test_opening_on_a_read_only_file_system_is_storage_unavailable():
    with read_only_store() as db:
        ro = Driven(str(db))
        try:
            unavailable(ro.call("open"), "not_committed", "unknown")
        finally:
            ro.close()
