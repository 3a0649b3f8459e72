"""File modes and symlinks around a SQLite store.

Every file jobledger makes next to a database is private whatever the umask: a directory it
makes 0700, the database and its sidecars (``-wal``, ``-shm``, ``-writelock``) 0600, the upgrade
backup 0600, the liveness directory ``-owners/`` 0700 and each lock file in it 0600. Nothing is
changed before the path is verified: a symlink where the database, a directory on its path or
a sidecar should be, a special file (device, fifo), or a shared (world-writable or sticky)
directory is refused before SQLite opens anything (``SCHEDULER_UNSAFE_PATH``) with every mode
as it was; an existing directory's mode is never changed, and a file's is tightened to 0600
only by a writing open of a database jobledger created or verified. Files made later are opened
with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobledger
from jobledger.testing import FakeClock

FIXTURES = Path("/work/shared/fixtures/reference-v1")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def test_every_file_beside_the_database_is_private(tmp_path: Path, open_umask: None) -> None:
    db = tmp_path / "data" / "jobs.sqlite3"
    with jobledger.open_store(db, clock=FakeClock()) as store:
        store.create_job(id="j", kind="k", authority={"principal": {"type": "u", "id": "x"}})
        lock = store.hold_owner_lock("worker-1")
        try:
            owners = Path(f"{db}-owners")
            assert mode(owners) == 0o700
            assert [mode(p) for p in owners.iterdir()] == [0o600]
            assert mode(db.parent) == 0o700
            for suffix in ("", "-wal", "-shm", "-writelock"):
                path = Path(f"{db}{suffix}")
                assert path.exists(), suffix
                assert mode(path) == 0o600, (suffix, oct(mode(path)))
        finally:
            lock.close()


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="reference fixtures not available")
def test_the_upgrade_backup_is_private(tmp_path: Path, open_umask: None) -> None:
    db = tmp_path / "data" / "lifecycle.sqlite"
    db.parent.mkdir(mode=0o700)
    shutil.copyfile(FIXTURES / "lifecycle.sqlite", db)
    os.chmod(db, 0o644)
    with jobledger.open_store(db, clock=FakeClock(1_767_229_920_000)) as store:
        backup = store.backup_path  # type: ignore[attr-defined]
    assert backup is not None and backup.exists()
    assert mode(backup) == 0o600
    assert mode(db) == 0o600  # repaired on open


@pytest.mark.parametrize("sidecar", ["-wal", "-shm", "-journal", "-writelock"])
def test_a_symlinked_sidecar_is_refused(tmp_path: Path, sidecar: str) -> None:
    db = tmp_path / "data" / "jobs.sqlite3"
    with jobledger.open_store(db, clock=FakeClock()):
        pass
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"")
    Path(f"{db}{sidecar}").unlink(missing_ok=True)
    Path(f"{db}{sidecar}").symlink_to(elsewhere)
    with pytest.raises(jobledger.UnsafePath):
        jobledger.open_store(db, clock=FakeClock())
    assert elsewhere.read_bytes() == b""


def test_a_symlinked_directory_on_the_path_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    with pytest.raises(jobledger.UnsafePath):
        jobledger.open_store(tmp_path / "link" / "sub" / "jobs.sqlite3", clock=FakeClock())
    assert list(real.iterdir()) == []


def test_a_writelock_planted_as_a_symlink_after_open_is_not_followed(tmp_path: Path) -> None:
    """The write gate is made on the first write, after the open's checks: a symlink planted in
    between must not be followed (``O_NOFOLLOW``); the write fails coded instead."""
    db = tmp_path / "data" / "jobs.sqlite3"
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    store = jobledger.open_store(db, clock=FakeClock())
    try:
        Path(f"{db}-writelock").unlink(missing_ok=True)
        Path(f"{db}-writelock").symlink_to(target)
        try:
            store.create_job(id="j", kind="k", authority={"principal": {"type": "u", "id": "x"}})
        except jobledger.SchedulerError:
            pass
    finally:
        store.close()
    assert target.read_bytes() == b"precious"
    assert mode(target) != 0o000


def test_an_owner_lock_planted_as_a_symlink_is_not_followed(tmp_path: Path) -> None:
    db = tmp_path / "data" / "jobs.sqlite3"
    with jobledger.open_store(db, clock=FakeClock()) as store:
        lock = store.hold_owner_lock("w-1")
        path = lock.path  # type: ignore[attr-defined]
        lock.close()
        victim = tmp_path / "victim"
        victim.write_bytes(b"precious")
        path.unlink(missing_ok=True)
        path.symlink_to(victim)
        with pytest.raises(jobledger.SchedulerError):
            store.hold_owner_lock("w-1")
        assert store.owner_gone("w-1") is False  # unsure: not "gone"
    assert victim.exists() and victim.read_bytes() == b"precious"


def test_owner_gone_on_a_symlink_is_coded(tmp_path: Path) -> None:
    db = tmp_path / "data" / "jobs.sqlite3"
    with jobledger.open_store(db, clock=FakeClock()) as store:
        lock = store.hold_owner_lock("w-1")
        path = lock.path  # type: ignore[attr-defined]
        lock.close()
        path.unlink(missing_ok=True)
        path.symlink_to(tmp_path / "victim")
        try:
            answer = store.owner_gone("w-1")
        except jobledger.SchedulerError:
            return
        assert answer is False


def test_a_symlinked_owners_directory_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "data" / "jobs.sqlite3"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with jobledger.open_store(db, clock=FakeClock()) as store:
        Path(f"{db}-owners").symlink_to(elsewhere, target_is_directory=True)
        try:
            lock = store.hold_owner_lock("w-1")
        except jobledger.SchedulerError:
            lock = None
        if lock is not None:
            lock_dir = lock.path.parent  # type: ignore[attr-defined]
            lock.close()
        assert list(elsewhere.iterdir()) == [], "a lock file was made in the symlink's target"
        assert lock is None, f"took a lock through the symlink ({lock_dir})"


# -- refused ⇒ nothing changed, for every kind of path -------------------------------------------
#
# Generated: the parent directory's mode × what is at the path × a read-only or a writing open.
# A refused open changes nothing at all (modes, sizes, contents, entries); a read-only open
# changes no mode; a writing open of a database jobledger created or verified makes it private,
# as the reference does: its directory 0700, the file and sidecars 0600 (SPEC §4). A shared,
# world-writable or sticky parent is refused, never "repaired".

PARENT_MODES = {"0777": 0o777, "1777": 0o1777, "0755": 0o755, "0700": 0o700}
FILE_KINDS = ["missing", "empty", "text", "foreign-sqlite", "jobledger-0644", "fifo", "device"]


def _make(kind: str, path: Path) -> None:
    if kind == "missing":
        return
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("hi\n")
    elif kind == "foreign-sqlite":
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
        conn.commit()
        conn.close()
    elif kind == "jobledger-0644":
        with jobledger.open_store(path, clock=FakeClock()) as store:
            store.create_job(id="j", kind="k", authority={"principal": {"type": "u", "id": "x"}})
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except OSError as exc:
            pytest.skip(f"cannot make a device node here: {exc}")
    os.chmod(path, 0o644)


def _state(directory: Path) -> dict[str, tuple[int, int, str]]:
    entries = {".": (os.lstat(directory).st_mode, 0, "")}
    for entry in sorted(directory.iterdir()):
        info = os.lstat(entry)
        regular = stat.S_ISREG(info.st_mode)
        digest = hashlib.sha256(entry.read_bytes()).hexdigest() if regular else ""
        entries[entry.name] = (info.st_mode, info.st_size, digest)
    return entries


def _expected_refusal(parent_mode: int, kind: str, migrate: bool) -> str | None:
    """The code an open must refuse with, or None when it must open."""
    if parent_mode & (stat.S_IWOTH | stat.S_ISVTX) or kind in ("fifo", "device"):
        return "SCHEDULER_UNSAFE_PATH"
    return {
        "missing": None if migrate else "SCHEDULER_STORE_NOT_FOUND",
        "empty": None if migrate else "SCHEDULER_MIGRATION_REQUIRED",
        "text": "SCHEDULER_SCHEMA_CORRUPT",
        "foreign-sqlite": "SCHEDULER_SCHEMA_UNKNOWN",
        "jobledger-0644": None,
    }[kind]


@pytest.mark.parametrize("migrate", [False, True], ids=["read-only", "write"])
@pytest.mark.parametrize("kind", FILE_KINDS)
@pytest.mark.parametrize("parent_mode", list(PARENT_MODES.values()), ids=list(PARENT_MODES))
def test_refused_means_nothing_changed(
    tmp_path: Path, parent_mode: int, kind: str, migrate: bool
) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    path = parent / "jobs.sqlite3"
    _make(kind, path)
    parent.chmod(parent_mode)
    before = _state(parent)
    code = _expected_refusal(parent_mode, kind, migrate)
    if code is not None:
        with pytest.raises(jobledger.SchedulerError) as refused:
            jobledger.open_store(path, clock=FakeClock(), migrate=migrate)
        assert refused.value.code == code
        assert _state(parent) == before, f"refused with {code} but changed the directory"
        if code == "SCHEDULER_UNSAFE_PATH" and parent_mode & 0o1002:
            assert "private directory" in refused.value.message
        return
    jobledger.open_store(path, clock=FakeClock(), migrate=migrate).close()
    assert mode(parent) == (0o700 if migrate else parent_mode)
    if migrate:
        assert mode(path) == 0o600
        for suffix in ("-wal", "-shm", "-journal"):
            sidecar = Path(f"{path}{suffix}")
            assert not sidecar.exists() or mode(sidecar) == 0o600, suffix
    else:
        assert mode(path) == 0o644


def _existing_database(directory: Path, directory_mode: int) -> Path:
    """A jobledger database (with its -wal and -shm left behind, 0644) in a directory of
    ``directory_mode``, as an older jobledger or a copy with ``cp`` could leave them."""
    directory.mkdir()
    path = directory / "jobs.sqlite3"
    store = jobledger.open_store(path, clock=FakeClock())
    store.create_job(id="j", kind="k", authority={"principal": {"type": "u", "id": "x"}})
    keep_open = sqlite3.connect(path)  # holds the WAL open so the sidecars stay
    keep_open.execute("SELECT COUNT(*) FROM jobs").fetchall()
    store.close()
    for candidate in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if candidate.exists():
            os.chmod(candidate, 0o644)
    keep_open.close()
    directory.chmod(directory_mode)
    return path


@pytest.mark.parametrize("directory_mode", [0o755, 0o775, 0o750])
def test_a_writing_open_makes_an_existing_database_private(
    tmp_path: Path, directory_mode: int
) -> None:
    path = _existing_database(tmp_path / "db", directory_mode)
    assert mode(path.parent) == directory_mode
    with jobledger.open_store(path, clock=FakeClock()) as store:
        assert store.get_job("j") is not None
        assert mode(path.parent) == 0o700
        for candidate in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            assert not candidate.exists() or mode(candidate) == 0o600, candidate.name


def test_a_read_only_open_of_an_existing_database_changes_no_mode(tmp_path: Path) -> None:
    path = _existing_database(tmp_path / "db", 0o755)
    before = {p.name: mode(p) for p in path.parent.iterdir()}
    with jobledger.open_store(path, clock=FakeClock(), migrate=False) as store:
        assert store.get_job("j") is not None
    assert mode(path.parent) == 0o755
    assert mode(path) == 0o644
    assert {p.name: mode(p) for p in path.parent.iterdir() if p.name in before} == before


def test_a_refused_open_of_an_existing_database_changes_no_mode(tmp_path: Path) -> None:
    path = _existing_database(tmp_path / "db", 0o755)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE user_notes (id INTEGER)")  # not jobledger's schema any more
    conn.close()
    os.chmod(path, 0o644)
    before = _state(path.parent)
    for migrate in (True, False):
        with pytest.raises(jobledger.SchedulerError) as refused:
            jobledger.open_store(path, clock=FakeClock(), migrate=migrate)
        assert refused.value.code == "SCHEDULER_SCHEMA_UNKNOWN"
        assert _state(path.parent) == before
    assert mode(path.parent) == 0o755
