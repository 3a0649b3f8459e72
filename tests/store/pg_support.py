"""PostgreSQL databases for tests: one migrated template per test session, one clone per test.

Cloning a template (``CREATE DATABASE … TEMPLATE …``) is much faster than migrating a fresh
database for every test, and each test still gets a database nobody else touches. A background
thread keeps a couple of clones ready and drops used ones, so most tests never wait for
``CREATE DATABASE`` / ``DROP DATABASE``.

Every database name carries this host's tag and the creating process's pid
(``jobledger_t_<host>_<pid>_<random>`` for clones, ``jobledger_tpl_<host>_<pid>_<random>`` for
templates). A run that was killed cannot drop its databases, so each session first drops the ones
whose process on this host is gone (:func:`sweep_orphaned_databases`); names it cannot attribute
are left alone, since they may belong to a run on another machine.

``JOBLEDGER_TEST_PG_ADMIN`` overrides the admin URL (default: the local test server).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import re
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jobledger.store.postgres.connection import redact_url

ADMIN_URL = os.environ.get("JOBLEDGER_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/test")
CLONES_AHEAD = 3
HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_OWNED_NAME = re.compile(r"^jobledger_(?:t|tpl)_([0-9a-f]{8})_([0-9]+)_[0-9a-f]+$")


def database_url(name: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


CONNECT_ATTEMPTS = 5


def connect_with_retry(
    url: str,
    *,
    attempts: int | None = None,
    connect: Callable[..., Any] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    **options: Any,
) -> Any:
    """``psycopg.connect(url, **options)``, tried ``attempts`` times: a server busy with many
    test processes (CREATE/DROP DATABASE from the clone threads, ``-n 2``) now and then refuses
    one connection, and one refusal must not fail a whole session's setup."""
    import psycopg

    connect = connect or psycopg.connect
    attempts = attempts or CONNECT_ATTEMPTS
    for attempt in range(1, attempts + 1):
        try:
            return connect(url, **options)
        except psycopg.OperationalError:
            if attempt == attempts:
                raise
            sleep(0.1 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def postgres_unreachable() -> str | None:
    """Why the test server cannot be used (one line), or ``None`` when it answers."""
    import psycopg

    try:
        with connect_with_retry(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return f"PostgreSQL at {redact_url(ADMIN_URL)} is not reachable: {reason}"
    return None


def _admin_execute(statement: str) -> None:
    with connect_with_retry(ADMIN_URL, autocommit=True) as conn:
        conn.execute(statement)


def _drop(name: str) -> None:
    """Drop a database even if a leftover store keeps reconnecting to it (e.g. its listener)."""
    for attempt in range(5):
        try:
            _admin_execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        except Exception:  # already gone (or never created): DROP … IF EXISTS decides
            pass
        try:
            _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except Exception:
            if attempt == 4:
                raise
            time.sleep(0.1 * (attempt + 1))


def new_database_name(kind: str = "t") -> str:
    """A unique database name that records which process on which host made it."""
    return f"jobledger_{kind}_{HOST_TAG}_{os.getpid()}_{uuid.uuid4().hex[:12]}"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def orphaned(name: str) -> bool:
    """True for a test database made on this host by a process that no longer exists."""
    match = _OWNED_NAME.match(name)
    return match is not None and match[1] == HOST_TAG and not _process_alive(int(match[2]))


def sweep_orphaned_databases() -> list[str]:
    """Drop the test databases an earlier, killed run left behind; return their names."""
    with connect_with_retry(ADMIN_URL, autocommit=True) as conn:
        names = [
            str(row[0])
            for row in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'jobledger\\_t%'"
            ).fetchall()
        ]
    dropped = []
    for name in sorted(names, key=lambda n: "_tpl_" in n):  # clones before their templates
        if orphaned(name):
            with contextlib.suppress(Exception):  # another session may be sweeping it too
                _drop(name)
                dropped.append(name)
    return dropped


class _CloneSupply:
    """Clones of one template made ahead of need on one thread; used ones dropped on another."""

    def __init__(self, template: str) -> None:
        self.template = template
        self._ready: queue.Queue[str | BaseException] = queue.Queue(maxsize=CLONES_AHEAD)
        self._used: queue.Queue[str | None] = queue.Queue()
        self._stopping = threading.Event()
        self.failures: list[str] = []
        self._maker = threading.Thread(target=self._make, name="pg-clone-maker", daemon=True)
        self._dropper = threading.Thread(target=self._drop, name="pg-clone-dropper", daemon=True)
        self._maker.start()
        self._dropper.start()

    def _make(self) -> None:
        while not self._stopping.is_set():
            if self._used.qsize() > CLONES_AHEAD:
                # Dropping is the slower half: don't let clones pile up faster than they go.
                time.sleep(0.02)
                continue
            name: str | BaseException
            try:
                name = new_database_name()
                _admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
            except BaseException as exc:  # handed to the test that takes it
                name = exc
            while True:
                try:
                    self._ready.put(name, timeout=0.05)
                    break
                except queue.Full:
                    if self._stopping.is_set():
                        if isinstance(name, str):
                            self._used.put(name)
                        return

    def _drop(self) -> None:
        while True:
            name = self._used.get()
            if name is None:
                return
            try:
                _drop(name)
            except Exception as exc:
                self.failures.append(f"{name}: {exc}")

    def take(self) -> str:
        item = self._ready.get(timeout=120)
        if isinstance(item, BaseException):
            raise item
        return item

    def give_back(self, name: str) -> None:
        self._used.put(name)

    def close(self) -> None:
        self._stopping.set()
        self._maker.join(60)
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._ready.get_nowait()
                if isinstance(item, str):
                    self._used.put(item)
        self._used.put(None)
        self._dropper.join(120)
        if self.failures:
            warnings.warn(f"test databases left behind: {self.failures}", stacklevel=1)


_supplies: dict[str, _CloneSupply] = {}


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A database with the jobledger schema applied, used as a template for clones."""
    import jobledger

    sweep_orphaned_databases()
    # Unique per fixture instance: conftests that import this fixture each get their own copy.
    name = new_database_name("tpl")
    _admin_execute(f'CREATE DATABASE "{name}"')
    store = jobledger.open_store(database_url(name), clock=lambda: 1_700_000_000_000, listen=False)
    store.close()
    _supplies[name] = _CloneSupply(name)
    try:
        yield name
    finally:
        _supplies.pop(name).close()
        _drop(name)


def fresh_database_url(template: str) -> Iterator[str]:
    """Yield the URL of a fresh clone of ``template``; drop it afterwards."""
    supply = _supplies.get(template)
    if supply is None:
        name = new_database_name()
        _admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        try:
            yield database_url(name)
        finally:
            _drop(name)
        return
    name = supply.take()
    try:
        yield database_url(name)
    finally:
        supply.give_back(name)


@pytest.fixture
def postgres_database_url(postgres_template: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test."""
    yield from fresh_database_url(postgres_template)
