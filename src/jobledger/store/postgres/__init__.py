"""The PostgreSQL store (psycopg 3 with a connection pool): many workers on many machines."""

from .store import DEFAULT_SCHEMA, PostgresStore

__all__ = ["DEFAULT_SCHEMA", "PostgresStore"]
