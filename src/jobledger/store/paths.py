"""Where a store lives when nobody says: the embedded default, ``$JOBLEDGER_DB`` overriding it.

The ``jobledger`` command and example apps use the same rule, so ``jobledger stats`` looks at
the store a worker started with no arguments writes to.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["DB_ENV", "default_store_target", "default_target", "resolve_target"]

DB_ENV = "JOBLEDGER_DB"
FILE_NAME = "jobledger.sqlite3"


def _data_home(env: Mapping[str, str], platform: str) -> Path:
    """The user's data directory: ``$XDG_DATA_HOME`` (if absolute), else the platform's."""
    xdg = env.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg)
    home = Path(env.get("HOME") or Path.home())
    if platform == "darwin":
        return home / "Library" / "Application Support"
    if platform == "win32":
        appdata = env.get("LOCALAPPDATA") or env.get("APPDATA")
        if appdata:
            return Path(appdata)
    return home / ".local" / "share"


def default_target(env: Mapping[str, str] | None = None, platform: str | None = None) -> str:
    """The embedded default store: ``<data dir>/jobledger/jobledger.sqlite3``.

    ``<data dir>`` is ``$XDG_DATA_HOME`` when set, else ``~/.local/share`` (Linux and other
    Unixes), ``~/Library/Application Support`` (macOS) or ``%LOCALAPPDATA%`` (Windows). It does
    not read ``$JOBLEDGER_DB``: see :func:`resolve_target`.
    """
    values = os.environ if env is None else env
    where = _data_home(values, sys.platform if platform is None else platform)
    return str(where / "jobledger" / FILE_NAME)


def resolve_target(given: str | None, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The store to use and where that choice came from: ``--db``, ``$JOBLEDGER_DB`` or the
    default (an empty ``$JOBLEDGER_DB`` counts as unset)."""
    values = os.environ if env is None else env
    if given is not None:
        return given, "--db"
    from_env = values.get(DB_ENV, "").strip()
    if from_env:
        return from_env, f"${DB_ENV}"
    return default_target(values), "default"


def default_store_target() -> str:
    """``$JOBLEDGER_DB`` if set (and not empty), else :func:`default_target`."""
    return resolve_target(None)[0]
