"""``__all__`` stays sorted (ruff RUF022 order) and complete, like httpx's test."""

from __future__ import annotations

import re
import types

import pytest

import jobledger
import jobledger.app
import jobledger.contract
import jobledger.durations
import jobledger.engine.attempt
import jobledger.engine.batching
import jobledger.engine.handlers
import jobledger.engine.heartbeat
import jobledger.engine.keeper
import jobledger.engine.options
import jobledger.engine.retry
import jobledger.engine.runtime
import jobledger.engine.watchdog
import jobledger.engine.worker
import jobledger.errors
import jobledger.models
import jobledger.testing

# Modules whose __all__ lists every public class and function they define. (options, runtime
# and attempt also define helpers used only inside the package, deliberately not exported.)
COMPLETE = [
    jobledger.app,
    jobledger.engine.batching,
    jobledger.contract,
    jobledger.durations,
    jobledger.errors,
    jobledger.engine.handlers,
    jobledger.engine.heartbeat,
    jobledger.engine.keeper,
    jobledger.models,
    jobledger.engine.retry,
    jobledger.testing,
    jobledger.engine.watchdog,
    jobledger.engine.worker,
]
MODULES = [
    jobledger,
    jobledger.engine.attempt,
    jobledger.engine.options,
    jobledger.engine.runtime,
    *COMPLETE,
]


def ruff_sort_key(name: str) -> tuple[int, list[object]]:
    """RUF022's isort-style order: SCREAMING_CASE, then CamelCase, then the rest; natural sort."""
    if len(name) > 1 and name.isupper():
        group = 0
    elif name[:1].isupper():
        group = 1
    else:
        group = 2
    natural = [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
    return group, natural


def test_sort_key_matches_ruff_on_known_orders():
    names = [
        "zeta",
        "Alpha",
        "UNSET",
        "__version__",
        "SQLiteStore",
        "SchedulerError",
        "MAX_2",
        "MAX_10",
    ]
    assert sorted(names, key=ruff_sort_key) == [
        "MAX_2",
        "MAX_10",
        "UNSET",
        "Alpha",
        "SQLiteStore",
        "SchedulerError",
        "__version__",
        "zeta",
    ]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_is_sorted_without_duplicates(module):
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    assert exported == sorted(exported, key=ruff_sort_key)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_exported_name_exists(module):
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


def test_package_exports_every_public_name():
    public = {
        name
        for name, value in vars(jobledger).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - set(jobledger.__all__) == set()


@pytest.mark.parametrize("module", COMPLETE, ids=lambda m: m.__name__)
def test_modules_export_every_public_class_and_function_they_define(module):
    defined = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and isinstance(value, (type, types.FunctionType))
        and value.__module__ == module.__name__
    }
    assert defined - set(module.__all__) == set()


def test_package_reexports_the_spec_api():
    for name in [
        "open_store",
        "derive_occurrence_identity",
        "canonical_json",
        "normalize_authority",
        "SchedulerError",
        "__version__",
    ]:
        assert name in jobledger.__all__
    assert jobledger.canonical_json is jobledger.contract.canonical_json
    assert jobledger.SchedulerError is jobledger.errors.SchedulerError


def test_the_types_users_annotate_with_are_exported():
    # Issue 8: handlers, authorizers, options and batch inputs can be annotated from the top.
    for name, home in [
        ("Authorizer", jobledger.engine.handlers),
        ("Handler", jobledger.engine.handlers),
        ("JobContext", jobledger.engine.handlers),
        ("HeartbeatDriver", jobledger.engine.heartbeat),
        ("WorkerOptions", jobledger.engine.options),
        ("EnqueueRequest", jobledger.models),
        ("Renewal", jobledger.models),
        ("Settlement", jobledger.models),
        ("RuntimeRunSummary", jobledger.engine.runtime),
        ("WorkerSummary", jobledger.engine.worker),
        ("UnsafePath", jobledger.errors),
        ("StoreNotFound", jobledger.errors),
    ]:
        assert name in jobledger.__all__
        assert getattr(jobledger, name) is getattr(home, name)


def test_unsafe_path_has_its_own_class_and_code():
    assert issubclass(jobledger.UnsafePath, jobledger.SchedulerError)
    assert jobledger.UnsafePath("x").code == "SCHEDULER_UNSAFE_PATH"
    assert issubclass(jobledger.StoreNotFound, jobledger.NotFound)
