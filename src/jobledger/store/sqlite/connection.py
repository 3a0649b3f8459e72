"""SQLite connection discipline: file safety, pragmas, transactions and error mapping.

This module is the single boundary where ``sqlite3`` and ``OSError`` exceptions become
jobledger errors. Every write runs in ``BEGIN IMMEDIATE`` so the write lock is taken before the
body reads anything, which is what makes "read, decide, write" safe across processes.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ...errors import (
    DataCorrupt,
    SchedulerError,
    StorageUnavailable,
    StoreClosed,
    StoreNotFound,
    UnsafePath,
)
from .gate import WriteGate

__all__ = [
    "SQLiteConnection",
    "is_shared_directory",
    "prepare_database_files",
    "storage_failure",
    "tighten_database_files",
]

T = TypeVar("T")

# SQLITE_CANTOPEN: the file or a sidecar (the WAL's -shm) cannot be opened or created, e.g. on
# a read-only file system; the data may be perfectly sound.
_STORAGE_CODES = (
    "SQLITE_FULL",
    "SQLITE_IOERR",
    "SQLITE_READONLY",
    "SQLITE_CANTOPEN",
    "ENOSPC",
    "EROFS",
    "EIO",
)
_ERRNO_CODES = {errno.ENOSPC: "ENOSPC", errno.EROFS: "EROFS", errno.EIO: "EIO"}
# A busy BEGIN is retried this many times in total, on top of SQLite's own busy timeout, but
# only before the transaction body starts (after that a retry could repeat side effects).
BEGIN_ATTEMPTS = 3
SIDECAR_SUFFIXES = ("", "-journal", "-wal", "-shm", "-writelock", "-wake")


def _storage_code(exc: BaseException) -> str | None:
    """The storage failure code along the cause chain (SQLITE_IOERR_WRITE → SQLITE_IOERR)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    fallback: str | None = None  # CANTOPEN says least: a cause further down may say why
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        candidates: list[str] = []
        name = getattr(current, "sqlite_errorname", None)
        if isinstance(name, str):
            candidates.append(name)
        if isinstance(current, OSError) and current.errno in _ERRNO_CODES:
            candidates.append(_ERRNO_CODES[current.errno])
        code = getattr(current, "code", None)
        if isinstance(code, str):
            candidates.append(code)
        for candidate in candidates:
            text = candidate.strip().upper()
            for known in _STORAGE_CODES:
                if text == known or text.startswith(known + "_"):
                    if known != "SQLITE_CANTOPEN":
                        return known
                    fallback = fallback or known
        current = current.__cause__ or current.__context__
    return fallback


def _is_busy(exc: BaseException) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


def storage_failure(exc: BaseException, *, phase: str, commit_state: str) -> SchedulerError | None:
    """Translate a driver/OS failure, or return ``None`` if it is not a storage failure."""
    code = _storage_code(exc)
    if code is not None:
        # No cause and no path: storage errors can carry file names and native messages.
        return StorageUnavailable.during(
            "Scheduler storage is unavailable",
            phase=phase,
            storage_code=code,
            commit_state=commit_state,
            retryable=False,
        )
    error: SchedulerError
    if isinstance(exc, sqlite3.Error) and _is_busy(exc):
        error = StorageUnavailable.during(
            "Scheduler storage stayed busy longer than the busy timeout",
            phase=phase,
            storage_code="SQLITE_BUSY",
            commit_state=commit_state,
            retryable=True,
        )
        error.__cause__ = exc
        return error
    if isinstance(exc, sqlite3.ProgrammingError | sqlite3.InterfaceError):
        # The driver refused how it was used (a closed connection, a connection from another
        # thread or process): the file was never judged, so this is no corrupt store.
        error = StorageUnavailable.during(
            "Scheduler storage is unavailable (the SQLite driver refused the call)",
            phase=phase,
            storage_code=type(exc).__name__,
            commit_state=commit_state,
            retryable=False,
        )
        error.__cause__ = exc
        return error
    if isinstance(exc, sqlite3.DatabaseError):
        error = DataCorrupt(
            "The database rejected the operation; its contents are not what jobledger wrote",
            details={"phase": phase, "commitState": commit_state},
        )
        error.__cause__ = exc
        return error
    return None


# -- file safety ------------------------------------------------------------------------------
#
# The rule (SPEC §4): verify first, and change nothing on a refusal or a read-only open. Checking
# a path is lstat only; missing directories are made 0700 only for a database jobledger creates.
# A writing open of a database jobledger created or has verified as its own then makes it
# private, as the reference does: its directory 0700, the file and its sidecars 0600
# (:func:`tighten_database_files`, called after the schema check). So `jobledger --db
# /etc/passwd db info` reads and refuses, and a mistyped --db never turns a shared directory
# (refused before anything) or a device into something private.


