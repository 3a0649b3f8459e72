"""The caller's connection (SPEC §8): which driver it is, and the raw connection under it.

``App.enqueue(..., conn=...)`` writes into a transaction the caller owns. This module only
recognises what the caller passed — a psycopg 3 ``Connection``/``AsyncConnection``, a
SQLAlchemy ``Connection``/``Session``/``AsyncSession`` on psycopg, a Django ``connection``
(PostgreSQL backend), or a ``sqlite3.Connection`` — checks that the driver or framework says a
transaction is open, and hands the raw DBAPI connection to the store's dialect
(``postgres/caller.py``, ``sqlite/caller.py``), which does the rest. SQLAlchemy and Django are
never imported here: a connection of theirs is recognised by its class's module, and used
through its own public methods.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InvalidArgument

__all__ = ["CallerLink", "not_in_transaction", "resolve", "resolve_async"]

ACCEPTED = (
    "a psycopg 3 Connection or AsyncConnection, a SQLAlchemy Connection, Session or "
    "AsyncSession on psycopg, a Django connection inside transaction.atomic() (PostgreSQL), "
    "or a sqlite3.Connection on the store's own file"
)


@dataclass(frozen=True, slots=True)
class CallerLink:
    """A caller's connection, recognised.

    ``raw`` is the psycopg connection (``dialect="postgres"``; an ``AsyncConnection`` when
    ``is_async``) or the ``sqlite3.Connection``. ``declared_open`` is true when a framework
    (SQLAlchemy, Django) says its transaction is open although the driver may not have sent
    ``BEGIN`` yet: psycopg then opens it implicitly at jobledger's first statement.
    """

    dialect: Literal["postgres", "sqlite"]
    raw: Any
    driver: str
    is_async: bool = False
    declared_open: bool = False


def not_in_transaction(driver: str, hint: str) -> InvalidArgument:
    return InvalidArgument(
        f"conn must be inside an open transaction ({driver}: {hint}); jobledger never begins, "
        "commits or rolls back the caller's transaction",
        details={"field": "conn", "reason": "not_in_transaction", "driver": driver},
    )


def _unsupported(conn: object, why: str | None = None) -> InvalidArgument:
    kind = f"{type(conn).__module__}.{type(conn).__qualname__}"
    return InvalidArgument(
        f"conn must be {ACCEPTED}; got {kind}" + (f" ({why})" if why else ""),
        details={"field": "conn", "reason": "unsupported_connection", "type": kind},
    )


def _module(conn: object) -> str:
    return type(conn).__module__ or ""


def _is_psycopg(conn: object, name: str) -> bool:
    if not _module(conn).startswith("psycopg"):
        return False
    import psycopg

    return isinstance(conn, getattr(psycopg, name))


def _sqlalchemy_raw(sa_connection: Any, conn: object) -> Any:
    """The psycopg connection under a SQLAlchemy ``Connection``; refuses other drivers."""
    dialect = sa_connection.dialect
    if dialect.name != "postgresql" or dialect.driver != "psycopg":
        raise _unsupported(conn, f"SQLAlchemy dialect {dialect.name}+{dialect.driver}")
    return sa_connection.connection.driver_connection


def resolve(conn: object) -> CallerLink:
    """Recognise a synchronous caller connection (see the module docstring)."""
    if isinstance(conn, sqlite3.Connection):
        return CallerLink("sqlite", conn, "sqlite3.Connection")
    if _is_psycopg(conn, "Connection"):
        return CallerLink("postgres", conn, "psycopg Connection")
    if _is_psycopg(conn, "AsyncConnection"):
        raise InvalidArgument(
            "an async connection goes to app.enqueue_async(..., conn=...)",
            details={"field": "conn", "reason": "async_connection"},
        )
    module = _module(conn)
    if module.startswith("sqlalchemy"):
        return _resolve_sqlalchemy(conn)
    if module.startswith("django"):
        return _resolve_django(conn)
    raise _unsupported(conn)


def _resolve_sqlalchemy(conn: Any) -> CallerLink:
    name = type(conn).__name__
    if name in ("AsyncSession", "AsyncConnection"):
        raise InvalidArgument(
            f"a SQLAlchemy {name} goes to app.enqueue_async(..., conn=...)",
            details={"field": "conn", "reason": "async_connection"},
        )
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(conn, Session):
        if not conn.in_transaction():
            raise not_in_transaction("SQLAlchemy Session", "use `with session.begin():`")
        sa_connection = conn.connection()
        driver = "SQLAlchemy Session"
    elif isinstance(conn, Connection):
        if not conn.in_transaction():
            raise not_in_transaction(
                "SQLAlchemy Connection", "use `with engine.begin() as conn:` or conn.begin()"
            )
        sa_connection = conn
        driver = "SQLAlchemy Connection"
    else:
        raise _unsupported(conn)
    return CallerLink("postgres", _sqlalchemy_raw(sa_connection, conn), driver, declared_open=True)


def _resolve_django(conn: Any) -> CallerLink:
    # ``django.db.connection`` is a proxy to the current thread's DatabaseWrapper.
    vendor = getattr(conn, "vendor", None)
    if vendor is None or not hasattr(conn, "in_atomic_block"):
        raise _unsupported(conn)
    if vendor != "postgresql":
        raise _unsupported(conn, f"Django database vendor {vendor}; PostgreSQL only")
    if not conn.in_atomic_block:
        raise not_in_transaction("Django connection", "wrap the call in transaction.atomic()")
    if conn.needs_rollback:
        raise InvalidArgument(
            "the Django transaction is marked for rollback (an error inside atomic())",
            details={"field": "conn", "reason": "transaction_failed"},
        )
    conn.ensure_connection()
    raw = conn.connection
    if not _is_psycopg(raw, "Connection"):
        raise _unsupported(conn, "Django must use psycopg 3 (pip install psycopg)")
    return CallerLink("postgres", raw, "Django connection", declared_open=True)


_SQLALCHEMY_SYNC = frozenset({"Connection", "Session"})


def _synchronous() -> InvalidArgument:
    return InvalidArgument(
        "a synchronous connection goes to app.enqueue(..., conn=...)",
        details={"field": "conn", "reason": "sync_connection"},
    )


async def resolve_async(conn: object) -> CallerLink:
    """Recognise an asynchronous caller connection: a psycopg ``AsyncConnection`` or a
    SQLAlchemy ``AsyncSession``/``AsyncConnection`` on psycopg."""
    if _is_psycopg(conn, "AsyncConnection"):
        return CallerLink("postgres", conn, "psycopg AsyncConnection", is_async=True)
    module = _module(conn)
    if module.startswith("sqlalchemy") and type(conn).__name__ in _SQLALCHEMY_SYNC:
        raise _synchronous()
    if (
        isinstance(conn, sqlite3.Connection)
        or _is_psycopg(conn, "Connection")
        or (module.startswith("django") and hasattr(conn, "in_atomic_block"))
    ):
        raise _synchronous()
    if not module.startswith("sqlalchemy"):
        raise _unsupported(conn)
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(conn, AsyncSession):
        if not conn.in_transaction():
            raise not_in_transaction("SQLAlchemy AsyncSession", "use `async with session.begin():`")
        sa_connection = await conn.connection()
        driver = "SQLAlchemy AsyncSession"
    elif isinstance(conn, AsyncConnection):
        if not conn.in_transaction():
            raise not_in_transaction(
                "SQLAlchemy AsyncConnection", "use `async with engine.begin() as conn:`"
            )
        sa_connection = conn
        driver = "SQLAlchemy AsyncConnection"
    else:
        raise _unsupported(conn)
    raw_fairy = await sa_connection.get_raw_connection()
    dialect = sa_connection.sync_connection.dialect if sa_connection.sync_connection else None
    if dialect is None or dialect.name != "postgresql" or dialect.driver != "psycopg":
        raise _unsupported(conn, "SQLAlchemy async sessions must use postgresql+psycopg")
    return CallerLink(
        "postgres", raw_fairy.driver_connection, driver, is_async=True, declared_open=True
    )
