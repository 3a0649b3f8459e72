"""Process isolation: ``@app.handler(kind, isolation="process")`` runs each attempt's handler in
a child process that is killed when the attempt ends without it — at the kind's time limit, on
a lost lease, or when a worker gives the lease back at shutdown.

A sync handler on a thread cannot be stopped from outside (Python has no way to kill a thread):
past its time limit its attempt is settled, but the thread runs on and keeps its slot
(``docs/runtime.md``, stuck slots). An isolated handler can be stopped: its child is killed
(``SIGKILL``) and the slot is free at once.

**Who does what.** The parent (the worker's slot) keeps everything about the attempt: its checks,
the lease and its heartbeat, the time limit, the settlement. The child gets only what it needs
to run the handler: the handler's module and qualified name (it imports the module and looks
the function up — so the handler must be a module-level function), and a snapshot of the
context (:class:`IsolatedContext`). It never opens the store. It sends back one message: the
result, as JSON, or the exception.

**Start method.** ``forkserver`` where the platform has it (Linux, macOS), else ``spawn``; never
``fork``, which would copy the parent's threads, locks and database connections into the child.
The forkserver imports jobledger once, so each attempt's child starts in milliseconds (plus
the import of the handler's module, once per child). A child notices its parent's death (a
lifeline pipe reaches end-of-file) and exits at once: it never outlives its worker, so a
worker killed with ``SIGKILL`` leaves no handler behind to run beside the next attempt.

**What crosses.** Returned values must be JSON (the same rule as in-process handlers), checked in
the child; :class:`~jobledger.Retry`, :class:`~jobledger.Fail`, :class:`~jobledger.Snooze`,
:class:`~jobledger.OutcomeUnknown` and any exception that pickles arrive as themselves; any
other exception arrives as an :class:`IsolatedHandlerError` of the same class name, message,
``code``, ``retryable`` and (JSON) ``details``. A child that dies without answering (a crash,
``os._exit``, the kernel's OOM killer) fails the attempt as a retryable
``SCHEDULER_RUNTIME_HANDLER_CRASHED`` with its exit status.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import inspect
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
from collections.abc import Callable
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Final

from ..contract import normalize_json
from ..errors import InvalidArgument, RuntimeRejection
from ..models import Job, Occurrence
from .handlers import AttemptFacts, Decision, JobContext, Snooze

__all__ = [
    "CRASHED_CODE",
    "INVALID_RESULT_CODE",
    "ISOLATIONS",
    "IsolatedContext",
    "IsolatedHandlerError",
    "ProcessHandler",
    "check_isolatable",
    "normalize_isolation",
]

ISOLATIONS: Final = ("thread", "process")
CRASHED_CODE: Final = "SCHEDULER_RUNTIME_HANDLER_CRASHED"
INVALID_RESULT_CODE: Final = "SCHEDULER_RUNTIME_INVALID_RESULT"

_context_lock = threading.Lock()
_mp_contexts: list[BaseContext] = []  # the one start method's context, once chosen


def normalize_isolation(value: object) -> str:
    """``"thread"`` (the default: the handler runs on its slot's thread) or ``"process"``."""
    if not isinstance(value, str) or value not in ISOLATIONS:
        raise InvalidArgument(
            'isolation must be "thread" or "process"',
            details={"field": "isolation", "allowed": list(ISOLATIONS)},
        )
    return value


def check_isolatable(kind: str, handler: object) -> tuple[str, str]:
    """The module and qualified name a child imports ``handler`` by; a coded error
    (``SCHEDULER_RUNTIME_INVALID_HANDLER``) when it cannot be found that way."""
    module = getattr(handler, "__module__", None)
    qualname = getattr(handler, "__qualname__", None)
    if (
        not inspect.isfunction(handler)
        or not isinstance(module, str)
        or not isinstance(qualname, str)
        or "<" in qualname  # a lambda, or a function defined inside another
    ):
        raise RuntimeRejection(
            f"the handler for {kind!r} runs in a child process, which imports it by its module "
            "and name: it must be a function defined at the top level of a module",
            code="SCHEDULER_RUNTIME_INVALID_HANDLER",
            details={"jobKind": kind, "isolation": "process"},
        )
    return module, qualname


class IsolatedContext(AttemptFacts):
    """What an isolated handler gets (in its child process): snapshots, no store.

    The same read-only view as :class:`~jobledger.JobContext` — ``job``, ``occurrence``,
    ``payload``, ``authority``, ``fence``, ``attempt``, ``occurrence_id``, ``idempotency_key``,
    ``parents`` (read by the parent before the child starts), ``decision``, ``owner_id`` — and
    :meth:`is_cancelled`, always ``False``: an isolated handler is not asked to stop, it is
    killed. There is no ``renew_lease`` (the parent's heartbeat keeps the lease) and no
    ``cancel_event``.
    """

    isolated = True

    def __init__(
        self,
        *,
        job: Job,
        occurrence: Occurrence,
        decision: Decision,
        owner_id: str,
        parents: dict[str, Any],
    ) -> None:
        self.job = job
        self.occurrence = occurrence
        self.decision = decision
        self.owner_id = owner_id
        self._parents = parents

    @property
    def parents(self) -> dict[str, Any]:
        return dict(self._parents)

    def is_cancelled(self) -> bool:
        return False


class IsolatedHandlerError(Exception):
    """An isolated handler's exception that could not cross as itself (see the module
    docstring); its class is named as the original was, for the stored error's ``name``."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool = True,
        details: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.retryable = retryable
        self.details = details


class ProcessHandler:
    """A handler run in a child process per attempt (the parent side; see the module
    docstring). Made by :meth:`Runtime.register_handler` and ``@app.handler`` for
    ``isolation="process"``."""

    isolation = "process"

    def __init__(self, kind: str, function: Callable[..., object]) -> None:
        self.module, self.qualname = check_isolatable(kind, function)
        self.function = function
        self.kind = kind
        self.__name__ = getattr(function, "__name__", "handler")
        self.__qualname__ = self.qualname
        self.__module__ = self.module
        self.__doc__ = function.__doc__

    def __repr__(self) -> str:
        return f"<ProcessHandler {self.module}:{self.qualname}>"

    def __call__(self, ctx: JobContext) -> object:
        snapshot = IsolatedContext(
            job=ctx.job,
            occurrence=ctx.occurrence,
            decision=Decision(ctx.decision.allowed, ctx.decision.reason),
            owner_id=ctx.owner_id,
            parents=ctx.parents,
        )
        mp = _multiprocessing()
        answers, answer_end = mp.Pipe(duplex=False)
        lifeline_end, lifeline = mp.Pipe(duplex=False)
        process = mp.Process(  # type: ignore[attr-defined]
            target=child_main,
            args=(answer_end, lifeline_end, self.module, self.qualname, snapshot),
            name=f"jobledger-isolated:{ctx.occurrence_id}",
            daemon=True,
        )
        child = _Child(process)
        try:
            process.start()
        finally:
            answer_end.close()
            lifeline_end.close()
        # Cancelled (time limit, lost lease, shutdown) → killed; at once if already cancelled.
        ctx.add_cancel_callback(child.kill)
        try:
            message = _receive(answers, process)
        finally:
            child.finish()
            answers.close()
            lifeline.close()
        if ctx.cancel_event.is_set():
            raise concurrent.futures.CancelledError()
        return _outcome(message, process.exitcode)


class _Child:
    """A child process that may be killed from another thread until it is reaped."""

    def __init__(self, process: BaseProcess) -> None:
        self.process = process
        self._lock = threading.Lock()
        self._reaped = False

    def kill(self) -> None:
        with self._lock:
            if not self._reaped and self.process.pid is not None:
                self.process.kill()

    def finish(self) -> None:
        with self._lock:
            if self.process.pid is not None:
                if self.process.exitcode is None:
                    self.process.kill()
                self.process.join()
            self._reaped = True


def _multiprocessing() -> BaseContext:
    with _context_lock:
        if not _mp_contexts:
            context: BaseContext
            if "forkserver" in multiprocessing.get_all_start_methods():
                server = multiprocessing.get_context("forkserver")
                server.set_forkserver_preload([__name__])
                context = server
            else:
                context = multiprocessing.get_context("spawn")
            _mp_contexts.append(context)
        return _mp_contexts[0]


def _receive(
    answers: multiprocessing.connection.Connection, process: BaseProcess
) -> tuple[str, Any] | None:
    """The child's one message, or ``None`` when it ended (or was killed) without one."""
    multiprocessing.connection.wait([answers, process.sentinel])
    try:
        if answers.poll():
            message: tuple[str, Any] = answers.recv()
            return message
    except (EOFError, OSError):
        pass
    return None


def _outcome(message: tuple[str, Any] | None, exitcode: int | None) -> object:
    """What the handler returned (or raise what it raised), from the child's message."""
    if message is None:
        raise IsolatedHandlerError(
            f"The handler's process ended without an answer (exit status {exitcode})",
            code=CRASHED_CODE,
            details={"exitCode": exitcode},
        )
    what, body = message
    if what == "result":
        return body
    if what == "invalid_result":
        raise IsolatedHandlerError(
            f"The handler returned a value that is not storable JSON: {body}",
            code=INVALID_RESULT_CODE,
            retryable=False,
        )
    if what == "snooze":
        raise Snooze(body)
    if what == "raised":
        try:
            # From our own child, running the application's own handler: not untrusted data.
            error = pickle.loads(body)  # noqa: S301
        except Exception:
            error = None
        if isinstance(error, Exception):
            raise error
        raise IsolatedHandlerError("The handler raised an exception that could not be read")
    described: dict[str, Any] = body
    kind = type(str(described["name"]), (IsolatedHandlerError,), {})
    raise kind(
        str(described["message"]),
        code=described["code"],
        retryable=bool(described["retryable"]),
        details=described["details"],
    )


# -- the child -------------------------------------------------------------------------------


def child_main(
    answers: multiprocessing.connection.Connection,
    lifeline: multiprocessing.connection.Connection,
    module: str,
    qualname: str,
    context: IsolatedContext,
) -> None:
    """The child process: run the handler once, send back one message."""
    threading.Thread(target=_watch_parent, args=(lifeline,), daemon=True).start()
    try:
        message = _run(module, qualname, context)
    except BaseException as exc:  # everything the handler raised is an answer
        message = _raised(exc)
    answers.send(message)
    answers.close()


def _watch_parent(lifeline: multiprocessing.connection.Connection) -> None:
    """Exit as soon as the parent is gone (it holds the only writing end of ``lifeline``)."""
    with contextlib.suppress(EOFError, OSError):
        lifeline.recv()
    os._exit(70)


def _run(module: str, qualname: str, context: IsolatedContext) -> tuple[str, Any]:
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    if isinstance(target, ProcessHandler):  # the module may hold the wrapper itself
        target = target.function
    value = target(context)
    if inspect.isawaitable(value):
        value = asyncio.run(_awaited(value))
    try:
        return ("result", normalize_json(value, "result"))
    except InvalidArgument as exc:
        return ("invalid_result", exc.message)


async def _awaited(value: Any) -> Any:
    return await value


def _raised(exc: BaseException) -> tuple[str, Any]:
    if isinstance(exc, Snooze):
        return ("snooze", exc.delay)
    if not isinstance(exc, Exception):  # SystemExit and the like must not end the parent's slot
        return ("described", _described(exc))
    try:
        body = pickle.dumps(exc)
        pickle.loads(body)  # noqa: S301 - it must also come back as itself
    except Exception:
        return ("described", _described(exc))
    return ("raised", body)


def _described(exc: BaseException) -> dict[str, Any]:
    def attribute(name: str) -> Any:
        try:
            return getattr(exc, name, None)
        except Exception:
            return None

    code = attribute("code")
    message = attribute("message")
    try:
        details = normalize_json(attribute("details"), "details")
    except Exception:
        details = {"omitted": "invalid_error_details"}
    try:
        text = message if isinstance(message, str) else str(exc)
    except Exception:
        text = ""
    return {
        "name": type(exc).__name__,
        "message": text or type(exc).__name__,
        "code": code if isinstance(code, str) else None,
        "retryable": attribute("retryable") is not False,
        "details": details,
    }
