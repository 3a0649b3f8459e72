"""Fixtures shared by every test directory."""

from __future__ import annotations

import pytest

from jobledger.testing import FakeClock

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000_000)


@pytest.fixture
def authority() -> dict:
    return {"principal": {"type": "user", "id": "tester"}}


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
