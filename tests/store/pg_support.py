"""PostgreSQL databases for tests: one migrated template per test session, one clone per test.

Cloning a template (``CREATE DATABASE … TEMPLATE …``) is much faster than migrating a fresh
database for every test, and each test still gets a database nobody else touches. A background
thread keeps a couple of clones ready and drops used ones, so most tests never wait for
``CREATE DATABASE`` / ``DROP DATABASE``.

``JOBLEDGER_TEST_PG_ADMIN`` overrides the admin URL (default: the local test server).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import uuid
from collections.abc import Iterator

import pytest

ADMIN_URL = os.environ.get("JOBLEDGER_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/test")
CLONES_AHEAD = 2


def database_url(name: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{name}"


def _admin_execute(statement: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(statement)


def _drop(name: str) -> None:
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class _CloneSupply:
    """Clones of one template made ahead of need, and used ones dropped, on one thread."""

    def __init__(self, template: str) -> None:
        self.template = template
        self._ready: queue.Queue[str | BaseException] = queue.Queue(maxsize=CLONES_AHEAD)
        self._used: queue.Queue[str] = queue.Queue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-clone-supply", daemon=True)
        self._thread.start()

    def _clone(self) -> str:
        name = f"jobledger_t_{uuid.uuid4().hex[:16]}"
        _admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        return name

    def _run(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(queue.Empty):
                while True:  # drops first: they free disk and catalog entries
                    _drop(self._used.get_nowait())
            if self._ready.full():
                with contextlib.suppress(queue.Empty):
                    _drop(self._used.get(timeout=0.05))
                continue
            try:
                name: str | BaseException = self._clone()
            except BaseException as exc:  # reported to the test that takes it
                name = exc
            while not self._stopping.is_set():
                try:
                    self._ready.put(name, timeout=0.05)
                    break
                except queue.Full:
                    continue
            else:
                if isinstance(name, str):
                    _drop(name)

    def take(self) -> str:
        item = self._ready.get(timeout=120)
        if isinstance(item, BaseException):
            raise item
        return item

    def give_back(self, name: str) -> None:
        self._used.put(name)

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(30)
        leftovers: list[str] = []
        for source in (self._ready, self._used):
            with contextlib.suppress(queue.Empty):
                while True:
                    item = source.get_nowait()
                    if isinstance(item, str):
                        leftovers.append(item)
        for name in leftovers:
            _drop(name)


_supplies: dict[str, _CloneSupply] = {}


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A database with the jobledger schema applied, used as a template for clones."""
    import jobledger

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"jobledger_tpl_{worker}_{os.getpid()}"
    _drop(name)
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
        name = f"jobledger_t_{uuid.uuid4().hex[:16]}"
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
