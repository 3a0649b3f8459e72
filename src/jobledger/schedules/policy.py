"""The misfire policy stored with a trigger, and the deterministic jitter of SPEC §6.

:class:`MisfirePolicy` says what the planner does with slots it sees late (``misfire``, after
``misfire_grace``), how many missed slots ``catch_up`` may fire, and how far each firing's
``available_at`` may be spread (``jitter``). It travels in the same JSON object as the trigger
(see :mod:`jobledger.schedules.json_format`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal, cast

from ..contract import MAX_SAFE_INTEGER, is_safe_int
from ..errors import InvalidArgument

__all__ = [
    "DEFAULT_CATCH_UP_LIMIT",
    "DEFAULT_MISFIRE_GRACE",
    "DEFAULT_MISFIRE_GRACE_MS",
    "MAX_CATCH_UP_LIMIT",
    "MAX_JITTER_MS",
    "MISFIRE_MODES",
    "OVERLAP_POLICIES",
    "MisfireMode",
    "MisfirePolicy",
    "OverlapPolicy",
    "jitter_offset_ms",
    "whole_ms",
]

MisfireMode = Literal["coalesce", "catch_up", "skip"]
MISFIRE_MODES: Final = ("coalesce", "catch_up", "skip")
# What a firing does while an earlier occurrence of the job is live (SPEC §12 "Overlap").
OverlapPolicy = Literal["allow", "skip", "buffer_one", "cancel_other"]
OVERLAP_POLICIES: Final = ("allow", "skip", "buffer_one", "cancel_other")
DEFAULT_MISFIRE_GRACE: Final = timedelta(minutes=1)
DEFAULT_MISFIRE_GRACE_MS: Final = DEFAULT_MISFIRE_GRACE // timedelta(milliseconds=1)
DEFAULT_CATCH_UP_LIMIT: Final = 100
MAX_CATCH_UP_LIMIT: Final = 10_000
MAX_JITTER_MS: Final = 24 * 60 * 60 * 1000
_ONE_MS: Final = timedelta(milliseconds=1)


def whole_ms(
    value: object, field: str, *, minimum: int = 0, maximum: int = MAX_SAFE_INTEGER
) -> int:
    """A :class:`timedelta` as whole milliseconds in ``[minimum, maximum]``."""
    if not isinstance(value, timedelta):
        raise InvalidArgument(f"{field} must be a timedelta", details={"field": field})
    millis, remainder = divmod(value, _ONE_MS)
    if remainder:
        raise InvalidArgument(
            f"{field} must be a whole number of milliseconds (jobledger counts time in epoch ms)",
            details={"field": field},
        )
    if not minimum <= millis <= maximum:
        raise InvalidArgument(
            f"{field} must be between {_span(minimum)} and {_span(maximum)}",
            details={"field": field},
        )
    return int(millis)


def _span(millis: int) -> str:
    return f"{millis} ms" if millis < 1000 or millis % 1000 else f"{millis // 1000} s"


@dataclass(frozen=True)  # not slots=True: see the note on triggers.Cron
class MisfirePolicy:
    """What the planner does with late slots (SPEC §6 "Late and missed").

    ``misfire``: ``"coalesce"`` (default: every due slot of a pass becomes one occurrence for the
    latest), ``"catch_up"`` (missed slots fire, oldest first, at most ``catch_up_limit``) or
    ``"skip"`` (missed slots do not fire). A slot is missed when first seen more than
    ``misfire_grace`` after its instant. ``jitter`` delays each firing's ``available_at`` by a
    deterministic offset in ``[0, jitter)`` (:func:`jitter_offset_ms`). ``overlap`` says what a
    firing does while an earlier occurrence of the job is live (``queued``, ``retry_wait``,
    ``running``): ``"allow"`` (default), ``"skip"``, ``"buffer_one"`` or ``"cancel_other"``
    (SPEC §12; the store decides it in the transaction that records the plan).
    """

    misfire: MisfireMode = "coalesce"
    misfire_grace: timedelta = DEFAULT_MISFIRE_GRACE
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT
    jitter: timedelta = timedelta(0)
    overlap: OverlapPolicy = "allow"

    def __post_init__(self) -> None:
        if self.misfire not in MISFIRE_MODES:
            raise InvalidArgument(
                f"misfire must be one of {', '.join(MISFIRE_MODES)}, not {self.misfire!r}",
                details={"field": "misfire"},
            )
        whole_ms(self.misfire_grace, "misfire_grace")
        if not is_safe_int(self.catch_up_limit) or not (
            1 <= self.catch_up_limit <= MAX_CATCH_UP_LIMIT
        ):
            raise InvalidArgument(
                f"catch_up_limit must be an integer between 1 and {MAX_CATCH_UP_LIMIT}",
                details={"field": "catch_up_limit"},
            )
        whole_ms(self.jitter, "jitter", maximum=MAX_JITTER_MS)
        if self.overlap not in OVERLAP_POLICIES:
            raise InvalidArgument(
                f"overlap must be one of {', '.join(OVERLAP_POLICIES)}, not {self.overlap!r}",
                details={"field": "overlap"},
            )

    @property
    def misfire_grace_ms(self) -> int:
        return self.misfire_grace // _ONE_MS

    @property
    def jitter_ms(self) -> int:
        return self.jitter // _ONE_MS

    def to_json(self) -> dict[str, Any]:
        """The policy keys of the trigger JSON (``overlap`` only when it is not ``"allow"``, so
        a schedule without it keeps its bytes, and its job its revision)."""
        encoded: dict[str, Any] = {
            "misfire": self.misfire,
            "misfireGraceMs": self.misfire_grace_ms,
            "catchUpLimit": self.catch_up_limit,
            "jitterMs": self.jitter_ms,
        }
        if self.overlap != "allow":
            encoded["overlap"] = self.overlap
        return encoded

    @classmethod
    def from_json(cls, value: Mapping[str, Any], prefix: str = "trigger") -> MisfirePolicy:
        """Read the policy keys of a trigger JSON object, naming ``prefix.<key>`` on error."""
        misfire = value.get("misfire")
        if misfire not in MISFIRE_MODES:
            raise InvalidArgument(
                f"{prefix}.misfire must be one of {', '.join(MISFIRE_MODES)}",
                details={"field": f"{prefix}.misfire"},
            )
        grace = _json_int(value, "misfireGraceMs", prefix, 0, MAX_SAFE_INTEGER)
        limit = _json_int(value, "catchUpLimit", prefix, 1, MAX_CATCH_UP_LIMIT)
        jitter = _json_int(value, "jitterMs", prefix, 0, MAX_JITTER_MS)
        overlap = value.get("overlap", "allow")
        if overlap not in OVERLAP_POLICIES[1:] and "overlap" in value:
            # "allow" is the absence of the key: the stored form has one spelling per policy
            raise InvalidArgument(
                f"{prefix}.overlap must be one of {', '.join(OVERLAP_POLICIES[1:])} "
                '(omit it for "allow")',
                details={"field": f"{prefix}.overlap"},
            )
        return cls(
            misfire=cast(MisfireMode, misfire),
            misfire_grace=timedelta(milliseconds=grace),
            catch_up_limit=limit,
            jitter=timedelta(milliseconds=jitter),
            overlap=cast(OverlapPolicy, overlap),
        )


DEFAULT_POLICY: Final = MisfirePolicy()


def _json_int(value: Mapping[str, Any], key: str, prefix: str, low: int, high: int) -> int:
    number = value.get(key)
    if not is_safe_int(number) or not low <= cast(int, number) <= high:
        raise InvalidArgument(
            f"{prefix}.{key} must be an integer between {low} and {high}",
            details={"field": f"{prefix}.{key}"},
        )
    return cast(int, number)


def jitter_offset_ms(job_id: str, scheduled_for: int, jitter_ms: int) -> int:
    """The deterministic delay in ``[0, jitter_ms)`` for one firing (0 when ``jitter_ms`` is 0).

    ``int.from_bytes(sha256(f"{job_id}\\0{scheduled_for}".encode()).digest()[:8], "big") %
    jitter_ms`` — the same job and slot get the same delay in every process (SPEC §6).
    """
    if not is_safe_int(jitter_ms) or jitter_ms < 0:
        raise InvalidArgument(
            "jitter_ms must be a non-negative integer", details={"field": "jitter_ms"}
        )
    if jitter_ms == 0:
        return 0
    digest = hashlib.sha256(f"{job_id}\0{scheduled_for}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % jitter_ms
