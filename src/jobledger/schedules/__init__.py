"""Schedules: cron, interval and one-off triggers, their JSON form and misfire policy.

Everything here is pure: triggers are values, every computation takes ``after``/``at`` as an
argument and nothing reads a clock or a store. The planner (on top of the ``Store`` protocol)
turns a job's stored schedule into occurrences.

* :class:`Cron`, :class:`Every`, :class:`Once` — the triggers of SPEC §6;
* :class:`MisfirePolicy` — what happens to late slots, stored with the trigger;
* :func:`schedule_json` / :func:`parse_schedule` / :func:`parse_trigger` — the stored form;
* :func:`validate_trigger_json` — what the store calls on ``create_job``/``update_job``;
* :func:`jitter_offset_ms`, :func:`trigger_key` — the per-slot values the planner writes.
"""

from .json_format import validate_trigger_json
from .policy import MisfirePolicy, jitter_offset_ms
from .triggers import (
    Cron,
    Every,
    Once,
    Trigger,
    parse_schedule,
    parse_trigger,
    schedule_json,
    trigger_key,
)

__all__ = [
    "Cron",
    "Every",
    "MisfirePolicy",
    "Once",
    "Trigger",
    "jitter_offset_ms",
    "parse_schedule",
    "parse_trigger",
    "schedule_json",
    "trigger_key",
    "validate_trigger_json",
]