def _unsafe(message: str, *, path: Path, reason: str, **details: str) -> UnsafePath:
    return UnsafePath(message, details={"path": str(path), "reason": reason, **details})


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        # A regular file where a directory of the path should be (``file.txt/jobs.sqlite3``).
        raise _unsafe(
            f"Refusing a database path through something that is not a directory: {path}",
            path=path,
            reason="not_a_directory",
        ) from None


def _refuse_symlinks(path: Path) -> None:
    for candidate in [path, *path.parents]:
        info = _lstat(candidate)
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise _unsafe(
                f"Refusing a symbolic link in the database path: {candidate}",
                path=candidate,
                reason="symlink",
            )


def is_shared_directory(mode: int) -> bool:
    """World-writable or sticky (``/tmp``, a ``1777`` drop box): others may create, and on a
    non-sticky one also rename or delete, files next to the database — a planted ``-wal`` or
    ``-journal`` is a write into the database."""
    return bool(mode & (stat.S_IWOTH | stat.S_ISVTX))


def _check_directory(directory: Path, info: os.stat_result) -> None:
    if not stat.S_ISDIR(info.st_mode):
        raise _unsafe(
            f"Refusing a database path whose directory is not a directory: {directory}",
            path=directory,
            reason="not_a_directory",
        )
    if directory == Path(directory.anchor):
        raise _unsafe(
            "Refusing to keep a database directly in a filesystem root",
            path=directory,
            reason="filesystem_root",
        )
    mode = stat.S_IMODE(info.st_mode)
    if is_shared_directory(mode):
        raise _unsafe(
            f"Refusing a database directly in a shared directory ({directory} is "
            f"{'world-writable' if mode & stat.S_IWOTH else 'sticky'}, mode {mode:04o}): "
            "keep it in a private directory of its own inside it",
            path=directory,
            reason="shared_directory",
            mode=f"{mode:04o}",
        )


def _check_files(path: Path) -> bool:
    """Each existing database file and sidecar must be a regular file; True if the database
    file exists. A device, fifo, socket or directory is refused without being opened."""
    exists = False
    for suffix in SIDECAR_SUFFIXES:
        candidate = Path(f"{path}{suffix}")
        info = _lstat(candidate)
        if info is None:
            continue
        if not stat.S_ISREG(info.st_mode):
            raise _unsafe(
                f"Refusing a database file that is not a regular file: {candidate}",
                path=candidate,
                reason="not_a_regular_file",
            )
        if suffix == "":
            exists = True
    return exists


def _make_directories(directory: Path) -> None:
    """Make the missing directories down to ``directory``, each 0700 whatever the umask; one
    that appears meanwhile (another process) is not ours, so it is checked, never changed."""
    missing: list[Path] = []
    for candidate in [directory, *directory.parents]:
        if _lstat(candidate) is not None:
            break
        missing.append(candidate)
    for candidate in reversed(missing):
        try:
            os.mkdir(candidate, 0o700)
        except FileExistsError:
            info = os.lstat(candidate)
            if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
                raise _unsafe(
                    f"Refusing a database path changed while it was being made: {candidate}",
                    path=candidate,
                    reason="symlink" if stat.S_ISLNK(info.st_mode) else "not_a_directory",
                ) from None
            continue
        # mkdir's mode is filtered by the umask (which could even drop our own bits).
        os.chmod(candidate, 0o700)


def _home() -> Path | None:
    try:
        return Path.home()
    except (RuntimeError, KeyError):  # no HOME and no passwd entry
        return None


def tighten_database_files(path: Path) -> None:
    """Make the database's directory 0700 and the database file and its sidecars 0600.

    Only for a database this open created, or verified as jobledger's own and opened for
    writing: the caller decides, after the schema check (a shared, world-writable or sticky
    directory was refused before anything, so it is never "repaired"). The directory is left
    alone when it is the user's home directory or another user's (not ours to change). Each
    file is changed by name after an ``lstat`` shows a regular file — never through a
    descriptor: closing any descriptor of a database file drops every POSIX lock this process
    holds on it, including those of SQLite connections already open (another process could
    then reset the WAL index under them).
    """
    directory = path.parent
    info = _lstat(directory)
    if info is None or stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise _unsafe(
            f"Refusing a database path changed while it was open: {directory}",
            path=directory,
            reason="symlink"
            if info is not None and stat.S_ISLNK(info.st_mode)
            else "not_a_directory",
        )
    _check_directory(directory, info)
    if stat.S_IMODE(info.st_mode) != 0o700 and info.st_uid == os.getuid() and directory != _home():
        os.chmod(directory, 0o700)
    for suffix in SIDECAR_SUFFIXES:
        candidate = Path(f"{path}{suffix}")
        info = _lstat(candidate)
        if info is None:
            continue
        if not stat.S_ISREG(info.st_mode):
            raise _unsafe(
                f"Refusing a database file that is not a regular file: {candidate}",
                path=candidate,
                reason="not_a_regular_file",
            )
        if stat.S_IMODE(info.st_mode) != 0o600:
            os.chmod(candidate, 0o600)


