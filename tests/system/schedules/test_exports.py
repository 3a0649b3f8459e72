"""The planner modules' ``__all__``: sorted, complete, and the SPEC's names are there."""

from __future__ import annotations

import importlib

import pytest

from tests.unit.test_exported_members import ruff_sort_key

MODULES = [
    "jobledger.planning.planner",
    "jobledger.planning.explain",
    "jobledger.planning.declare",
    "jobledger.store.operations.schedules",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_exists(name):
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=ruff_sort_key)
    assert [n for n in exported if not hasattr(module, n)] == []


def test_the_spec_names():
    from jobledger.planning.explain import Explanation
    from jobledger.planning.planner import Planner, PlanReport, SkippedSlots

    assert {"enqueued", "skipped", "next_due_at", "planned_jobs"} <= set(
        PlanReport.__dataclass_fields__
    )
    assert {"job_id", "scheduled_for", "last", "count", "reason"} <= set(
        SkippedSlots.__dataclass_fields__
    )
    assert {
        "next_fire_times",
        "notes",
        "last_planned",
        "misfire",
        "recent_skips",
        "schedule",
        "enabled",
        "revision",
    } <= set(Explanation.__dataclass_fields__)
    assert callable(Planner.tick)
