"""The authority envelope: who asked for a job, in the reference's canonical shape.

Every job carries one (``normalize_authority`` validates and normalizes it); the store keeps each
distinct envelope once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .contract import (
    AUTHORITY_ENVELOPE_VERSION,
    MAX_CAPABILITIES,
    is_integral_number,
    normalize_identifier,
    utf16_sort_key,
)
from .errors import InvalidArgument

__all__ = ["normalize_authority"]


_AUTHORITY_KEYS: Final = frozenset(
    {
        "schemaVersion",
        "principal",
        "tenantId",
        "workspaceId",
        "requestedCapabilities",
        "authorizationRefs",
    }
)
_REF_KEYS: Final = frozenset(
    {
        "decisionId",
        "policyRevision",
        "schedulerPolicyRevision",
        "grantIds",
        "approvalIds",
        "delegationIds",
    }
)


def _require_plain_object(value: object, field: str) -> Mapping[str, Any]:
    if type(value) is not dict:
        raise InvalidArgument(f"{field} must be a plain object")
    return value


def _reject_unknown(value: Mapping[str, Any], allowed: frozenset[str], field: str) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise InvalidArgument(f"{field} contains unknown fields", details={"fields": unknown})


def _optional_identifier(value: object, field: str) -> str | None:
    return None if value is None else normalize_identifier(value, field)


def _identifier_list(value: object, field: str) -> list[str]:
    if value is None:
        return []
    if type(value) not in (list, tuple):
        raise InvalidArgument(f"{field} must be an array of identifiers")
    items: list[object] = list(value)  # type: ignore[call-overload]
    if len(items) > MAX_CAPABILITIES:
        raise InvalidArgument(f"{field} must contain at most {MAX_CAPABILITIES} identifiers")
    unique = {normalize_identifier(item, field) for item in items}
    return sorted(unique, key=utf16_sort_key)


def normalize_authority(value: object) -> dict[str, Any]:
    """Normalize an authority envelope (descriptive evidence of who asked; never a grant)."""
    envelope = _require_plain_object(value, "authority")
    _reject_unknown(envelope, _AUTHORITY_KEYS, "authority")
    version = envelope.get("schemaVersion", AUTHORITY_ENVELOPE_VERSION)
    if not (is_integral_number(version) and version == AUTHORITY_ENVELOPE_VERSION):
        raise InvalidArgument("authority.schemaVersion must be 1")
    principal = _require_plain_object(envelope.get("principal"), "authority.principal")
    _reject_unknown(principal, frozenset({"type", "id"}), "authority.principal")
    refs_input = envelope.get("authorizationRefs")
    refs_in = (
        {}
        if refs_input is None
        else _require_plain_object(refs_input, "authority.authorizationRefs")
    )
    _reject_unknown(refs_in, _REF_KEYS, "authority.authorizationRefs")

    refs: dict[str, Any] = {
        "decisionId": _optional_identifier(
            refs_in.get("decisionId"), "authority.authorizationRefs.decisionId"
        ),
        "policyRevision": _optional_identifier(
            refs_in.get("policyRevision"), "authority.authorizationRefs.policyRevision"
        ),
    }
    if "schedulerPolicyRevision" in refs_in:
        refs["schedulerPolicyRevision"] = _optional_identifier(
            refs_in["schedulerPolicyRevision"],
            "authority.authorizationRefs.schedulerPolicyRevision",
        )
    for key in ("grantIds", "approvalIds", "delegationIds"):
        refs[key] = _identifier_list(refs_in.get(key), f"authority.authorizationRefs.{key}")
    return {
        "schemaVersion": AUTHORITY_ENVELOPE_VERSION,
        "principal": {
            "type": normalize_identifier(
                principal.get("type"), "authority.principal.type", max_length=64
            ),
            "id": normalize_identifier(principal.get("id"), "authority.principal.id"),
        },
        "tenantId": _optional_identifier(envelope.get("tenantId"), "authority.tenantId"),
        "workspaceId": _optional_identifier(envelope.get("workspaceId"), "authority.workspaceId"),
        "requestedCapabilities": _identifier_list(
            envelope.get("requestedCapabilities"), "authority.requestedCapabilities"
        ),
        "authorizationRefs": refs,
    }
