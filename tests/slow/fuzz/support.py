"""Shared pieces of the fuzz suite: budgets, the input counter, hostile values, store snapshots.

Budgets: the CI size runs by default (a few thousand generated inputs in all); with
``JOBLEDGER_FUZZ=long`` every test draws its long budget (≥ 100,000 inputs in all). Every
generated input passed to an entry point is counted (:func:`counted`); the total is printed at
the end of the session and, with ``JOBLEDGER_FUZZ_REPORT=path``, written there as JSON.

The rule every test enforces (:func:`call_coded`): an entry point returns, or raises a
:class:`jobledger.SchedulerError` whose ``code`` is a stable ``SCHEDULER_*`` string. Anything
else is an *uncoded exception* and fails the test. A failed call changes nothing: tests compare
a snapshot of every table before and after (:func:`snapshot`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import jobledger

LONG = os.environ.get("JOBLEDGER_FUZZ", "short") == "long"
# Survey mode: record uncoded exceptions (deduplicated by where they were raised) instead of
# failing at the first, to list every distinct one in one run.
SURVEY = os.environ.get("JOBLEDGER_FUZZ_SURVEY") == "1"
SURVEYED: dict[str, str] = {}
CODE = re.compile(r"^SCHEDULER_[A-Z0-9_]+$")
COUNTS: Counter[str] = Counter()
UNCODED: list[str] = []


def budget(short: int, long: int) -> settings:
    """Hypothesis settings for a test drawing ``short`` examples in CI, ``long`` in the long run."""
    scale = float(os.environ.get("JOBLEDGER_FUZZ_SCALE", "1"))
    return settings(
        max_examples=max(1, int((long if LONG else short) * scale)),
        deadline=None,
        derandomize=not LONG,  # CI runs are reproducible; the long run explores
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def counted(area: str, n: int = 1) -> None:
    COUNTS[area] += n


def call_coded(area: str, call: Callable[[], Any]) -> tuple[bool, Any]:
    """Run ``call``; ``(True, result)`` or ``(False, error)`` for a coded error. Any other
    exception is recorded as uncoded and re-raised."""
    counted(area)
    try:
        return True, call()
    except jobledger.SchedulerError as exc:
        if not isinstance(exc.code, str) or not CODE.match(exc.code):
            UNCODED.append(f"{area}: bad code {exc.code!r}")
            raise AssertionError(f"{area}: a SchedulerError with code {exc.code!r}") from exc
        json.dumps(exc.to_dict(), default=str)  # details are JSON-able
        return False, exc
    except Exception as exc:
        where = _origin(exc)
        if KNOWN.get((area.split(" (", maxsplit=1)[0], type(exc).__name__, where)):
            counted(f"known-bug:{area}")
            return False, exc
        UNCODED.append(f"{area}: {type(exc).__name__}: {exc} at {where}"[:400])
        if SURVEY:
            SURVEYED.setdefault(f"{area} {type(exc).__name__} at {where}", f"{exc}"[:200])
            return False, exc
        raise


def _origin(exc: BaseException) -> str:
    """``module:function`` of the innermost jobledger frame that raised ``exc``."""
    import traceback

    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "/jobledger/" in f.filename and not f.name.startswith("<")  # not <listcomp>
    ]
    if not frames:
        return "?"
    frame = frames[-1]
    return f"{frame.filename.split('/jobledger/', 1)[1]}:{frame.name}"


# Uncoded exceptions already reported as src bugs, each with a strict xfail test in
# ``test_found_bugs.py``: (area, exception type, origin) -> that test's name. The fuzz counts
# them instead of stopping on them, so it keeps looking for new ones. (Every one found so far
# is fixed; their tests are regression tests now.)
KNOWN: dict[tuple[str, str, str], str] = {}


# -- hostile values ------------------------------------------------------------------------

HOSTILE_TEXT = [
    "",
    " ",
    "x" * 300,
    "a'; DROP TABLE jobs; --",
    '" OR 1=1 --',
    "$.a[0]",
    "jobs",
    "\x00",
    "é\u2028\u0000\ud7ff",
    "../../etc/passwd",
    "%s %(x)s {0} :name ?",
    "NULL",
    "🦄" * 10,
    "\n",
    "a" * 129,
    "a" * 257,
    # Text that is not Unicode scalar values (chr(): linters cannot tell surrogates apart):
    chr(0xD800),  # a lone high surrogate
    "a" + chr(0xDFFF) + "b",  # a lone low one
    chr(0xDE00) + chr(0xD83D),  # low before high: two lone ones, not a pair
    chr(0xD83D) + chr(0xDE00),  # a pair: the astral character U+1F600, which is fine
    b"bad\xffid".decode("utf-8", "surrogateescape"),  # argv's invalid byte, as Python reads it
]


def invalid_bytes() -> st.SearchStrategy[str]:
    """Text as Python decodes arbitrary bytes from argv, file names or the environment
    (``surrogateescape``): every byte that is not UTF-8 becomes a lone U+DC80–U+DCFF."""
    return st.binary(min_size=1, max_size=16).map(
        lambda raw: raw.decode("utf-8", "surrogateescape")
    )


def text() -> st.SearchStrategy[str]:
    """Any text, lone surrogates included: an identifier holding one is refused, a JSON value
    takes it as JSON.stringify does (``test_json_text_fuzz.py``)."""
    return st.one_of(
        st.sampled_from(HOSTILE_TEXT),
        st.text(max_size=40),  # no surrogates: Hypothesis leaves category Cs out by default
        st.text(st.characters(exclude_categories=()), max_size=12),  # … here they may appear
        st.text(st.characters(categories=["Cs"]), min_size=1, max_size=4),  # … here they do
        invalid_bytes(),
        st.from_regex(r"[a-z][a-z0-9_.:-]{0,30}", fullmatch=True),
    )


def deeply_nested() -> st.SearchStrategy[Any]:
    """Arrays and objects nested from just under the 64-level limit to far past the depth at
    which a recursive encoder or parser runs out of stack."""

    def wrap(depth_and_object: tuple[int, bool]) -> Any:
        depth, as_object = depth_and_object
        value: Any = 1
        for _ in range(depth):
            value = {"k": value} if as_object else [value]
        return value

    depths = st.one_of(st.integers(62, 70), st.sampled_from([1_000, 5_000, 20_000]))
    return st.tuples(depths, st.booleans()).map(wrap)


def integers() -> st.SearchStrategy[int]:
    return st.one_of(
        st.integers(min_value=-3, max_value=20),
        st.sampled_from(
            [0, 1, 2**31, 2**53 - 1, 2**53, 2**63, -(2**63), 10**30, 1_700_000_000_000]
        ),
        st.integers(),
    )


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=True, allow_infinity=True),
    text(),
)
json_values = st.one_of(
    st.recursive(
        json_leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(text(), inner, max_size=4)
        ),
        max_leaves=12,
    ),
    deeply_nested(),
)


def anything() -> st.SearchStrategy[Any]:
    """Any argument a caller could pass: right-looking, wrong-typed or hostile."""
    return st.one_of(
        st.none(),
        st.booleans(),
        integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        text(),
        json_values,
        st.binary(max_size=8),
        st.lists(text(), max_size=3),
        st.builds(object),
        st.just(jobledger.UNSET),
    )


# -- snapshots -------------------------------------------------------------------------------


_WATCHERS: dict[str, sqlite3.Connection] = {}


def sqlite_snapshot(path: str) -> str:
    """Which commit the file is at: ``PRAGMA data_version`` on a connection of our own, which
    changes exactly when another connection commits (O(1), so a long run stays linear)."""
    conn = _WATCHERS.get(path)
    if conn is None:
        conn = _WATCHERS[path] = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, check_same_thread=False
        )
    return f"data_version={conn.execute('PRAGMA data_version').fetchone()[0]}"


def sqlite_contents(path: str) -> str:
    """A digest of every row of every table (for small stores, or a second opinion)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        digest = hashlib.sha256()
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY 1'):
                digest.update(repr((table, row)).encode())
        return digest.hexdigest()
    finally:
        conn.close()


def postgres_snapshot(url: str, schema: str = "jobledger") -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        digest = hashlib.sha256()
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)
            )
        ]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{schema}"."{table}" ORDER BY 1'):
                digest.update(repr((table, row)).encode())
        return digest.hexdigest()


def snapshot(target: str) -> str:
    if target.startswith("postgresql://"):
        return postgres_snapshot(target)
    return sqlite_snapshot(target)
