"""Secrets in errors, reprs and logs.

* A PostgreSQL password — in the URL's user info, percent-encoded, containing ``@`` or ``/``, or
  as a ``password=`` parameter — never appears in a store's ``target`` or ``repr``, in an error's
  message, details, ``repr`` or formatted traceback (its whole cause chain), in any log record,
  or in the ``jobledger`` command's output (even with ``--debug``).
* Payload contents (and results) never appear in log lines, whatever happens to the attempt.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
import traceback
from datetime import timedelta
from typing import Any

import pytest

import jobledger
from jobledger.cli import main
from jobledger.logs import JsonFormatter

SECRET = "S3cr3t-pw-7f3a"
MARKER = "PAYLOAD-MARKER-91c2"


def _urls(host_port: str, database: str) -> list[str]:
    return [
        f"postgresql://postgres:{SECRET}@{host_port}/{database}",
        f"postgresql://postgres:{SECRET}%40x%2Fy@{host_port}/{database}",
        f"postgresql://postgres:{SECRET}@x/y@{host_port}/{database}",
        f"postgresql://postgres@{host_port}/{database}?password={SECRET}",
        f"postgresql://postgres@{host_port}/{database}?sslmode=disable&pass%77ord={SECRET}",
        f"postgres://postgres:{SECRET}@{host_port}/{database}?connect_timeout=2",
    ]


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception as exc:  # a formatter failure must not break the code that logged
            self.lines.append(f"FORMAT FAILED {exc!r}: {record.getMessage()} {record.__dict__}")


@pytest.fixture
def logs() -> Any:
    capture = Capture()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    jl = logging.getLogger("jobledger")
    jl_previous = (jl.level, jl.propagate)
    jl.setLevel(logging.DEBUG)
    jl.propagate = True
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        root.setLevel(previous)
        jl.setLevel(jl_previous[0])
        jl.propagate = jl_previous[1]


def _error_text(exc: BaseException) -> str:
    parts = ["".join(traceback.format_exception(exc)), repr(exc), str(exc)]
    if isinstance(exc, jobledger.SchedulerError):
        parts.append(json.dumps(exc.to_dict(), default=str))
    return "\n".join(parts)


@pytest.mark.parametrize("index", range(6))
def test_a_password_never_shows_in_connection_errors(index, logs):
    url = _urls("127.0.0.1:1", "nowhere")[index]
    with pytest.raises(jobledger.SchedulerError) as refused:
        jobledger.open_store(url, connect_timeout=2, listen=False)
    assert SECRET not in _error_text(refused.value)
    assert not [line for line in logs.lines if SECRET in line]


@pytest.mark.postgres
@pytest.mark.parametrize("index", [0, 3, 4])
def test_a_password_never_shows_in_an_open_store(postgres_database_url, index, logs):
    host_port, database = postgres_database_url.split("@", 1)[1].split("/", 1)
    url = _urls(host_port, database)[index]  # the test server trusts; the password is ignored
    with jobledger.open_store(url, listen=True) as store:
        store.work_signal.watch()  # the LISTEN connection too, as a worker starts it
        assert store.listener is not None and store.listener.connected.wait(10)
        assert SECRET not in store.target
        assert SECRET not in repr(store)
        store.create_job(id="j", kind="work", authority={"principal": {"type": "u", "id": "a"}})
        with pytest.raises(jobledger.SchedulerError) as refused:
            store.create_job(id="j", kind="work", authority={"principal": {"type": "u", "id": "a"}})
        assert SECRET not in _error_text(refused.value)
    assert not [line for line in logs.lines if SECRET in line]


@pytest.mark.parametrize("debug", [False, True])
def test_a_password_never_shows_in_the_command_output(debug):
    for url in _urls("127.0.0.1:1", "nowhere"):
        out, err = io.StringIO(), io.StringIO()
        argv = ["--db", url, *(["--debug"] if debug else []), "db", "info"]
        code = main(argv, env={}, stdin=io.StringIO(""), stdout=out, stderr=err)
        assert code != 0
        assert SECRET not in out.getvalue() + err.getvalue(), (url, err.getvalue())


def test_payloads_never_show_in_log_lines(tmp_path, logs):
    """Drives every logged path of an attempt — an authorizer that fails (logged with its
    traceback), a lease lost under a running handler — next to handlers that succeed with the
    payload as their result, fail, fail for good and time out, all carrying a marker."""

    def authorize(request: jobledger.AuthorizationRequest) -> jobledger.Decision:
        if request.job.kind == "authfail":
            raise RuntimeError("the authorization service is down")
        return jobledger.Decision(allowed=True)

    app = jobledger.App(
        tmp_path / "db" / "s.sqlite3",
        authorize=authorize,
        retry_policy=jobledger.FixedBackoff(timedelta(0)),
    )
    started = threading.Event()

    @app.handler("ok")
    def ok(ctx: jobledger.JobContext) -> Any:
        return {"echo": ctx.payload}

    @app.handler("boom")
    def boom(ctx: jobledger.JobContext) -> None:
        raise RuntimeError("the handler failed")

    @app.handler("fatal")
    def fatal(ctx: jobledger.JobContext) -> None:
        raise jobledger.Fail("no", code="fatal", details={"why": "rules"})

    @app.handler("slow", timeout=timedelta(milliseconds=50))
    def slow(ctx: jobledger.JobContext) -> None:
        time.sleep(0.3)

    @app.handler("authfail")
    def never(ctx: jobledger.JobContext) -> None:
        raise AssertionError("not authorized: never run")

    @app.handler("cancelled")
    def cancelled(ctx: jobledger.JobContext) -> None:
        started.set()
        ctx.cancel_event.wait(10)  # cancelled under it: the lost lease is logged

    kinds = ("ok", "boom", "fatal", "slow", "authfail", "cancelled")
    with app:
        victim = None
        for kind in kinds:
            app.ensure_job(kind, kind, max_attempts=2, payload={"secret": MARKER})
            occurrence = app.enqueue(
                kind, payload={"secret": MARKER, "card": "4111 1111 1111 1111"}
            )
            if kind == "cancelled":
                victim = occurrence
        assert victim is not None
        worker = app.worker(
            concurrency=3,
            poll_interval=timedelta(milliseconds=20),
            planner=False,
            lease=timedelta(seconds=3),
        )
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        try:
            assert started.wait(20)
            app.cancel(victim.id, reason=f"stop {MARKER}")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                counts = [(c.kind, c.status) for c in app.store.count_occurrences()]
                if len(counts) == len(kinds) and all(
                    status in ("succeeded", "dead_letter", "cancelled") for _, status in counts
                ):
                    break
                time.sleep(0.05)
            time.sleep(1.5)  # the keeper's next renewal finds the cancelled lease lost
        finally:
            worker.stop()
            thread.join(30)
    text = "\n".join(logs.lines)
    assert "the authorizer failed" in text and "lost the lease" in text, text[:2000]
    leaked = [line for line in logs.lines if MARKER in line or "4111 1111" in line]
    assert leaked == []
