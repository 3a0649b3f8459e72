"""``jobledger queue list | show | set | pause | resume``: queues, their limits and pauses
(SPEC §7).

``set`` changes the limits given and keeps the others (``--concurrency none`` removes one;
``--replace`` makes the omitted ones ``none``, as ``app.queue()`` does). Every change is audited
with ``--actor`` (``queue_updated``, ``queue_paused`` with ``--reason``, ``queue_resumed``).
Depths are bounded counts: a count that reached the store's cap is shown as ``10000+``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .. import contract
from ..errors import InvalidArgument
from ..models import DEPTH_CAP, Queue, QueueDepth, Rate
from ..models.queues import normalize_declaration
from ..planning.waiting import limit_words, queue_reasons
from ..store import Store
from .context import Context
from .parsing import _typed, add_command, add_group
from .table import Column, render_table
from .timefmt import iso_utc, parse_duration

__all__ = ["register"]

_NONE = "none"
_KEEP: Any = object()  # a limit flag not given: `set` keeps the stored value
_LIMITS = ("concurrency", "worker_concurrency", "partition_concurrency")
_RATES = ("rate", "partition_rate")


def _queue_name(text: str) -> str:
    try:
        return contract.normalize_queue_name(text, "queue")
    except InvalidArgument:
        raise InvalidArgument(
            f"not a valid queue name: {text!r} (1 to {contract.MAX_QUEUE_NAME_LENGTH} "
            "characters, no control characters)"
        ) from None


def _limit(text: str) -> int | None:
    if text.strip().lower() == _NONE:
        return None
    stripped = text.strip()
    if not stripped.isascii() or not stripped.isdigit() or int(stripped) < 1:
        raise InvalidArgument(f"must be a whole number of at least 1, or none: {text!r}")
    if int(stripped) > contract.MAX_SAFE_INTEGER:
        raise InvalidArgument(f"too large: {text!r}")
    return int(stripped)


def _rate(text: str) -> Rate | None:
    """``LIMIT/PER`` (``10/1m``, ``100/PT1H``) or ``none``."""
    if text.strip().lower() == _NONE:
        return None
    limit, sep, per = text.strip().partition("/")
    count = _limit(limit) if sep and limit.strip().lower() != _NONE else None
    if count is None:
        raise InvalidArgument(f"a rate is LIMIT/PER, e.g. 10/1m, or none (got {text!r})")
    return Rate(count, parse_duration(per))


queue_arg: Callable[[str], str] = _typed(_queue_name, "queue")
limit_arg: Callable[[str], int | None] = _typed(_limit, "limit")
rate_arg: Callable[[str], Rate | None] = _typed(_rate, "rate")


def register(subparsers: Any) -> None:
    commands = add_group(
        subparsers,
        "queue",
        aliases=("queues",),
        help="list queues, show one, set its limits, pause and resume it",
    )
    listing = add_command(
        commands,
        "list",
        aliases=("ls",),
        help="queues with their depth, running work, limits and pause state",
        description=(
            "Every queue that is declared or holds live work: ready, waiting and held\n"
            "occurrences (the depth), running ones, blocked ones, its limits and whether it is\n"
            f"paused. Counts stop at {DEPTH_CAP:,} (shown as {DEPTH_CAP}+)."
        ),
    )
    listing.set_defaults(handler=run_list)

    show = add_command(
        commands,
        "show",
        help="one queue: depth, running work, limits, pause state and what holds it back",
    )
    show.add_argument("name", metavar="QUEUE", type=queue_arg)
    show.set_defaults(handler=run_show)

    setter = add_command(
        commands,
        "set",
        help="change a queue's limits (audited); limits not given are kept",
        description=(
            "Change a queue's limits: the ones given change, the others are kept (`none`\n"
            "removes one). With --replace the declaration is replaced whole, as app.queue()\n"
            "does: limits not given become none. A rate is LIMIT/PER, PER at least 1s (10/1m,\n"
            "100/1h, 5/PT30S). The pause state is not a limit: see pause and resume. Recorded\n"
            "in the audit log (queue_updated) with --actor."
        ),
    )
    setter.add_argument("name", metavar="QUEUE", type=queue_arg)
    for name, help_text in (
        ("concurrency", "running occurrences of the queue, across every worker"),
        ("worker_concurrency", "running occurrences of the queue per worker"),
        ("partition_concurrency", "running occurrences per (queue, partition)"),
    ):
        setter.add_argument(
            "--" + name.replace("_", "-"),
            metavar="N|none",
            type=limit_arg,
            default=_KEEP,
            help=help_text,
        )
    for name, help_text in (
        ("rate", "claims of the queue per window, e.g. 10/1m"),
        ("partition_rate", "claims per (queue, partition) per window, e.g. 1/1s"),
    ):
        setter.add_argument(
            "--" + name.replace("_", "-"),
            metavar="LIMIT/PER|none",
            type=rate_arg,
            default=_KEEP,
            help=help_text,
        )
    setter.add_argument(
        "--replace", action="store_true", help="replace the whole declaration (omitted: none)"
    )
    setter.set_defaults(handler=run_set)

    pause = add_command(
        commands,
        "pause",
        help="pause a queue: no claim takes from it once this returns (audited)",
        description=(
            "Pause a queue: once this returns no claim takes from it, on any worker; running\n"
            "occurrences finish and settle, enqueues still work, and the pause survives\n"
            "restarts. Pausing a queue nobody declared declares it. --reason and --actor are\n"
            "recorded (queue_paused). Pausing a paused queue records the new reason."
        ),
    )
    pause.add_argument("name", metavar="QUEUE", type=queue_arg)
    pause.add_argument("--reason", required=True, help="why (recorded in the audit log)")
    pause.set_defaults(handler=run_pause)

    resume = add_command(
        commands, "resume", help="resume a paused queue: its work is claimable again (audited)"
    )
    resume.add_argument("name", metavar="QUEUE", type=queue_arg)
    resume.set_defaults(handler=run_resume)


# -- rendering --------------------------------------------------------------------------------


def _n(depth: QueueDepth, field: str) -> str:
    value = int(getattr(depth, field))
    return f"{value}+" if field in depth.capped else str(value)


def _depth_n(depth: QueueDepth) -> str:
    capped = depth.capped & {"ready", "waiting", "held"}
    return f"{depth.depth}+" if capped else str(depth.depth)


def _paused_words(ctx: Context, queue: Queue) -> str:
    if not queue.paused:
        return "no"
    by = f" by {queue.paused_by}" if queue.paused_by else ""
    return f"yes, since {ctx.when(queue.paused_at)}{by}: {queue.paused_reason or '-'}"


def _show_text(ctx: Context, depth: QueueDepth) -> str:
    queue = depth.queue
    limits = ", ".join(limit_words(queue)) or "none"
    operator = sorted(name for name, source in queue.sources.items() if source == "operator")
    lines = [
        f"queue:        {queue.name}" + ("" if queue.revision else " (not declared)"),
        f"paused:       {_paused_words(ctx, queue)}",
        f"depth:        {_depth_n(depth)} queued (ready {_n(depth, 'ready')}, waiting "
        f"{_n(depth, 'waiting')}, held {_n(depth, 'held')})",
        f"running:      {_n(depth, 'running')}"
        + (f" of {queue.concurrency}" if queue.concurrency is not None else ""),
        f"blocked:      {_n(depth, 'blocked')}",
        f"limits:       {limits}",
    ]
    if queue.revision:
        lines.append(
            "set by:       "
            + (
                f"an operator ({', '.join(operator)}; stands until an operator changes it), "
                "the app's declaration (the rest)"
                if operator
                else "the app's declaration (app.queue)"
                if any(source == "declaration" for source in queue.sources.values())
                else "nobody (no limits)"
            )
        )
    if queue.rate is not None and depth.rate_window_end is not None:
        lines.append(
            f"rate window:  {depth.rate_claims} of {queue.rate.limit} claims, next window at "
            f"{ctx.when(depth.rate_window_end)}"
        )
    if queue.revision:
        lines.append(
            f"declared:     revision {queue.revision}, updated {ctx.when(queue.updated_at)}"
        )
    for reason in queue_reasons(depth, ctx.when):
        lines.append(f"holding back: {reason.text}")
    return "\n".join(lines)


def _queue_json(queue: Queue) -> dict[str, Any]:
    """``Queue.to_json()`` with its instant in ISO 8601 UTC, as every ``--json`` instant."""
    return {**queue.to_json(), "pausedAt": iso_utc(queue.paused_at)}


def _depth_json(depth: QueueDepth) -> dict[str, Any]:
    document = depth.to_json()
    document["queue"] = _queue_json(depth.queue)
    document["rateWindowEnd"] = iso_utc(depth.rate_window_end)
    document["holdingBack"] = [reason.to_json() for reason in queue_reasons(depth)]
    return document


def _get_depth(store: Store, name: str) -> QueueDepth:
    [depth] = store.queue_depths(names=[name])
    return depth


# -- commands ---------------------------------------------------------------------------------


def run_list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        depths = store.queue_depths()
    document = {"queues": [_depth_json(depth) for depth in depths]}

    def text() -> str:
        if not depths:
            return "no queues: nothing declared and no live work"
        columns = [
            Column("QUEUE", max_width=40),
            Column("PAUSED"),
            Column("DEPTH", align="right"),
            Column("READY", align="right"),
            Column("WAITING", align="right"),
            Column("HELD", align="right"),
            Column("RUNNING", align="right"),
            Column("LIMITS", max_width=60),
        ]
        rows = [
            [
                depth.name,
                "paused" if depth.queue.paused else "-",
                _depth_n(depth),
                _n(depth, "ready"),
                _n(depth, "waiting"),
                _n(depth, "held"),
                _n(depth, "running"),
                ", ".join(limit_words(depth.queue)) or "-",
            ]
            for depth in depths
        ]
        return render_table(columns, rows, width=ctx.width, color=ctx.color)

    ctx.emit(document, text)
    return 0


def run_show(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        depth = _get_depth(store, args.name)
    ctx.emit(_depth_json(depth), lambda: _show_text(ctx, depth))
    return 0


def run_set(ctx: Context, args: argparse.Namespace) -> int:
    given = {
        name: getattr(args, name)
        for name in (*_LIMITS, *_RATES)
        if getattr(args, name) is not _KEEP
    }
    if not given and not args.replace:
        raise InvalidArgument(
            "name a limit to change (--concurrency, --worker-concurrency, "
            "--partition-concurrency, --rate, --partition-rate), or --replace"
        )
    with ctx.open_store() as store:
        before = store.get_queue(args.name)
        base = before if before is not None and not args.replace else Queue(name=args.name)
        fields: dict[str, Any] = {name: getattr(base, name) for name in (*_LIMITS, *_RATES)}
        fields.update(given)
        declaration = normalize_declaration(name=args.name, **fields)
        stored = store.declare_queue(
            declaration,
            actor=ctx.actor,
            source="operator",
            fields=None if args.replace else sorted(given),
        )
    changed = before is None or stored.revision != before.revision
    document = {"queue": _queue_json(stored), "changed": changed, "actor": ctx.actor}
    limits = ", ".join(limit_words(stored)) or "no limits"
    ctx.emit(
        document,
        lambda: (
            f"queue {stored.name}: {limits} (revision {stored.revision}; recorded in the audit "
            f"log as {ctx.actor})"
            if changed
            else f"queue {stored.name} already has {limits}; nothing changed"
        ),
    )
    return 0


def run_pause(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        stored = store.pause_queue(args.name, reason=args.reason, actor=ctx.actor)
    document = {"queue": _queue_json(stored), "actor": ctx.actor}
    ctx.emit(
        document,
        f"paused queue {stored.name} as {ctx.actor}: no claim takes from it until it is resumed "
        "(running occurrences finish)",
    )
    return 0


def run_resume(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.open_store() as store:
        before = store.get_queue(args.name)
        stored = store.resume_queue(args.name, actor=ctx.actor)
    changed = before is not None and before.paused
    document = {"queue": _queue_json(stored), "changed": changed, "actor": ctx.actor}
    ctx.emit(
        document,
        f"resumed queue {stored.name} as {ctx.actor}: its work is claimable again"
        if changed
        else f"queue {stored.name} is not paused; nothing changed",
    )
    return 0
