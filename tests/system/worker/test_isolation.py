"""``isolation="process"``: each attempt's handler runs in a child process (forkserver/spawn),
killed when its attempt ends without it — at the time limit, when the lease is given back — so a
handler deaf to cancellation cannot keep a slot. The parent keeps the lease and settles; what the
child raises or returns settles as it would in-process. Time limits fire from a watchdog on a fake
monotonic clock, checked by hand; leases renew only on ``ManualHeartbeat.tick()``."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger.engine.watchdog import Watchdog
from jobledger.testing import run_until_idle

from . import isolated_handlers as handlers
from .conftest import add_job, stop_worker

WAIT_S = 20.0  # a child's first start (the forkserver's) takes a moment on a busy machine


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wait_until(condition: Callable[[], bool], what: str) -> None:
    pause = threading.Event()
    for _ in range(int(WAIT_S / 0.01)):
        if condition():
            return
        pause.wait(0.01)
    raise AssertionError(f"never happened: {what}")


def seen(folder: Path, occurrence_id: str) -> dict[str, Any] | None:
    path = folder / f"{occurrence_id}.json"
    return json.loads(path.read_text()) if path.exists() else None


def gone(pid: int) -> bool:
    """The process ended (a zombie waiting to be reaped counts: it runs nothing)."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return True
    except OSError:
        return False
    return state in ("Z", "X")


def test_an_isolated_handler_runs_in_a_child_and_returns_json(store, clock, make_runtime, tmp_path):
    runtime = make_runtime()
    runtime.register_handler("iso", handlers.echo, isolation="process")
    occurrence = add_job(store, kind="iso", payload={"dir": str(tmp_path), "n": 1}, clock=clock)
    result = runtime.run_next()
    assert result.status == "succeeded"
    assert result.result["payload"] == {"dir": str(tmp_path), "n": 1}
    assert result.result["pid"] != os.getpid()
    child = seen(tmp_path, occurrence.id)
    assert child is not None
    assert (child["attempt"], child["fence"], child["jobKind"]) == (1, 1, "iso")
    assert (child["isolated"], child["cancelled"], child["parents"]) == (True, False, {})
    assert store.get_occurrence(occurrence.id).result == result.result


def test_an_async_handler_runs_in_its_child_too(store, clock, make_runtime):
    runtime = make_runtime()
    runtime.register_handler("iso", handlers.async_echo, isolation="process")
    add_job(store, kind="iso", payload={"n": 7}, clock=clock)
    result = runtime.run_next()
    assert (result.status, result.result) == ("succeeded", "async 7")


@pytest.mark.parametrize(
    "handler",
    [
        handlers.retry_later,
        handlers.fail,
        handlers.snooze,
        handlers.raise_unpicklable,
        handlers.not_json,
    ],
    ids=lambda h: h.__name__,
)
def test_what_the_child_raises_settles_as_it_would_in_process(store, clock, make_runtime, handler):
    outcomes = []
    for isolation in ("thread", "process"):
        runtime = make_runtime(owner_id=f"w-{isolation}")
        runtime.register_handler("k", handler, isolation=isolation)
        occurrence = add_job(store, f"job-{isolation}", kind="k", clock=clock)
        runtime.run_next()
        after = store.get_occurrence(occurrence.id)
        error = dict(after.last_error or {})
        if isolation == "process" and handler is handlers.not_json:
            # Checked in the child: the same code, final; the reason is the child's.
            assert error["name"] == "IsolatedHandlerError"
            error = {"code": error["code"]}
        outcomes.append((after.status, after.available_at, after.attempt, error))
        runtime.close()
    thread, process = outcomes
    if handler is handlers.not_json:
        thread = (*thread[:3], {"code": thread[3]["code"]})
    assert process == thread