def prepare_database_files(path: Path, *, create: bool) -> None:
    """Check ``path`` before SQLite opens it; make the database only when ``create`` is true.

    Refused with ``SCHEDULER_UNSAFE_PATH``, changing nothing: a symbolic link anywhere on the
    path; a database file or sidecar that is not a regular file (a device, fifo, socket or
    directory); a directory that is not one, a filesystem root, or a shared one (world-writable
    or sticky, see :func:`is_shared_directory`). A missing database is
    ``SCHEDULER_STORE_NOT_FOUND`` unless ``create``; then the missing directories are made
    0700 and the file 0600, whatever the umask. An existing directory's mode is not changed
    here: a writing open tightens it after verification (:func:`tighten_database_files`).
    """
    _refuse_symlinks(path)
    directory = path.parent
    directory_info = _lstat(directory)
    if directory_info is not None:
        _check_directory(directory, directory_info)
    if _check_files(path):
        return
    if not create:
        # Only a migrating open may create a database: a mistyped path must not silently
        # become a new, empty store.
        raise StoreNotFound(
            f"No scheduler database exists at {path}; create it with migrate=True (or "
            "`jobledger db init`)",
            details={"target": str(path)},
        )
    if directory_info is None:
        _make_directories(directory)
        _check_directory(directory, os.lstat(directory))
    # Create the file ourselves so it is born 0600 whatever the umask (O_EXCL: never an
    # existing file, O_NOFOLLOW: never through a link); SQLite then gives its -wal/-shm
    # sidecars the same mode.
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        # Another process created it first: it is not ours to change until verified.
        _check_files(path)
        return
    try:
        os.fchmod(descriptor, 0o600)
    finally:
        os.close(descriptor)


@functools.cache
def schema_needs_trust() -> bool:
    """True when this SQLite library refuses ``json_valid`` in a schema with trusted_schema=OFF.

    SQLite builds before JSON functions were marked innocuous (3.40 is one) cannot even parse
    the reference schema's ``CHECK (json_valid(...))`` constraints with ``trusted_schema=OFF``.
    There jobledger keeps ``trusted_schema=ON``; what that setting guards against — triggers or
    views that call unsafe functions — is refused anyway by the schema fingerprint check on open,
    which runs before any write, and jobledger registers no application functions.
    """
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("PRAGMA trusted_schema = OFF")
        probe.execute("CREATE TABLE probe (value TEXT CHECK (json_valid(value)))")
        probe.execute("INSERT INTO probe VALUES ('{}')")
    except sqlite3.OperationalError:
        return True
    finally:
        probe.close()
    return False


# -- connection -------------------------------------------------------------------------------


