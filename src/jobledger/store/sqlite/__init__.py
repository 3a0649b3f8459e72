"""The SQLite store (embedded default)."""

from .store import DEFAULT_BUSY_TIMEOUT_MS, SQLiteStore

__all__ = ["DEFAULT_BUSY_TIMEOUT_MS", "SQLiteStore"]
