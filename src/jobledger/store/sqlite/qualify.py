"""Every table name in the SQLite store's queries, qualified with ``main.`` (issue 30, item 3).

SQLite resolves an unqualified table name in ``temp`` before ``main``. On the store's own
connections nothing lives in ``temp``, but ``App.enqueue(..., conn=...)`` runs the same named
queries on a connection the caller owns, where ``CREATE TEMP TABLE events (…)`` is an ordinary
thing to have: unqualified, jobledger's ``occurrence_enqueued`` event would go into the
caller's temp table (gone at close), and a temp ``occurrences`` would be read as jobledger's.

The queries stay written once, unqualified, shared with PostgreSQL (``store/queries.sql``), and
:func:`qualify` rewrites each of jobledger's table names in a table position to ``main.<name>``
in the copy the SQLite store runs on a caller's connection (``CALLER_QUERIES``; its own
connections hold no temp object, and keep the plain text whose query plans the plan tests
pin). It works on SQL tokens (string literals, quoted identifiers and comments are left alone)
and leaves untouched a name that is qualified already, a column reference ``occurrences.id``
and a common table expression's own name.
``tests/store/sqlite/test_qualified_queries.py`` prepares every query on a connection whose ``temp``
holds a table named like each of jobledger's and fails on any read or write that reaches
``temp``, so a query added unqualified in a way this misses is caught.

What qualification cannot reach is a temp *trigger* on one of jobledger's tables (``CREATE
TEMP TRIGGER … ON main.occurrences``): it fires on jobledger's own writes. ``sqlite/caller.py``
refuses a caller's connection that has one.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

__all__ = ["qualify", "qualify_all"]

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<comment>--[^\n]*|/\*.*?\*/)
    | (?P<string>'(?:[^']|'')*')
    | (?P<quoted>"(?:[^"]|"")*"|\[[^\]]*\]|`(?:[^`]|``)*`)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_SCHEMA = "main."


def _tokens(sql: str) -> list[tuple[str, str]]:
    return [(match.lastgroup or "other", match.group()) for match in _TOKEN.finditer(sql)]


def _significant(tokens: list[tuple[str, str]], start: int, step: int) -> str:
    index = start + step
    while 0 <= index < len(tokens):
        kind, text = tokens[index]
        if kind not in ("space", "comment"):
            return text
        index += step
    return ""


def _cte_names(tokens: list[tuple[str, str]]) -> set[str]:
    """Names defined by ``name AS (`` or ``name (columns) AS (`` (common table expressions)."""
    words = [(i, text) for i, (kind, text) in enumerate(tokens) if kind not in ("space", "comment")]
    names: set[str] = set()
    for position, (_, text) in enumerate(words):
        after = [t.upper() for _, t in words[position + 1 : position + 3]]
        if after == ["AS", "("]:
            names.add(text.lower())
        elif after[:1] == ["("]:
            depth, cursor = 0, position + 1
            while cursor < len(words):
                depth += {"(": 1, ")": -1}.get(words[cursor][1], 0)
                cursor += 1
                if depth == 0:
                    break
            following = [t.upper() for _, t in words[cursor : cursor + 2]]
            if following == ["AS", "("]:
                names.add(text.lower())
    return names


def qualify(sql: str, tables: Collection[str]) -> str:
    """``sql`` with every name in ``tables`` that names a table (not a column ``t.c``, not a
    CTE, not already qualified) written ``main.<name>``."""
    tokens = _tokens(sql)
    own = {name.lower() for name in tables} - _cte_names(tokens)
    out: list[str] = []
    for index, (kind, text) in enumerate(tokens):
        if (
            kind == "word"
            and text.lower() in own
            and _significant(tokens, index, -1) != "."
            and _significant(tokens, index, 1) != "."
        ):
            out.append(_SCHEMA + text)
        else:
            out.append(text)
    return "".join(out)


def qualify_all(queries: Mapping[str, str], tables: Collection[str]) -> dict[str, str]:
    """:func:`qualify` applied to every named query."""
    return {name: qualify(sql, tables) for name, sql in queries.items()}