class SQLiteConnection:
    """The connections a store keeps on one database: one for writes, one for reads.

    Writes share one ``sqlite3`` connection under a lock (SQLite takes one writer at a time
    anyway, and the write gate orders processes). Reads use a second connection with its own
    lock: in WAL mode a reader sees the last commit without waiting for a writer, so reads never
    queue behind another thread's transaction. A ``:memory:`` database has one connection (a
    second one would be another database), so there reads share the writer's lock.
    """

    def __init__(self, target: str, *, busy_timeout_ms: int) -> None:
        self.target = target
        self.is_memory = target == ":memory:"
        self._lock = threading.RLock()
        self._read_lock = threading.Lock()
        self._closed = False
        self._busy_timeout_ms = int(busy_timeout_ms)
        self._conn = self._connect()
        self._reader: sqlite3.Connection | None = None
        self._busy_timeout_s = busy_timeout_ms / 1000
        self._gate: WriteGate | None = None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.target,
            timeout=self._busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        conn.row_factory = sqlite3.Row  # by-name access in C; rows are read, never mutated
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA trusted_schema = {'ON' if schema_needs_trust() else 'OFF'}")
        conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        return conn

    def open_reader(self) -> None:
        """Open the read connection (after the schema is verified and WAL is on)."""
        if not self.is_memory and self._reader is None:
            reader = self._connect()
            reader.execute("PRAGMA query_only = ON")
            self._reader = reader

    @property
    def raw(self) -> sqlite3.Connection:
        return self._conn

    @property
    def closed(self) -> bool:
        return self._closed

    def assert_open(self) -> None:
        if self._closed:
            raise StoreClosed("Scheduler store is closed")

    def close(self) -> None:
        with self._lock, self._read_lock:
            if self._closed:
                return
            self._closed = True
            if self._reader is not None:
                self._reader.close()
            self._conn.close()
            if self._gate is not None:
                self._gate.close()

    def after_fork_in_child(self, synchronous: str) -> None:
        """In a forked child: new locks (another thread may have held one at the fork), the
        inherited connections closed and new ones opened, the write gate's descriptor dropped
        (reopened by the next write). SQLite's locks are per process, so nothing here touches
        the parent's; a ``:memory:`` database is this process's own copy and stays."""
        self._lock = threading.RLock()
        self._read_lock = threading.Lock()
        if self._closed or self.is_memory:
            return
        if self._gate is not None:
            self._gate.drop_in_child()
            self._gate = None
        had_reader = self._reader is not None
        for inherited in (self._reader, self._conn):
            if inherited is not None:
                with contextlib.suppress(sqlite3.Error):
                    inherited.close()
        self._reader = None
        self._conn = self._connect()
        self._conn.execute(f"PRAGMA synchronous = {synchronous}")
        if had_reader:
            self.open_reader()

    def enable_wal(self) -> None:
        """Switch the file to WAL, retrying while another connection blocks the switch.

        Changing the journal mode needs an exclusive lock, and SQLite reports a conflict at
        once instead of calling the busy handler; wait for it here, up to the busy timeout.
        """
        deadline = time.monotonic() + self._busy_timeout_s
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.001)

    def pragma(self, name: str) -> Any:
        row = self._conn.execute(f"PRAGMA {name}").fetchone()
        return None if row is None else row[0]

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """One read snapshot (a deferred transaction) on the read connection, errors mapped."""
        reader = self._reader
        lock = self._lock if reader is None else self._read_lock
        with lock:
            self.assert_open()
            conn = self._conn if reader is None else reader
            began = False
            try:
                if not conn.in_transaction:
                    conn.execute("BEGIN")
                    began = True
                yield conn
            except SchedulerError:
                raise
            except (sqlite3.Error, OSError) as exc:
                mapped = storage_failure(exc, phase="read", commit_state="not_committed")
                if mapped is None:
                    raise
                raise mapped from (exc if mapped.__cause__ is exc else None)
            finally:
                if began and conn.in_transaction:
                    try:
                        conn.execute("COMMIT")
                    except sqlite3.Error:
                        conn.rollback()

    def write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction; commit or roll back whole."""
        with self._lock:
            self.assert_open()
            gate = self._write_gate()
            gated = gate is not None and gate.acquire()
            try:
                return self._write_transaction(body)
            finally:
                if gated and gate is not None:
                    gate.release()

    def _write_gate(self) -> WriteGate | None:
        # Made on the first write, not at open: a database refused on open gets no new file.
        if self._gate is None and not self.is_memory:
            try:
                self._gate = WriteGate(Path(self.target), self._busy_timeout_s)
            except OSError:
                return None  # the gate is an optimisation; SQLite's locking still applies
        return self._gate

    def _write_transaction(self, body: Callable[[sqlite3.Connection], T]) -> T:
        self._begin_immediate()
        try:
            result = body(self._conn)
        except BaseException as exc:
            rolled_back = self._rollback()
            if isinstance(exc, SchedulerError) or not isinstance(exc, (sqlite3.Error, OSError)):
                raise
            state = "not_committed" if rolled_back else "unknown"
            mapped = storage_failure(exc, phase="write", commit_state=state)
            if mapped is None:
                raise
            raise mapped from (exc if mapped.__cause__ is exc else None)
        try:
            self._conn.execute("COMMIT")
        except (sqlite3.Error, OSError) as exc:
            self._rollback()
            mapped = storage_failure(exc, phase="write", commit_state="unknown")
            if mapped is None:
                raise
            raise mapped from (exc if mapped.__cause__ is exc else None)
        return result

    def _begin_immediate(self) -> None:
        if self._conn.in_transaction and not self._rollback():
            # A previous rollback failed and left a transaction open; refuse rather than
            # nest this write inside whatever that transaction holds.
            raise StorageUnavailable.during(
                "Scheduler storage is unavailable",
                phase="write",
                storage_code="SQLITE_IOERR",
                commit_state="not_committed",
                retryable=False,
            )
        for attempt in range(1, BEGIN_ATTEMPTS + 1):
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if _is_busy(exc) and attempt < BEGIN_ATTEMPTS:
                    continue
                mapped = storage_failure(exc, phase="write", commit_state="not_committed")
                if mapped is None:
                    raise
                raise mapped from (exc if mapped.__cause__ is exc else None)

    def _rollback(self) -> bool:
        """Roll back; True when the connection is verifiably outside a transaction afterwards."""
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            return False
        return not self._conn.in_transaction
