"""Applying one operator action to many occurrences: naming them, progress, per-item failures,
exit status.

Occurrences are named by id or by a unique start of one (:func:`resolve_targets`, through
``Store.resolve_occurrence_id``). Each item is then its own store call (its own transaction and
audit event), so a failure on one — another operator was quicker, it settled meanwhile, a
prefix matched nothing — does not undo or stop the others. With one target, its error is *the*
error (one coded line, its exit status). With several, the result lists what succeeded and what
failed; every failure is also one coded line on stderr, and the exit status is that of the
failures when they agree (all conflicts → 4), else 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import SchedulerError
from ..models import Occurrence
from ..store import Store
from .context import Context
from .errors import EXIT_FAILURE, EXIT_OK, error_lines, exit_code_for
from .output import error_json, occurrence_json

__all__ = ["BulkOutcome", "Failure", "apply_each", "resolve_targets"]

PROGRESS_EVERY_S = 0.5

Failure = tuple[str, SchedulerError]


@dataclass
class BulkOutcome:
    done: list[Occurrence] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)

    def document(self, key: str) -> dict[str, Any]:
        return {
            key: [occurrence_json(o) for o in self.done],
            "failed": [
                {"occurrenceId": occurrence_id, "error": error_json(error)}
                for occurrence_id, error in self.failed
            ],
        }

    def exit_code(self) -> int:
        if not self.failed:
            return EXIT_OK
        codes = {exit_code_for(error) for _, error in self.failed}
        return codes.pop() if len(codes) == 1 else EXIT_FAILURE


def _report(ctx: Context, target: str, error: SchedulerError) -> None:
    for line in error_lines(error):
        ctx.note(f"{line} ({target})" if line.startswith("error:") else line)


def resolve_targets(
    ctx: Context, store: Store, targets: Sequence[str]
) -> tuple[list[str], list[Failure]]:
    """The occurrence ids ``targets`` name (ids or unique starts of ids), in order, each once.

    One target: its error propagates. Several: a target that names no single occurrence is
    reported on stderr and returned as a failure; the others still count.
    """
    names = list(dict.fromkeys(targets))
    if len(names) == 1:
        return [store.resolve_occurrence_id(names[0])], []
    ids: dict[str, None] = {}
    failed: list[Failure] = []
    for name in names:
        try:
            ids.setdefault(store.resolve_occurrence_id(name), None)
        except SchedulerError as exc:
            failed.append((name, exc))
            _report(ctx, name, exc)
    return list(ids), failed


def apply_each(
    ctx: Context,
    targets: Sequence[str],
    action: Callable[[str], Occurrence],
    *,
    verb: str,
    failed: Sequence[Failure] = (),
) -> BulkOutcome:
    """Run ``action`` on every target, reporting progress on stderr when there are several.

    ``failed``: targets that already failed (e.g. naming no occurrence); they count in the
    total. One target in all: its error propagates. Several: errors are collected (and printed)
    per item, and the progress line says how many were done and how many failed.
    """
    outcome = BulkOutcome(failed=list(failed))
    total = len(targets) + len(outcome.failed)
    if total == 1:
        outcome.done.append(action(targets[0]))
        return outcome
    shown_at = time.monotonic()
    for number, target in enumerate(targets, 1):
        try:
            outcome.done.append(action(target))
        except SchedulerError as exc:
            outcome.failed.append((target, exc))
            _report(ctx, target, exc)
        now = time.monotonic()
        if number == len(targets) or now - shown_at >= PROGRESS_EVERY_S:
            shown_at = now
            ctx.note(_progress(verb, outcome, total, left=len(targets) - number))
    if not targets and outcome.failed:
        ctx.note(_progress(verb, outcome, total, left=0))
    return outcome


def _progress(verb: str, outcome: BulkOutcome, total: int, *, left: int) -> str:
    """``cancelled 1 of 3, 2 failed`` (``…, 40 to go`` while some are left)."""
    line = f"{verb} {len(outcome.done)} of {total}"
    if outcome.failed:
        line += f", {len(outcome.failed)} failed"
    if left:
        line += f", {left} to go"
    return line
