"""Loading the named SQL queries and the migration checksum rule (shared by every dialect)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

__all__ = ["SHARED_QUERIES", "load_queries", "load_store_queries", "migration_checksum"]

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_COMMENT_LINE = re.compile(r"^\s*--.*$\n?", re.MULTILINE)
_NAMED_PARAMETER = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")
SHARED_QUERIES = Path(__file__).with_name("queries.sql")


def load_queries(path: Path) -> dict[str, str]:
    """Read a ``queries.sql`` file made of ``-- name: <query>`` blocks into ``{name: sql}``.

    Comment lines inside a block are dropped (they would travel to the server with every
    execution, and a ``%`` in one would confuse psycopg's placeholders).
    """
    text = path.read_text(encoding="utf-8")
    parts = _NAME_LINE.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"duplicate query name {name!r} in {path}")
        queries[name] = _COMMENT_LINE.sub("", body).strip().rstrip(";")
    return queries


def load_store_queries(dialect_file: Path, *, pyformat: bool) -> dict[str, str]:
    """The shared queries (``store/queries.sql``) plus one dialect's own blocks.

    ``pyformat`` rewrites the shared ``:name`` placeholders to psycopg's ``%(name)s``. A name
    may live in the shared file or in the dialect file, never both.
    """
    shared = load_queries(SHARED_QUERIES)
    if pyformat:
        shared = {name: _NAMED_PARAMETER.sub(r"%(\1)s", sql) for name, sql in shared.items()}
    own = load_queries(dialect_file)
    both = sorted(shared.keys() & own.keys())
    if both:
        raise ValueError(f"queries defined both shared and in {dialect_file}: {both}")
    return {**shared, **own}


def migration_checksum(ddl: str) -> str:
    """A migration's checksum, as the reference computes it: SHA-256 of the trimmed DDL text
    with CRLF line ends turned into LF. The same rule for every dialect."""
    return hashlib.sha256(ddl.strip().replace("\r\n", "\n").encode("utf-8")).hexdigest()
