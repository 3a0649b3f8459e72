"""Fixtures for the `jobledger` command's tests.

``cli`` runs the real command line through ``main(argv)`` with its streams, environment and sleep
injected, against ``db`` — a fresh store on each backend (``backend`` is parametrised like the
store conformance suite: a SQLite file, and a PostgreSQL database cloned from a migrated
template). ``sqlite_cli`` is the same runner pinned to SQLite, for behaviour that is about files.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger.cli import main

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


class TtyInput(io.StringIO):
    """A stdin that says it is a terminal (for confirmation prompts)."""

    def isatty(self) -> bool:
        return True


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error: ")]

    def assert_one_line_error(self, code: str, exit_code: int) -> None:
        """Exactly one coded error line, maybe one hint, no traceback, the right status."""
        assert self.code == exit_code, (self.code, self.out, self.err)
        # A confirmation prompt is answered on its own line in a terminal (the echo); here the
        # answer is not echoed, so look after the prompt.
        lines = self.err.rsplit("[y/N] ", 1)[-1].strip().splitlines()
        assert lines, self.err
        assert lines[0].startswith(f"error: {code}: "), self.err
        assert all(line.startswith("hint: ") for line in lines[1:]), self.err
        assert len(lines) <= 3, self.err
        assert "Traceback" not in self.err


def no_sleep(seconds: float) -> None:
    return None


class Cli:
    """``cli("job", "list")`` → :class:`Result`; ``--db`` is added unless ``db=None``."""

    def __init__(self, target: str | None, env: dict[str, str]) -> None:
        self.target = target
        self.env = env

    def __call__(
        self,
        *argv: str,
        stdin: io.StringIO | None = None,
        sleep: Callable[[float], None] = no_sleep,
        db: str | None | bool = True,
        env: dict[str, str] | None = None,
    ) -> Result:
        out, err = io.StringIO(), io.StringIO()
        prefix: list[str] = []
        if db is True and self.target is not None:
            prefix = ["--db", self.target]
        elif isinstance(db, str):
            prefix = ["--db", db]
        code = main(
            [*prefix, *argv],
            env=env if env is not None else self.env,
            stdin=stdin if stdin is not None else io.StringIO(""),
            stdout=out,
            stderr=err,
            sleep=sleep,
        )
        return Result(code, out.getvalue(), err.getvalue())

    def ok(self, *argv: str, **options: Any) -> Result:
        result = self(*argv, **options)
        assert result.code == 0, (result.code, result.out, result.err)
        return result

    def json(self, *argv: str, **options: Any) -> Any:
        return self.ok("--json", *argv, **options).json

    def open(self, clock: jobledger.Clock | None = None) -> jobledger.Store:
        """The store under test; ``clock``: write on that timeline (e.g. a worker app's)."""
        assert self.target is not None
        timeline: dict[str, Any] = {} if clock is None else {"clock": clock}
        return jobledger.open_store(
            self.target, migrate=False, **_listen_off(self.target), **timeline
        )


def _listen_off(target: str) -> dict[str, Any]:
    return {"listen": False} if target.startswith("postgresql://") else {}


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """An environment with a private home and data directory and no $JOBLEDGER_DB."""
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "XDG_DATA_HOME": str(tmp_path / "xdg"), "NO_COLOR": "1"}


@pytest.fixture
def db(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A store at the newest schema, empty: a SQLite file or a fresh PostgreSQL database."""
    if backend == "sqlite":
        target = str(tmp_path / "store" / "jobs.sqlite3")
        jobledger.open_store(target).close()
        return target
    return str(request.getfixturevalue("postgres_database_url"))


@pytest.fixture
def cli(db: str, clean_env: dict[str, str]) -> Cli:
    return Cli(db, clean_env)


@pytest.fixture
def sqlite_cli(tmp_path: Path, clean_env: dict[str, str]) -> Cli:
    target = str(tmp_path / "store" / "jobs.sqlite3")
    jobledger.open_store(target).close()
    return Cli(target, clean_env)


def make_dead_letter(store: jobledger.Store, job_id: str, key: str) -> jobledger.Occurrence:
    """An occurrence of ``job_id`` (a max_attempts=1 job) that failed for good."""
    occurrence = store.enqueue_occurrence(job_id=job_id, scheduled_for=store.now(), trigger_key=key)
    claimed = store.claim_occurrence(
        occurrence_id=occurrence.id, owner_id="test-worker", lease_ms=60_000
    )
    assert claimed is not None
    return store.settle(
        occurrence_id=claimed.id,
        owner_id="test-worker",
        fence=claimed.fence,
        outcome="failed",
        error={"code": "boom", "message": "it broke"},
        retryable=False,
    )
