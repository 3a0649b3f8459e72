"""One function per ``jobledger`` sub-command; each opens the store, acts, and closes it."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from ..errors import InvalidArgument, NotFound
from ..store import Store, open_store

__all__ = ["HANDLERS", "parse_instant"]


def parse_instant(text: str) -> int:
    """Epoch milliseconds from ``1767225600000`` or ``2026-01-01T00:00:00+00:00``."""
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped)
    except ValueError:
        raise InvalidArgument(
            f"not an instant: {text!r} (use epoch ms or ISO 8601 with an offset)"
        ) from None
    if moment.tzinfo is None:
        raise InvalidArgument(f"an ISO 8601 instant needs an offset or Z: {text!r}")
    return int(moment.timestamp() * 1000)


def _principal(text: str) -> dict[str, str]:
    kind, sep, ident = text.partition(":")
    if not sep:
        raise InvalidArgument("--principal must be TYPE:ID, e.g. user:alice")
    return {"type": kind, "id": ident}


def _with_store(args: argparse.Namespace, action: Callable[[Store], Any]) -> Any:
    with open_store(args.store) as store:
        return action(store)


def _schema(args: argparse.Namespace) -> Any:
    return _with_store(args, lambda store: store.schema_info())


def _create_job(args: argparse.Namespace) -> Any:
    authority: dict[str, Any] = {"principal": _principal(args.principal)}
    if args.workspace is not None:
        authority["workspaceId"] = args.workspace
    if args.tenant is not None:
        authority["tenantId"] = args.tenant
    return _with_store(
        args,
        lambda store: store.create_job(
            id=args.id,
            kind=args.kind,
            authority=authority,
            trigger=args.trigger,
            payload=args.payload,
            enabled=not args.disabled,
            max_attempts=args.max_attempts,
        ),
    )


def _show_job(args: argparse.Namespace) -> Any:
    job = _with_store(args, lambda store: store.get_job(args.job_id))
    if job is None:
        raise NotFound(f"Scheduler job does not exist: {args.job_id}")
    return job


def _toggle_job(args: argparse.Namespace) -> Any:
    return _with_store(
        args,
        lambda store: store.update_job(
            args.job_id, expected_revision=args.expected_revision, patch={"enabled": args.enabled}
        ),
    )


def _enqueue(args: argparse.Namespace) -> Any:
    scheduled_for = parse_instant(args.at)
    extra: dict[str, Any] = {} if args.payload is None else {"payload": args.payload}
    return _with_store(
        args,
        lambda store: store.enqueue_occurrence(
            job_id=args.job_id, scheduled_for=scheduled_for, trigger_key=args.trigger_key, **extra
        ),
    )


def _show_occurrence(args: argparse.Namespace) -> Any:
    occurrence = _with_store(args, lambda store: store.get_occurrence(args.occurrence_id))
    if occurrence is None:
        raise NotFound(f"Scheduler occurrence does not exist: {args.occurrence_id}")
    return occurrence


def _history(args: argparse.Namespace) -> Any:
    return _with_store(
        args,
        lambda store: store.history(
            occurrence_id=args.occurrence, job_id=args.job, limit=args.limit
        ),
    )


def _dead_letters(args: argparse.Namespace) -> Any:
    return _with_store(
        args, lambda store: store.list_dead_letters(job_id=args.job, limit=args.limit)
    )


def _requeue(args: argparse.Namespace) -> Any:
    return _with_store(
        args,
        lambda store: store.requeue_dead_letter(
            occurrence_id=args.occurrence_id,
            expected_fence=args.fence,
            reason=args.reason,
            actor=args.actor,
        ),
    )


def _load_app(reference: str) -> Any:
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidArgument("the app must be given as module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgument(f"cannot import {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise InvalidArgument(f"{module_name!r} has no attribute {attribute!r}") from None


def _worker(args: argparse.Namespace) -> Any:
    app = _load_app(args.app)
    if not hasattr(app, "run_worker"):
        raise InvalidArgument(f"{args.app} is not a jobledger App")
    if args.concurrency < 1 or args.grace_period < 0:
        raise InvalidArgument("--concurrency must be ≥ 1 and --grace-period ≥ 0")
    summary = app.run_worker(
        concurrency=args.concurrency, grace_period=timedelta(seconds=args.grace_period)
    )
    # dataclasses.asdict mangles Counter fields, so spell the summary out.
    return {
        "statuses": dict(summary.statuses),
        "released": [asdict(occurrence) for occurrence in summary.released],
        "forced": summary.forced,
    }


HANDLERS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "schema": _schema,
    "create-job": _create_job,
    "job": _show_job,
    "enable-job": _toggle_job,
    "disable-job": _toggle_job,
    "enqueue": _enqueue,
    "occurrence": _show_occurrence,
    "history": _history,
    "dead-letters": _dead_letters,
    "requeue": _requeue,
    "worker": _worker,
}
