"""File safety of the SQLite store: a private directory, 0600 files, no symlinks."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobledger
from jobledger.errors import SchedulerError
from jobledger.store.migrations import LATEST_VERSION
from jobledger.store.sqlite import SQLiteStore
from jobledger.testing import FakeClock
from tests.store.sqlite.support import sha256_file

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _open(target: str | Path, **options: object) -> SQLiteStore:
    store = jobledger.open_store(target, clock=FakeClock(), **options)  # type: ignore[arg-type]
    assert isinstance(store, SQLiteStore)
    return store


def _write_something(store: SQLiteStore) -> None:
    store.create_job(id="job-a", kind="k", authority=AUTHORITY)
    store.enqueue_occurrence(job_id="job-a", scheduled_for=1, trigger_key="t")


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def test_new_directory_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "store.sqlite"
    store = _open(path)
    store.close()
    assert _mode(path.parent) == 0o700
    assert stat.S_ISDIR(os.lstat(path.parent).st_mode)
    assert _mode(path) == 0o600


def test_new_directory_is_private_even_with_umask_0(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "new" / "store.sqlite"
    store = _open(path)
    store.close()
    assert _mode(path.parent) == 0o700


def test_an_existing_directory_is_made_private_by_a_writing_open(tmp_path: Path) -> None:
    # SPEC §4, as the reference: the database's directory is 0700 once a writing open created or
    # verified the database in it (a shared, world-writable or sticky one is refused instead:
    # test_files.py); its own parents are left alone.
    directory = tmp_path / "team"
    directory.mkdir()
    directory.chmod(0o755)
    store = _open(directory / "store.sqlite")
    store.close()
    assert _mode(directory) == 0o700
    assert _mode(directory / "store.sqlite") == 0o600


def test_only_the_directories_jobledger_makes_are_made_private(tmp_path: Path) -> None:
    existing = tmp_path / "existing"
    existing.mkdir()
    existing.chmod(0o755)
    path = existing / "made" / "deeper" / "store.sqlite"
    _open(path).close()
    assert _mode(existing) == 0o755
    assert _mode(existing / "made") == 0o700
    assert _mode(existing / "made" / "deeper") == 0o700
    assert _mode(path) == 0o600


def _snapshot(directory: Path) -> dict[str, tuple[int, int, str]]:
    """Mode, size and content of the directory and everything in it: what "unchanged" means."""
    entries = {".": (os.lstat(directory).st_mode, 0, "")}
    for entry in sorted(directory.iterdir()):
        info = os.lstat(entry)
        digest = sha256_file(entry) if stat.S_ISREG(info.st_mode) else ""
        entries[entry.name] = (info.st_mode, info.st_size, digest)
    return entries


@pytest.mark.parametrize("migrate", [False, True], ids=["read-only", "migrating"])
@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o1755], ids=["1777", "0777", "sticky-1755"])
def test_a_file_in_a_shared_directory_is_refused_unchanged(
    tmp_path: Path, migrate: bool, mode: int
) -> None:
    """`mkdir -m 1777 shared; jobledger --db shared/notes.txt db info` used to chmod the
    directory 0700 and the file 0600 before refusing the file as SCHEDULER_SCHEMA_CORRUPT."""
    shared = tmp_path / "shared"
    shared.mkdir()
    notes = shared / "notes.txt"
    notes.write_text("hi\n")
    notes.chmod(0o644)
    shared.chmod(mode)
    before = _snapshot(shared)
    with pytest.raises(SchedulerError) as refused:
        _open(notes, migrate=migrate)
    assert refused.value.code == "SCHEDULER_UNSAFE_PATH"
    assert refused.value.details is not None
    assert refused.value.details["reason"] == "shared_directory"
    assert _snapshot(shared) == before
    assert _mode(shared) == mode and _mode(notes) == 0o644


@pytest.mark.parametrize("migrate", [False, True], ids=["read-only", "migrating"])
def test_a_new_database_directly_in_a_sticky_world_writable_directory_is_refused(
    tmp_path: Path, migrate: bool
) -> None:
    drop_box = tmp_path / "drop"
    drop_box.mkdir()
    drop_box.chmod(0o1777)
    with pytest.raises(SchedulerError) as refused:
        _open(drop_box / "jobs.sqlite3", migrate=migrate)
    assert refused.value.code == "SCHEDULER_UNSAFE_PATH"
    assert "private directory" in refused.value.message
    assert list(drop_box.iterdir()) == []
    assert _mode(drop_box) == 0o1777
    # The way out the message names: a private directory of its own inside the shared one.
    _open(drop_box / "mine" / "jobs.sqlite3").close()
    assert _mode(drop_box / "mine") == 0o700
    assert _mode(drop_box) == 0o1777


@pytest.mark.parametrize("migrate", [False, True], ids=["read-only", "migrating"])
def test_a_fifo_is_refused_without_being_opened_or_changed(tmp_path: Path, migrate: bool) -> None:
    """Like `--db /dev/null` (which, as root, used to make /dev 0700): a special file is
    refused before anything is opened — opening a fifo would even block."""
    directory = tmp_path / "dev"
    directory.mkdir()
    directory.chmod(0o755)
    fifo = directory / "null"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    before = _snapshot(directory)
    with pytest.raises(SchedulerError) as refused:
        _open(fifo, migrate=migrate)
    assert refused.value.code == "SCHEDULER_UNSAFE_PATH"
    assert _snapshot(directory) == before


def test_a_device_file_is_refused_without_being_changed(tmp_path: Path) -> None:
    directory = tmp_path / "dev"
    directory.mkdir()
    directory.chmod(0o755)
    device = directory / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    device.chmod(0o666)
    before = _snapshot(directory)
    for migrate in (False, True):
        with pytest.raises(SchedulerError) as refused:
            _open(device, migrate=migrate)
        assert refused.value.code == "SCHEDULER_UNSAFE_PATH"
        assert _snapshot(directory) == before


def test_a_read_only_open_of_a_database_with_loose_modes_changes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "team"
    path = directory / "store.sqlite"
    with _open(path) as store:
        _write_something(store)
    directory.chmod(0o755)
    path.chmod(0o644)
    store = _open(path, migrate=False)
    try:
        assert store.get_job("job-a") is not None
        assert _mode(path) == 0o644
    finally:
        store.close()
    assert _mode(directory) == 0o755
    assert _mode(path) == 0o644
    # A writing open of the same, verified database makes it private: file and directory.
    _open(path).close()
    assert _mode(path) == 0o600
    assert _mode(directory) == 0o700


@pytest.mark.parametrize("migrate", [False, True], ids=["read-only", "migrating"])
def test_a_file_that_is_not_a_database_is_refused_unchanged(tmp_path: Path, migrate: bool) -> None:
    directory = tmp_path / "docs"
    directory.mkdir()
    directory.chmod(0o755)
    notes = directory / "notes.txt"
    notes.write_text("hi\n")
    notes.chmod(0o644)
    before = _snapshot(directory)
    with pytest.raises(SchedulerError) as refused:
        _open(notes, migrate=migrate)
    assert refused.value.code == "SCHEDULER_SCHEMA_CORRUPT"
    assert _snapshot(directory) == before


def test_database_and_sidecars_are_0600_with_umask_0(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "db" / "store.sqlite"
    store = _open(path)
    try:
        _write_something(store)
        for suffix in ("", "-wal", "-shm"):
            candidate = Path(f"{path}{suffix}")
            assert candidate.exists(), suffix
            assert stat.S_ISREG(os.lstat(candidate).st_mode)
            assert _mode(candidate) == 0o600, suffix
    finally:
        store.close()
    # a second open (sidecars recreated by SQLite) keeps them private too
    store = _open(path)
    try:
        _write_something_else(store)
        for suffix in ("", "-wal", "-shm"):
            assert _mode(Path(f"{path}{suffix}")) == 0o600, suffix
    finally:
        store.close()


def _write_something_else(store: SQLiteStore) -> None:
    store.enqueue_occurrence(job_id="job-a", scheduled_for=2, trigger_key="t")


def test_too_open_existing_files_are_repaired_to_0600(tmp_path: Path) -> None:
    """A writing open of a database verified as jobledger's own makes it and its sidecars
    0600 (a read-only open changes nothing: see above)."""
    path = tmp_path / "db" / "store.sqlite"
    _open(path).close()
    path.chmod(0o644)
    journal = Path(f"{path}-journal")
    journal.write_bytes(b"")  # an empty hot-journal-less leftover: harmless, but must be private
    journal.chmod(0o666)
    store = _open(path)
    try:
        assert _mode(path) == 0o600
        assert _mode(journal) == 0o600
    finally:
        store.close()


def test_symlinked_database_file_is_refused(tmp_path: Path) -> None:
    real_dir = tmp_path / "real"
    real = real_dir / "store.sqlite"
    _open(real).close()
    digest = sha256_file(real)
    link_dir = tmp_path / "links"
    link_dir.mkdir(mode=0o700)
    link = link_dir / "store.sqlite"
    link.symlink_to(real)
    with pytest.raises(SchedulerError) as refused:
        _open(link)
    assert refused.value.code == "SCHEDULER_UNSAFE_PATH"
    assert sha256_file(real) == digest
    assert link.is_symlink()
    assert sorted(p.name for p in link_dir.iterdir()) == ["store.sqlite"]


def test_symlink_to_a_missing_database_file_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "db"
    directory.mkdir(mode=0o700)
    link = directory / "store.sqlite"
    link.symlink_to(tmp_path / "elsewhere.sqlite")
    with pytest.raises(SchedulerError) as refused:
        _open(link)
    assert refused.value.code == "SCHEDULER_UNSAFE_PATH"
    assert not (tmp_path / "elsewhere.sqlite").exists()


def test_symlinked_parent_directory_is_refused(tmp_path: Path) -> None:
    real_dir = tmp_path / "real"
    real_dir.mkdir(mode=0o700)
    link_dir = tmp_path / "link"
    link_dir.symlink_to(real_dir, target_is_directory=True)
    with pytest.raises(SchedulerError) as refused:
        _open(link_dir / "store.sqlite")
    assert refused.value.code == "SCHEDULER_UNSAFE_PATH"
    assert list(real_dir.iterdir()) == []


def test_symlinked_ancestor_directory_is_refused(tmp_path: Path) -> None:
    real_dir = tmp_path / "real"
    real_dir.mkdir(mode=0o700)
    link_dir = tmp_path / "link"
    link_dir.symlink_to(real_dir, target_is_directory=True)
    with pytest.raises(SchedulerError) as refused:
        _open(link_dir / "deeper" / "store.sqlite")
    assert refused.value.code == "SCHEDULER_UNSAFE_PATH"
    assert list(real_dir.iterdir()) == []


def test_symlinked_sidecar_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "db" / "store.sqlite"
    _open(path).close()
    digest = sha256_file(path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"do not touch")
    Path(f"{path}-wal").symlink_to(victim)
    with pytest.raises(SchedulerError) as refused:
        _open(path)
    assert refused.value.code == "SCHEDULER_UNSAFE_PATH"
    assert victim.read_bytes() == b"do not touch"
    assert sha256_file(path) == digest


def test_directory_in_place_of_the_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "db" / "store.sqlite"
    path.mkdir(parents=True)
    with pytest.raises(SchedulerError) as refused:
        _open(path)
    assert refused.value.code == "SCHEDULER_UNSAFE_PATH"
    assert path.is_dir()


def test_memory_store_works() -> None:
    store = _open(":memory:")
    try:
        _write_something(store)
        claimed = store.claim_next(owner_id="w", lease_ms=1000)
        assert claimed is not None
        assert store.schema_info().schema_version == LATEST_VERSION
        assert store.target == ":memory:"
    finally:
        store.close()


def test_memory_stores_are_independent() -> None:
    first, second = _open(":memory:"), _open(":memory:")
    try:
        _write_something(first)
        assert second.get_job("job-a") is None
    finally:
        first.close()
        second.close()


def test_sqlite_url_with_absolute_path(tmp_path: Path) -> None:
    path = tmp_path / "via-url" / "store.sqlite"
    url = "sqlite://" + str(path)
    assert url.startswith("sqlite:///")
    store = _open(url)
    try:
        _write_something(store)
        assert store.target == str(path)
    finally:
        store.close()
    assert path.is_file()
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    reopened = _open(path)
    try:
        assert reopened.get_job("job-a") is not None
    finally:
        reopened.close()


def test_sqlite_url_memory() -> None:
    store = _open("sqlite:///:memory:")
    try:
        assert store.target == ":memory:"
        _write_something(store)
    finally:
        store.close()


def test_modes_are_tightened_by_name_never_through_a_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing any descriptor of a database file drops every POSIX lock this process holds on it
    — SQLite's own locks included, so another process could reset the WAL index under an open
    connection (a worker died of SIGBUS that way). Tightening modes must therefore open nothing;
    it also works on a file its owner cannot read (mode 0222)."""
    from jobledger.store.sqlite import connection

    path = tmp_path / "db" / "store.sqlite"
    _open(path).close()
    journal = Path(f"{path}-journal")
    journal.write_bytes(b"")
    journal.chmod(0o222)
    path.chmod(0o644)
    opened: list[str] = []
    real_open = connection.os.open

    def watching(file: object, *args: object, **kwargs: object) -> int:
        opened.append(str(file))
        return real_open(file, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(connection.os, "open", watching)
    connection.tighten_database_files(path)
    assert opened == []
    assert _mode(journal) == 0o600
    assert _mode(path) == 0o600