def test_a_child_that_dies_without_answering_is_a_retryable_crash(store, clock, make_runtime):
    runtime = make_runtime()
    runtime.register_handler("crash", handlers.crash, isolation="process")
    runtime.register_handler("exit", handlers.system_exit, isolation="process")
    crashed = add_job(store, "job-crash", kind="crash", clock=clock)
    exited = add_job(store, "job-exit", kind="exit", clock=clock)
    runtime.run_next(kinds={"crash"})
    after = store.get_occurrence(crashed.id)
    assert after.status == "retry_wait"
    assert after.last_error["code"] == "SCHEDULER_RUNTIME_HANDLER_CRASHED"
    assert after.last_error["details"] == {"exitCode": 3}
    # SystemExit in the child is an answer like any exception, not the end of the parent's slot.
    runtime.run_next(kinds={"exit"})
    after = store.get_occurrence(exited.id)
    assert (after.status, after.last_error["name"]) == ("retry_wait", "SystemExit")


def test_the_child_is_killed_at_the_time_limit_and_the_attempt_settled_as_a_timeout(
    store, clock, make_runtime, tmp_path
):
    monotonic = FakeMonotonic()
    watchdog = Watchdog(monotonic=monotonic, thread=False)
    runtime = make_runtime(watchdog=watchdog)
    runtime.register_handler(
        "hang", handlers.hang, timeout=timedelta(seconds=2), isolation="process"
    )
    occurrence = add_job(store, kind="hang", payload={"dir": str(tmp_path)}, clock=clock)
    box: list[jobledger.RunResult] = []
    thread = threading.Thread(target=lambda: box.append(runtime.run_next()), daemon=True)
    thread.start()
    wait_until(lambda: seen(tmp_path, occurrence.id) is not None, "the handler to start")
    child = seen(tmp_path, occurrence.id)
    assert child is not None
    monotonic.now += 2
    assert watchdog.check() == 1
    thread.join(WAIT_S)
    assert not thread.is_alive(), "the slot waited for the hung handler"
    [result] = box
    assert (result.status, result.timed_out) == ("retry_wait", True)
    after = store.get_occurrence(occurrence.id)
    assert after.last_error["code"] == "SCHEDULER_RUNTIME_TIMEOUT"
    assert after.lease_owner is None
    assert runtime.keeper.tracked == 0
    wait_until(lambda: gone(child["pid"]), "the child to be killed")


def test_giving_the_lease_back_kills_the_child(store, clock, make_runtime, tmp_path):
    runtime = make_runtime()
    runtime.register_handler("hang", handlers.hang, isolation="process")
    occurrence = add_job(store, kind="hang", payload={"dir": str(tmp_path)}, clock=clock)
    box: list[jobledger.RunResult] = []
    thread = threading.Thread(target=lambda: box.append(runtime.run_next()), daemon=True)
    thread.start()
    wait_until(lambda: seen(tmp_path, occurrence.id) is not None, "the handler to start")
    [released] = runtime.abandon_all()
    assert (released.id, released.status, released.attempt) == (occurrence.id, "retry_wait", 0)
    thread.join(WAIT_S)
    assert not thread.is_alive()
    [result] = box
    assert result.released
    child = seen(tmp_path, occurrence.id)
    assert child is not None
    wait_until(lambda: gone(child["pid"]), "the child to be killed")


