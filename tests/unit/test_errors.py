"""The exception tree: stable codes, details, ``to_dict``, ``error_for_code``."""

from __future__ import annotations

import json

import pytest

import jobledger
from jobledger import errors
from jobledger.errors import (
    AdjudicationConflict,
    ClaimConflict,
    Conflict,
    DataCorrupt,
    IdempotencyPayloadMismatch,
    InvalidArgument,
    JobDisabled,
    JobFailed,
    LeaseLost,
    MigrationRequired,
    NotFound,
    RequeueConflict,
    RevisionConflict,
    RuntimeRejection,
    SchedulerError,
    SchemaCorrupt,
    SchemaError,
    SchemaUnknown,
    StorageUnavailable,
    StoreClosed,
    StoreMisconfigured,
    StoreNotFound,
    UnsafePath,
    error_for_code,
)

# (class, its default code, its direct parent)
TREE = [
    (InvalidArgument, "SCHEDULER_INVALID_ARGUMENT", SchedulerError),
    (NotFound, "SCHEDULER_NOT_FOUND", SchedulerError),
    (Conflict, "SCHEDULER_CONFLICT", SchedulerError),
    (RevisionConflict, "SCHEDULER_REVISION_CONFLICT", Conflict),
    (ClaimConflict, "SCHEDULER_CLAIM_CONFLICT", Conflict),
    (IdempotencyPayloadMismatch, "SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH", Conflict),
    (RequeueConflict, "SCHEDULER_REQUEUE_EVIDENCE_CONFLICT", Conflict),
    (AdjudicationConflict, "SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT", Conflict),
    (JobFailed, "SCHEDULER_JOB_FAILED", SchedulerError),
    (JobDisabled, "SCHEDULER_JOB_DISABLED", SchedulerError),
    (LeaseLost, "SCHEDULER_LEASE_LOST", SchedulerError),
    (StoreClosed, "SCHEDULER_STORE_CLOSED", SchedulerError),
    (StoreNotFound, "SCHEDULER_STORE_NOT_FOUND", NotFound),
    (UnsafePath, "SCHEDULER_UNSAFE_PATH", SchedulerError),
    (SchemaError, "SCHEDULER_SCHEMA_CORRUPT", SchedulerError),
    (SchemaCorrupt, "SCHEDULER_SCHEMA_CORRUPT", SchemaError),
    (SchemaUnknown, "SCHEDULER_SCHEMA_UNKNOWN", SchemaError),
    (MigrationRequired, "SCHEDULER_MIGRATION_REQUIRED", SchemaError),
    (DataCorrupt, "SCHEDULER_DATA_CORRUPT", SchedulerError),
    (StorageUnavailable, "SCHEDULER_STORAGE_UNAVAILABLE", SchedulerError),
    (StoreMisconfigured, "SCHEDULER_STORE_MISCONFIGURED", SchedulerError),
    (RuntimeRejection, "SCHEDULER_RUNTIME_ERROR", SchedulerError),
]
ids = [cls.__name__ for cls, _, _ in TREE]


def test_scheduler_error_is_the_root_of_every_exported_error():
    assert issubclass(SchedulerError, Exception)
    exported = [getattr(errors, name) for name in errors.__all__]
    classes = [obj for obj in exported if isinstance(obj, type)]
    assert len(classes) == len(TREE) + 1
    for cls in classes:
        assert issubclass(cls, SchedulerError), cls
    assert {cls for cls, _, _ in TREE} == set(classes) - {SchedulerError}


@pytest.mark.parametrize(("cls", "code", "parent"), TREE, ids=ids)
def test_tree_shape_and_default_codes(cls, code, parent):
    assert cls.__bases__ == (parent,)
    err = cls("something went wrong")
    assert err.code == code
    assert err.message == "something went wrong"
    assert err.details is None
    assert err.args == ("something went wrong",)


@pytest.mark.parametrize(("cls", "code", "parent"), TREE, ids=ids)
def test_catching_the_root_catches_every_error(cls, code, parent):
    with pytest.raises(SchedulerError) as info:
        raise cls("boom", details={"k": 1})
    assert type(info.value) is cls
    assert info.value.code == code


def test_root_defaults():
    err = SchedulerError("plain")
    assert err.code == "SCHEDULER_ERROR"
    assert err.details is None


def test_code_and_details_can_be_given():
    details = {"expected": 2, "actual": 3}
    err = Conflict("revision moved", code="SCHEDULER_MIGRATION_CONFLICT", details=details)
    assert err.code == "SCHEDULER_MIGRATION_CONFLICT"
    assert err.details == {"expected": 2, "actual": 3}


def test_str_and_repr():
    err = LeaseLost("lease expired", details={"fence": 3})
    assert str(err) == "SCHEDULER_LEASE_LOST: lease expired"
    assert repr(err) == "LeaseLost(code='SCHEDULER_LEASE_LOST', message='lease expired')"


def test_to_dict_is_json_able():
    err = StorageUnavailable(
        "Scheduler storage is unavailable",
        details={"phase": "write", "storageCode": "SQLITE_FULL", "commitState": "unknown"},
    )
    as_dict = err.to_dict()
    assert as_dict == {
        "code": "SCHEDULER_STORAGE_UNAVAILABLE",
        "message": "Scheduler storage is unavailable",
        "details": {"phase": "write", "storageCode": "SQLITE_FULL", "commitState": "unknown"},
    }
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert InvalidArgument("bad").to_dict() == {
        "code": "SCHEDULER_INVALID_ARGUMENT",
        "message": "bad",
        "details": None,
    }


@pytest.mark.parametrize(
    ("cls", "code"),
    [(cls, code) for cls, code, _ in TREE if cls is not SchemaError],
    ids=[name for name in ids if name != "SchemaError"],
)
def test_error_for_code_picks_the_subclass(cls, code):
    err = error_for_code(code, "message", {"x": 1})
    assert type(err) is cls
    assert err.code == code
    assert err.message == "message"
    assert err.details == {"x": 1}


def test_error_for_code_schema_corrupt_picks_the_leaf():
    # SchemaError shares its default code with SchemaCorrupt; the concrete leaf wins.
    assert type(error_for_code("SCHEDULER_SCHEMA_CORRUPT", "m")) is SchemaCorrupt


@pytest.mark.parametrize(
    "code",
    ["SCHEDULER_RUNTIME_INVALID_LEASE", "SCHEDULER_RUNTIME_AUTHORIZATION_DENIED"],
)
def test_error_for_code_runtime_family(code):
    err = error_for_code(code, "no")
    assert type(err) is RuntimeRejection
    assert err.code == code


@pytest.mark.parametrize(
    "code",
    [
        "SCHEDULER_REQUEUE_CONFLICT",
        "SCHEDULER_MIGRATION_CONFLICT",
        "SCHEDULER_OCCURRENCE_CONTROL_CONFLICT",
        "SCHEDULER_FENCE_CONFLICT",
    ],
)
def test_error_for_code_other_conflicts_are_conflicts(code):
    err = error_for_code(code, "no")
    assert type(err) is Conflict
    assert err.code == code


@pytest.mark.parametrize("code", ["SCHEDULER_SOMETHING_NEW", "SCHEDULER_ERROR", "ENOSPC"])
def test_error_for_code_unknown_codes_fall_back_to_the_root(code):
    err = error_for_code(code, "huh")
    assert type(err) is SchedulerError
    assert err.code == code
    assert err.details is None


def test_package_reexports_the_same_classes():
    for cls, _, _ in TREE:
        assert getattr(jobledger, cls.__name__) is cls
    assert jobledger.SchedulerError is SchedulerError
