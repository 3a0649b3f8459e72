"""Fixtures and rules shared by every tier (``docs/architecture.md``, "Tests").

``tests/`` is grouped by what a test needs, one folder per tier:

- ``unit/``   — no file, thread, process or server: the rules on their own;
- ``store/``  — the conformance suite of the two stores (and their dialect-specific tests);
- ``system/`` — App, runtime, worker, CLI and dashboard on a temporary store;
- ``slow/``   — acceptance runs, chaos, fault injection, the browser, many processes.

Each test gets its tier's marker (``-m unit``, ``-m "store and not postgres"``, …) and, unless
it sets its own ``@pytest.mark.timeout`` or the run gives ``--timeout``, its tier's timeout: a
hung test fails with a traceback after that many seconds instead of hiding behind a suite-wide
bound.

``backend`` (``sqlite`` / ``postgres``) is written here once; ``any_target`` is what
``open_store`` and ``App`` take for it (a fresh SQLite file, or a fresh PostgreSQL database cloned
from a migrated template, see ``store/pg_support.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from jobledger.testing import FakeClock
from tests.store.pg_support import postgres_database_url, postgres_template

__all__ = ["postgres_database_url", "postgres_template"]  # fixtures used by the postgres param

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}

# Seconds a test of each tier may take before it fails (pytest-timeout's ``timeout`` marker; a
# test's own marker wins). Chosen from ``--durations`` on this 2-core machine while it ran five
# other suites (load average 7-9), see docs/architecture.md: the slowest unit test took 11 s (a
# differential check of cron against a brute-force oracle), the slowest store test 43 s (the
# stateful model on PostgreSQL; waiting for a database clone adds up to 20 s of setup), the
# slowest system test without a marker of its own 11 s on SQLite. Slow runs have minutes; the
# longest of them (the long chaos and flow-kill runs) set their own 900 s.
TIER_TIMEOUTS = {"unit": 30, "store": 120, "system": 120, "slow": 600}
TESTS = Path(__file__).parent

# Hypothesis's per-example deadline (200 ms) only measures how busy the machine is (a backoff
# property failed at 265 ms in the fast tier while five other suites ran); a slow or hung test is
# caught by its tier's timeout instead. A test may still set its own deadline.
settings.register_profile("jobledger", deadline=None)
settings.load_profile("jobledger")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000_000)


@pytest.fixture
def authority() -> dict:
    return {"principal": {"type": "user", "id": "tester"}}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """Run the test once per store: a SQLite file and a PostgreSQL database."""
    return str(request.param)


@pytest.fixture
def any_target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """What ``open_store`` / ``App`` take for this backend: a file path or a fresh database URL."""
    if backend == "sqlite":
        return str(tmp_path / "db" / "jobledger.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))


def tier_of(path: Path) -> str | None:
    """The tier folder ``path`` sits in, or None when it sits in none."""
    try:
        parts = path.relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIER_TIMEOUTS else None


@pytest.fixture
def _outside_every_tier(request: pytest.FixtureRequest) -> None:
    where = Path(request.node.path).relative_to(TESTS.parent)
    pytest.fail(
        f"{where} is in no tier folder: move it to tests/unit, tests/store, tests/system or "
        "tests/slow (docs/architecture.md, 'Where a new test goes')",
        pytrace=False,
    )


@pytest.hookimpl(tryfirst=True)  # before -m selects on the markers given here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # An explicit --timeout (e.g. --timeout 0 for JOBLEDGER_FUZZ=long) replaces the tier bounds.
    tier_timeouts = config.getoption("timeout", None) is None
    # Long acceptance runs (minutes each) are opt-in: CI runs their short versions.
    long_runs = os.environ.get("JOBLEDGER_LONG") == "1"
    for item in items:
        if not long_runs and item.get_closest_marker("long") is not None:
            item.add_marker(pytest.mark.skip(reason="long run: set JOBLEDGER_LONG=1"))
        tier = tier_of(Path(item.path))
        if tier is None:
            item.fixturenames.insert(0, "_outside_every_tier")
            continue
        item.add_marker(getattr(pytest.mark, tier))
        if tier_timeouts and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIER_TIMEOUTS[tier]))


_UNREACHABLE = pytest.StashKey[str]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """When PostgreSQL tests are selected and the server does not answer (after retries), stop
    the run with one line instead of erroring every such test in setup with its tracebacks."""
    if session.config.option.collectonly:
        return
    if not any(item.get_closest_marker("postgres") for item in session.items):
        return
    from tests.store.pg_support import postgres_unreachable

    reason = postgres_unreachable()
    if reason is None:
        return
    if not hasattr(session.config, "workerinput"):
        pytest.exit(reason, returncode=pytest.ExitCode.INTERRUPTED)
    # An xdist worker: pytest.exit here would only crash it (and xdist restarts it). Run no
    # test, and hand the reason to the controller, which stops the session with it.
    session.config.stash[_UNREACHABLE] = reason
    session.shouldstop = reason


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> bool | None:
    return True if _UNREACHABLE in item.config.stash else None
