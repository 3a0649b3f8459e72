"""What an enqueue may attach to an occurrence, and what its handler reports (issue 32).

Tags and metadata given at enqueue (``tags=``, ``meta=``), the progress a handler reports
(``ctx.progress``), and the idempotency key an operator finds work by. Each refusal is
``SCHEDULER_INVALID_ARGUMENT`` whose details name the ``field`` and the ``reason`` (``"type"``,
``"count"``, ``"length"``, ``"characters"``, ``"size"``, ``"value"``), and changes nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from .. import contract
from ..errors import InvalidArgument

__all__ = [
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MAX_META_BYTES",
    "MAX_PROGRESS_MESSAGE",
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "idempotency_trigger_key",
    "normalize_meta",
    "normalize_progress",
    "normalize_tag",
    "normalize_tags",
]

# An idempotency key as App.enqueue takes it (app/base.py MAX_KEY_LENGTH): its trigger key is
# "key:<key>".
MAX_IDEMPOTENCY_KEY_LENGTH = 200


def idempotency_trigger_key(value: object) -> str:
    """The trigger key of an idempotency key given to ``App.enqueue(key=…)`` (``"key:<key>"``),
    for lookups by key."""
    key = contract.normalize_identifier(value, "key", max_length=MAX_IDEMPOTENCY_KEY_LENGTH)
    return f"key:{key}"


# Tags and metadata at enqueue (issue 32): a few short tags an operator filters by, and a small
# JSON object shown with the occurrence. Refused with SCHEDULER_INVALID_ARGUMENT, whose details
# say the field and the reason ("type", "count", "length", "characters", "size").
MAX_TAGS = 16
MAX_TAG_LENGTH = 64
MAX_META_BYTES = 4096
_TAG = re.compile(r"[A-Za-z0-9_.:/=@+-]+")


def _refuse(field: str, reason: str, message: str, **details: Any) -> InvalidArgument:
    return InvalidArgument(message, details={"field": field, "reason": reason, **details})


def normalize_tag(value: object, field: str = "tags") -> str:
    """One tag: 1..64 characters, letters, digits and ``_ - . : / = @ +`` (``customer:21``)."""
    if not isinstance(value, str):
        raise _refuse(field, "type", f"each of {field} must be a string")
    if not 1 <= len(value) <= MAX_TAG_LENGTH:
        raise _refuse(
            field,
            "length",
            f"a tag has 1 to {MAX_TAG_LENGTH} characters (got {len(value)})",
            limit=MAX_TAG_LENGTH,
        )
    if _TAG.fullmatch(value) is None:
        raise _refuse(
            field,
            "characters",
            f"tag {value!r} may hold only letters, digits and _ - . : / = @ +",
        )
    return value


def normalize_tags(value: object) -> tuple[tuple[str, ...], str | None]:
    """``tags=``: a list of tags (see :func:`normalize_tag`), duplicates dropped in order, at
    most 16; returns them and their stored JSON (``None`` for none)."""
    if value is None:
        return (), None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise _refuse("tags", "type", "tags must be a list of strings")
    tags = tuple(dict.fromkeys(normalize_tag(tag) for tag in value))
    if len(tags) > MAX_TAGS:
        raise _refuse(
            "tags",
            "count",
            f"at most {MAX_TAGS} tags per occurrence",
            count=len(tags),
            limit=MAX_TAGS,
        )
    return tags, (contract.canonical_json(list(tags)) if tags else None)


def normalize_meta(value: object) -> str | None:
    """``meta=``: a JSON object of at most 4,096 bytes (canonical JSON, UTF-8); its stored text
    (``None`` for none)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _refuse("meta", "type", "meta must be a JSON object (a dict with string keys)")
    text = contract.encode_trusted_json(contract.normalize_json(value, "meta"))
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_META_BYTES:
        raise _refuse(
            "meta",
            "size",
            f"meta is at most {MAX_META_BYTES} bytes as JSON (got {size})",
            size=size,
            limit=MAX_META_BYTES,
        )
    return text


MAX_PROGRESS_MESSAGE = 500


def normalize_progress(done: object, total: object, message: object) -> dict[str, Any]:
    """``ctx.progress(done, total, message)``: ``done`` a finite number >= 0, ``total`` one > 0
    (or ``None``), ``message`` at most 500 characters (or ``None``)."""

    def number(value: object, field: str, *, positive: bool) -> int | float:
        if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
            value = -1
        assert isinstance(value, (int, float))
        if value < 0 or (positive and value == 0):
            bound = "> 0" if positive else ">= 0"
            raise _refuse(field, "value", f"progress {field} must be a finite number {bound}")
        return value

    fields: dict[str, Any] = {"done": number(done, "done", positive=False), "total": None}
    if total is not None:
        fields["total"] = number(total, "total", positive=True)
    fields["message"] = None
    if message is not None:
        text = contract.scalar_text(message, "message") if isinstance(message, str) else None
        if text is None or len(text) > MAX_PROGRESS_MESSAGE:
            raise _refuse(
                "message",
                "length",
                f"progress message must be a string of at most {MAX_PROGRESS_MESSAGE} characters",
            )
        fields["message"] = text
    return fields
