"""``jobledger.schedules`` exports: sorted, complete, and the names the SPEC promises."""

from __future__ import annotations

import importlib
import types

import pytest

import jobledger.schedules
from tests.unit.test_exported_members import ruff_sort_key

MODULES = [
    "jobledger.schedules",
    "jobledger.schedules.cron",
    "jobledger.schedules.cron_fields",
    "jobledger.schedules.cron_search",
    "jobledger.schedules.describe",
    "jobledger.schedules.json_format",
    "jobledger.schedules.policy",
    "jobledger.schedules.triggers",
    "jobledger.schedules.zones",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_exists(name):
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=ruff_sort_key)
    assert [n for n in exported if not hasattr(module, n)] == []


@pytest.mark.parametrize("name", MODULES[1:])
def test_modules_export_their_public_classes_and_functions(name):
    module = importlib.import_module(name)
    defined = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and isinstance(value, type | types.FunctionType)
        and value.__module__ == module.__name__
    }
    assert defined - set(module.__all__) == set()


def test_package_exports_the_spec_names():
    for name in [
        "Cron",
        "Every",
        "Once",
        "MisfirePolicy",
        "parse_trigger",
        "parse_schedule",
        "schedule_json",
        "validate_trigger_json",
        "jitter_offset_ms",
        "trigger_key",
    ]:
        assert name in jobledger.schedules.__all__
