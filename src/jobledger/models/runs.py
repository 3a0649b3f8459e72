"""What running an occurrence produced, and how an attempt may end.

``Outcome`` is what a settlement asks for (``succeeded`` or ``failed``; the store decides retry
or dead letter from the row); :class:`RunResult` is what a runtime reports for one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .records import Occurrence

__all__ = ["Outcome", "RunResult", "RunStatus"]

Outcome = Literal["succeeded", "failed"]

RunStatus = Literal[
    "succeeded", "retry_wait", "dead_letter", "cancelled", "idle", "busy", "aborted"
]


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one run produced.

    ``status`` is the settled occurrence's status (``succeeded``, ``retry_wait``,
    ``dead_letter``) or ``idle`` (nothing to claim), ``busy`` (a targeted occurrence is leased
    elsewhere or not due), ``aborted`` (nothing settled: cancelled before claiming, lease lost,
    or released at shutdown — see ``lease_lost`` / ``released``). ``already_settled`` marks a
    targeted run of an occurrence that was already terminal. ``timed_out`` marks an attempt
    failed by its kind's time limit.
    """

    status: RunStatus
    occurrence: Occurrence | None = None
    result: Any = None
    error: Any = None
    already_settled: bool = False
    lease_lost: bool = False
    released: bool = False
    timed_out: bool = False
