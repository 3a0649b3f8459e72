"""Applying one operator action to many occurrences: progress, per-item failures, exit status.

Each item is its own store call (its own transaction and audit event), so a failure on one —
another operator was quicker, it settled meanwhile — does not undo or stop the others. With one
target, its error is *the* error (one coded line, its exit status). With several, the result
lists what succeeded and what failed; every failure is also one coded line on stderr, and the
exit status is that of the failures when they agree (all conflicts → 4), else 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import SchedulerError
from ..models import Occurrence
from .context import Context
from .errors import EXIT_FAILURE, EXIT_OK, error_lines, exit_code_for
from .output import error_json, occurrence_json

__all__ = ["BulkOutcome", "apply_each"]

PROGRESS_EVERY_S = 0.5


@dataclass
class BulkOutcome:
    done: list[Occurrence] = field(default_factory=list)
    failed: list[tuple[str, SchedulerError]] = field(default_factory=list)

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


def apply_each(
    ctx: Context,
    targets: Sequence[str],
    action: Callable[[str], Occurrence],
    *,
    verb: str,
) -> BulkOutcome:
    """Run ``action`` on every target, reporting progress on stderr when there are several.

    One target: its error propagates. Several: errors are collected (and printed) per item.
    """
    outcome = BulkOutcome()
    if len(targets) == 1:
        outcome.done.append(action(targets[0]))
        return outcome
    total = len(targets)
    shown_at = time.monotonic()
    for number, target in enumerate(targets, 1):
        try:
            outcome.done.append(action(target))
        except SchedulerError as exc:
            outcome.failed.append((target, exc))
            for line in error_lines(exc):
                ctx.note(f"{line} ({target})" if line.startswith("error:") else line)
        now = time.monotonic()
        if number == total or now - shown_at >= PROGRESS_EVERY_S:
            shown_at = now
            failed = f", {len(outcome.failed)} failed" if outcome.failed else ""
            ctx.note(f"{verb}: {number}/{total}{failed}")
    return outcome