def test_a_timed_out_isolated_handler_leaves_no_slot_stuck(
    store, clock, make_runtime, driver, tmp_path
):
    monotonic = FakeMonotonic()
    watchdog = Watchdog(monotonic=monotonic, thread=False)
    ran: list[str] = []
    runtime = make_runtime(
        {"echo": lambda ctx: ran.append(ctx.occurrence_id)},
        watchdog=watchdog,
        retry_policy=jobledger.FixedBackoff(timedelta(hours=1)),
    )
    runtime.register_handler(
        "hang", handlers.hang, timeout=timedelta(seconds=1), isolation="process"
    )
    hung = add_job(store, "job-hang", kind="hang", payload={"dir": str(tmp_path)}, clock=clock)
    clock.advance(1)
    waiting = add_job(store, "job-next", kind="echo", clock=clock)
    worker = jobledger.Worker(
        runtime, concurrency=1, prefetch=0, poll_interval=timedelta(milliseconds=20), planner=False
    )
    thread = threading.Thread(target=lambda: worker.run(install_signal_handlers=False), daemon=True)
    thread.start()
    try:
        wait_until(lambda: seen(tmp_path, hung.id) is not None, "the handler to start")
        monotonic.now += 1
        assert watchdog.check() == 1
        # The one slot is free again at once: the next occurrence runs, nothing is stuck.
        wait_until(lambda: ran == [waiting.id], "the next occurrence to run")
        assert worker.stuck_slots == []
        after = store.get_occurrence(hung.id)
        assert (after.status, after.last_error["code"]) == (
            "retry_wait",
            "SCHEDULER_RUNTIME_TIMEOUT",
        )
    finally:
        stop_worker(worker, thread)
    assert not thread.is_alive()


def test_the_app_decorator_isolates_and_validates(tmp_path, clock):
    with jobledger.App(tmp_path / "app.sqlite3", clock=clock, authorize=jobledger.allow_all) as app:
        with pytest.raises(jobledger.SchedulerError) as bad:
            app.handler("k", isolation="fork")
        assert bad.value.code == "SCHEDULER_INVALID_ARGUMENT"
        assert bad.value.details["field"] == "isolation"
        with pytest.raises(jobledger.SchedulerError) as local:
            app.handler("k", isolation="process")(lambda ctx: None)
        assert local.value.code == "SCHEDULER_RUNTIME_INVALID_HANDLER"
        assert "k" not in app.kinds  # refused, nothing registered
        assert app.handler("k", isolation="process")(handlers.echo) is handlers.echo
        app.create_job("j", "k", payload={"dir": str(tmp_path)})
        occurrence = app.enqueue("j")
        [result] = run_until_idle(app)
        assert result.status == "succeeded" and result.result["pid"] != os.getpid()
        assert seen(tmp_path, occurrence.id) is not None


def test_a_runtime_refuses_what_a_child_cannot_import(store, make_runtime):
    runtime = make_runtime()

    def nested(ctx: object) -> None:
        return None

    for handler in (nested, lambda ctx: None, handlers.Unpicklable):
        with pytest.raises(jobledger.SchedulerError) as refused:
            runtime.register_handler("k", handler, isolation="process")
        assert refused.value.code == "SCHEDULER_RUNTIME_INVALID_HANDLER"
    with pytest.raises(jobledger.SchedulerError) as bad:
        runtime.register_handler("k", handlers.echo, isolation=None)  # type: ignore[arg-type]
    assert bad.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert runtime.kinds == frozenset()


PARENT = """
import sys
import jobledger
from tests.system.worker import isolated_handlers

folder = sys.argv[1]
with jobledger.open_store(folder + "/parent.sqlite3") as store:
    store.create_job(id="j", kind="hang", authority={"principal": {"type": "user", "id": "t"}},
                     payload={"dir": folder})
    store.enqueue_occurrence(job_id="j", scheduled_for=store.now(), trigger_key="manual")
    runtime = jobledger.Runtime(store, authorize=jobledger.allow_all)
    runtime.register_handler("hang", isolated_handlers.hang, isolation="process")
    runtime.run_next()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_child_never_outlives_its_worker(tmp_path):
    import signal
    import subprocess

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], env=env, cwd=root)
    try:
        notes: list[dict[str, Any]] = []

        def started() -> bool:
            notes.extend(json.loads(p.read_text()) for p in tmp_path.glob("*.json") if not notes)
            return bool(notes)

        wait_until(started, "the handler to start")
        assert notes[0]["pid"] != parent.pid and not gone(notes[0]["pid"])
        parent.send_signal(signal.SIGKILL)
        parent.wait(WAIT_S)
        wait_until(lambda: gone(notes[0]["pid"]), "the orphaned child to exit")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
