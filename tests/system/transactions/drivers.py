"""One synchronous face over every kind of caller connection SPEC §8 accepts.

A test opens a transaction with ``driver.begin()`` and gets a :class:`Caller`: ``order(n)`` is
the application's own statement (a row in its ``orders`` table), ``enqueue(...)`` is
``app.enqueue(..., conn=<the native connection>)`` (``await app.enqueue_async`` for the async
drivers, run on the caller's own event loop; ``enqueue_many`` likewise), and
``commit()``/``rollback()`` end it the way that driver's users do. Each driver also makes the
application's ``orders`` table and counts it from a connection of its own.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any

import jobledger

SQLITE = ["sqlite3"]
POSTGRES = [
    "psycopg",
    "psycopg_async",
    "sqlalchemy_connection",
    "sqlalchemy_session",
    "sqlalchemy_async_session",
    "django",
]
ASYNC = {"psycopg_async", "sqlalchemy_async_session"}


class Caller:
    """An open transaction of the application's, on one driver."""

    def __init__(
        self,
        app: jobledger.App,
        native: Any,
        *,
        statement: Callable[[str], None],
        commit: Callable[[], None],
        rollback: Callable[[], None],
        close: Callable[[], None] = lambda: None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.app = app
        self.native = native
        self._statement = statement
        self._commit = commit
        self._rollback = rollback
        self._close = close
        self.loop = loop

    def order(self, number: int) -> None:
        self._statement(f"INSERT INTO orders (id) VALUES ({int(number)})")

    def statement(self, sql: str) -> None:
        """One statement of the application's own, in this transaction."""
        self._statement(sql)

    def enqueue(self, job_id: str = "confirm", **options: Any) -> jobledger.Occurrence:
        if self.loop is not None:
            return self.loop.run_until_complete(
                self.app.enqueue_async(job_id, conn=self.native, **options)
            )
        return self.app.enqueue(job_id, conn=self.native, **options)

    def enqueue_many(self, payloads: list[Any], **options: Any) -> list[jobledger.Occurrence]:
        if self.loop is not None:
            return self.loop.run_until_complete(
                self.app.enqueue_many_async("confirm", payloads, conn=self.native, **options)
            )
        return self.app.enqueue_many("confirm", payloads, conn=self.native, **options)

    def commit(self) -> None:
        self._commit()
        self.close()

    def rollback(self) -> None:
        self._rollback()
        self.close()

    def close(self) -> None:
        self._close()
        if self.loop is not None:
            self.loop.close()
            self.loop = None


class Driver:
    """Makes :class:`Caller` transactions for one driver on the app's store."""

    def __init__(self, name: str, app: jobledger.App, target: str) -> None:
        self.name = name
        self.app = app
        self.target = target
        self._engines: list[Any] = []
        self._raw: list[Any] = []

    # -- the application's own table, seen from outside any caller transaction -------------

    def _admin(self) -> Any:
        if self.name == "sqlite3":
            return sqlite3.connect(self.target, isolation_level=None, timeout=10)
        import psycopg

        return psycopg.connect(self.target, autocommit=True)

    def create_orders(self) -> None:
        admin = self._admin()
        try:
            admin.execute("CREATE TABLE orders (id integer PRIMARY KEY)")
        finally:
            admin.close()

    def orders(self) -> list[int]:
        admin = self._admin()
        try:
            return [row[0] for row in admin.execute("SELECT id FROM orders ORDER BY id")]
        finally:
            admin.close()

    def store_tables(self) -> list[str]:
        """The names of jobledger's tables in the store (its schema, on PostgreSQL)."""
        admin = self._admin()
        try:
            if self.name == "sqlite3":
                sql = (
                    "SELECT name FROM main.sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%' ORDER BY name"
                )
            else:
                sql = (
                    "SELECT table_name FROM information_schema.tables "
                    f"WHERE table_schema = '{self.schema}' ORDER BY table_name"
                )
            return [str(row[0]) for row in admin.execute(sql).fetchall()]
        finally:
            admin.close()

    @property
    def schema(self) -> str:
        """Where jobledger's tables are: ``main`` on SQLite, the store's schema on PostgreSQL."""
        return "main" if self.name == "sqlite3" else str(getattr(self.app.store, "schema"))

    # -- one open transaction -----------------------------------------------------------------

    def begin(self) -> Caller:
        return getattr(self, f"_begin_{self.name}")()

    def _begin_sqlite3(self) -> Caller:
        conn = self.app.connect()
        conn.execute("BEGIN IMMEDIATE")
        return Caller(
            self.app,
            conn,
            statement=lambda sql: conn.execute(sql) and None,
            commit=lambda: conn.execute("COMMIT") and None,
            rollback=lambda: conn.execute("ROLLBACK") and None,
            close=conn.close,
        )

    def _begin_psycopg(self) -> Caller:
        import psycopg

        conn = psycopg.connect(self.target)  # autocommit off: the transaction opens implicitly
        conn.execute("SELECT 1")
        return Caller(
            self.app,
            conn,
            statement=lambda sql: conn.execute(sql) and None,
            commit=conn.commit,
            rollback=conn.rollback,
            close=conn.close,
        )

    def _begin_psycopg_async(self) -> Caller:
        import psycopg

        loop = asyncio.new_event_loop()
        conn = loop.run_until_complete(psycopg.AsyncConnection.connect(self.target))
        transaction = conn.transaction()
        loop.run_until_complete(transaction.__aenter__())

        def statement(sql: str) -> None:
            loop.run_until_complete(conn.execute(sql))

        def end(error: BaseException | None) -> Callable[[], None]:
            def finish() -> None:
                kind = None if error is None else type(error)
                loop.run_until_complete(transaction.__aexit__(kind, error, None))

            return finish

        return Caller(
            self.app,
            conn,
            statement=statement,
            commit=end(None),
            rollback=end(_Rollback()),
            close=lambda: loop.run_until_complete(conn.close()),
            loop=loop,
        )

    def _engine(self, *, is_async: bool = False) -> Any:
        url = self.target.replace("postgresql://", "postgresql+psycopg://", 1)
        if is_async:
            from sqlalchemy.ext.asyncio import create_async_engine

            engine = create_async_engine(url, poolclass=_null_pool())
        else:
            from sqlalchemy import create_engine

            engine = create_engine(url, poolclass=_null_pool())
        self._engines.append(engine)
        return engine

    def _begin_sqlalchemy_connection(self) -> Caller:
        from sqlalchemy import text

        conn = self._engine().connect()
        transaction = conn.begin()
        return Caller(
            self.app,
            conn,
            statement=lambda sql: conn.execute(text(sql)) and None,
            commit=transaction.commit,
            rollback=transaction.rollback,
            close=conn.close,
        )

    def _begin_sqlalchemy_session(self) -> Caller:
        from sqlalchemy import text
        from sqlalchemy.orm import Session

        session = Session(self._engine())
        session.begin()  # no statement yet: the DBAPI transaction opens at jobledger's first
        return Caller(
            self.app,
            session,
            statement=lambda sql: session.execute(text(sql)) and None,
            commit=session.commit,
            rollback=session.rollback,
            close=session.close,
        )

    def _begin_sqlalchemy_async_session(self) -> Caller:
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import AsyncSession

        loop = asyncio.new_event_loop()
        engine = self._engine(is_async=True)
        session = AsyncSession(engine)
        loop.run_until_complete(session.begin())

        def statement(sql: str) -> None:
            loop.run_until_complete(session.execute(text(sql)))

        return Caller(
            self.app,
            session,
            statement=statement,
            commit=lambda: loop.run_until_complete(session.commit()),
            rollback=lambda: loop.run_until_complete(session.rollback()),
            close=lambda: loop.run_until_complete(session.close()),
            loop=loop,
        )

    def _begin_django(self) -> Caller:
        from django.db import connection, transaction

        use_database(self.target)
        atomic = transaction.atomic()
        atomic.__enter__()

        def statement(sql: str) -> None:
            with connection.cursor() as cursor:
                cursor.execute(sql)

        def end(error: BaseException | None) -> Callable[[], None]:
            def finish() -> None:
                atomic.__exit__(None if error is None else type(error), error, None)

            return finish

        return Caller(
            self.app,
            connection,
            statement=statement,
            commit=end(None),
            rollback=end(_Rollback()),
            close=connection.close,
        )

    def close(self) -> None:
        for engine in self._engines:
            result = engine.dispose()
            if asyncio.iscoroutine(result):
                asyncio.run(result)


class _Rollback(Exception):
    """What a test "raises" inside a transaction block to have it rolled back."""


def _null_pool() -> Any:
    from sqlalchemy.pool import NullPool

    return NullPool


def use_database(url: str) -> None:
    """Point Django's default database at ``url`` (configured once per process)."""
    from urllib.parse import urlsplit

    import django
    from django.conf import settings
    from django.db import connections

    parts = urlsplit(url)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "postgres",
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or 5432),
    }
    if not settings.configured:
        settings.configure(
            DATABASES={"default": database},
            USE_TZ=True,
            INSTALLED_APPS=["jobledger.contrib.django"],
        )
        django.setup()
        return
    current = connections["default"]
    if current.settings_dict["NAME"] != database["NAME"]:
        current.close()
        settings.DATABASES["default"].update(database)
        current.settings_dict.update(database)


def outside_transaction(driver: Driver) -> tuple[Any, Callable[[], None], bool]:
    """A native connection of ``driver``'s kind that is *not* inside a transaction, how to close
    it, and whether it is async."""
    name = driver.name
    if name == "sqlite3":
        conn = driver.app.connect()
        return conn, conn.close, False
    if name == "psycopg":
        import psycopg

        raw = psycopg.connect(driver.target, autocommit=True)
        return raw, raw.close, False
    if name == "psycopg_async":
        import psycopg

        aconn = asyncio.run(psycopg.AsyncConnection.connect(driver.target, autocommit=True))
        return aconn, lambda: None, True
    if name == "sqlalchemy_connection":
        sa = driver._engine().connect()
        return sa, sa.close, False
    if name == "sqlalchemy_session":
        from sqlalchemy.orm import Session

        session = Session(driver._engine())
        return session, session.close, False
    if name == "sqlalchemy_async_session":
        from sqlalchemy.ext.asyncio import AsyncSession

        return AsyncSession(driver._engine(is_async=True)), lambda: None, True
    from django.db import connection

    use_database(driver.target)
    return connection, connection.close, False
