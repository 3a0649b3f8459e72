"""The pure vocabulary of jobledger: validation, canonical JSON, authority, occurrence identity.

Nothing here touches storage or time. Every rule mirrors the reference implementation so that a
database written by either side is read identically by the other, and so that occurrence ids
derived here equal the ones the reference derives (they are SHA-256 digests of canonical JSON).

Canonical JSON is **byte-identical to ECMAScript ``JSON.stringify``** of the key-sorted value:

* object keys sorted by UTF-16 code units, except that *array-index* keys ("0".."4294967294",
  canonical decimal) always come first in ascending numeric order, as every ECMAScript engine
  enumerates them;
* numbers printed with ECMAScript Number-to-String (``1`` not ``1.0``, ``1e+21``, ``1.5e-7``);
* strings escape ``"``, ``\\`` and control characters (``\\b \\f \\n \\r \\t``, others
  ``\\u00xx``) and a lone surrogate (``\\udxxx``, lowercase, as well-formed ``JSON.stringify``
  does); everything else is emitted raw as UTF-8.

Text: a high and a low surrogate next to each other in a Python ``str`` are the one astral
character they spell in UTF-16 (as in ECMAScript). A *lone* surrogate is a UTF-16 code unit
``JSON.stringify`` writes as its escape, so JSON strings and keys, and the identity material of
:func:`derive_occurrence_identity`, accept it and hash what the reference hashes (SPEC §2 "Text").
Only text stored or looked up raw — an identifier bound to SQL — refuses it
(``SCHEDULER_INVALID_ARGUMENT`` naming the field): UTF-8 cannot encode it, and it is also how
Python spells an invalid byte it decoded with ``surrogateescape`` (``U+DC80``–``U+DCFF``, e.g.
from a command line).

Python specifics the reference does not have: ``bool`` is never an integer; an ``int`` is accepted
in JSON only when an IEEE 754 double holds it exactly (so no value silently changes), and
integral floats up to 2**53 are stored as the integer they equal.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from decimal import Decimal
from typing import Any, Final

from .errors import DataCorrupt, InvalidArgument

__all__ = [
    "ADJUDICATION_DECISIONS",
    "AUTHORITY_ENVELOPE_VERSION",
    "CONTRACT_VERSION",
    "DEFAULT_EXECUTION_ERROR",
    "DEFAULT_HISTORY_LIMIT",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_QUEUE",
    "LIVE_STATUSES",
    "LOST_LEASE_POLICIES",
    "MAX_BATCH_SIZE",
    "MAX_ENQUEUE_BATCH",
    "MAX_HISTORY_LIMIT",
    "MAX_JOB_ATTEMPTS",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_LEASE_MS",
    "MAX_PARENTS",
    "MAX_PARTITION_LENGTH",
    "MAX_PRIORITY",
    "MAX_QUEUE_NAME_LENGTH",
    "MAX_SAFE_INTEGER",
    "MAX_SNOOZES",
    "MAX_SNOOZE_DELAY_MS",
    "MIN_PRIORITY",
    "NO_RESULT",
    "OCCURRENCE_STATUSES",
    "OUTCOME_UNKNOWN_CODE",
    "PARENT_FAILURE_POLICIES",
    "PRUNABLE_STATUSES",
    "SNOOZE_LIMIT_CODE",
    "TERMINAL_STATUSES",
    "canonical_json",
    "derive_occurrence_identity",
    "ecmascript_number",
    "encode_trusted_json",
    "escape_surrogates",
    "is_integral_number",
    "is_safe_int",
    "json_string",
    "json_text",
    "normalize_epoch_ms",
    "normalize_history_limit",
    "normalize_identifier",
    "normalize_json",
    "normalize_lease_ms",
    "normalize_lost_lease_policy",
    "normalize_max_attempts",
    "normalize_parent_failure_policy",
    "normalize_partition",
    "normalize_positive_int",
    "normalize_priority",
    "normalize_queue_name",
    "occurrence_identity",
    "parse_stored_json",
    "scalar_text",
    "utf16_sort_key",
]

CONTRACT_VERSION: Final = 1
AUTHORITY_ENVELOPE_VERSION: Final = 1
DEFAULT_MAX_ATTEMPTS: Final = 3
MAX_JOB_ATTEMPTS: Final = 32
DEFAULT_HISTORY_LIMIT: Final = 50
MAX_HISTORY_LIMIT: Final = 200
MAX_JSON_BYTES: Final = 1_048_576
MAX_JSON_DEPTH: Final = 64
MAX_LEASE_MS: Final = 24 * 60 * 60 * 1000
MAX_SAFE_INTEGER: Final = 2**53 - 1
MAX_IDENTIFIER_LENGTH: Final = 256
MAX_CAPABILITIES: Final = 256
# The most occurrences one claim_batch / settle_batch transaction may touch: enough to amortise
# the commit, small enough that the write lock is never held for long (~0.1 s at 1,000).
MAX_BATCH_SIZE: Final = 1000

OCCURRENCE_STATUSES: Final = (
    "blocked",
    "queued",
    "running",
    "retry_wait",
    "succeeded",
    "dead_letter",
    "cancelled",
)
TERMINAL_STATUSES: Final = frozenset({"succeeded", "dead_letter", "cancelled"})
LIVE_STATUSES: Final = frozenset({"blocked", "queued", "running", "retry_wait"})
# Queues, priorities and partitions (SPEC §7).
DEFAULT_QUEUE: Final = "default"
MAX_QUEUE_NAME_LENGTH: Final = 64
MAX_PARTITION_LENGTH: Final = 256
MIN_PRIORITY: Final = -100
MAX_PRIORITY: Final = 100
LOST_LEASE_POLICIES: Final = ("retry", "adjudicate")
PARENT_FAILURE_POLICIES: Final = ("cancel", "run")
# The most parents one occurrence may wait for (SPEC §10).
MAX_PARENTS: Final = 1000
# Snoozes (SPEC §9): how often one occurrence may snooze — a handler that snoozes forever would
# otherwise never end — and the longest single snooze. The snooze past the cap is a dead letter
# with SNOOZE_LIMIT_CODE.
MAX_SNOOZES: Final = 100
MAX_SNOOZE_DELAY_MS: Final = 366 * 86_400_000
SNOOZE_LIMIT_CODE: Final = "SCHEDULER_SNOOZE_LIMIT"
# Outcome-unknown adjudication (SPEC §9, upstream §3.7).
OUTCOME_UNKNOWN_CODE: Final = "SCHEDULER_OUTCOME_UNKNOWN"
ADJUDICATION_DECISIONS: Final = ("applied", "not_applied")


class _NoResult:
    """The type of :data:`NO_RESULT`: "no result given", where ``None`` is a result."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_RESULT"


# An ``applied`` adjudication given no result (``None`` is a result a handler may return).
NO_RESULT: Final = _NoResult()
# What a failed settle records when it names no error.
DEFAULT_EXECUTION_ERROR: Final = {"code": "execution_failed", "message": "Execution failed"}
# The statuses retention may remove, in the order of OCCURRENCE_STATUSES.
PRUNABLE_STATUSES: Final = tuple(
    status for status in OCCURRENCE_STATUSES if status in TERMINAL_STATUSES
)
# The most occurrences one enqueue_batch transaction may write.
MAX_ENQUEUE_BATCH: Final = 10_000

IDENTITY_PREFIX: Final = b"chainlesschain.scheduler.occurrence.v1\x00"

# ECMAScript String.prototype.trim strips WhiteSpace and LineTerminator code points. Python's
# str.strip() differs (it strips U+001C..U+001F and U+0085, and keeps U+FEFF), so spell it out.
_JS_WHITESPACE: Final = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_ARRAY_INDEX: Final = re.compile(r"0|[1-9][0-9]*")
_MAX_ARRAY_INDEX: Final = 4_294_967_294


def is_safe_int(value: object) -> bool:
    """True for a Python ``int`` (never ``bool``) within ±(2**53 − 1)."""
    return type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


def is_integral_number(value: object) -> bool:
    # The reference uses Number.isSafeInteger, which accepts 3.0; mirror that for floats.
    if type(value) is float:
        return math.isfinite(value) and value.is_integer() and abs(value) <= MAX_SAFE_INTEGER
    return is_safe_int(value)


def normalize_positive_int(value: object, field: str) -> int:
    """A safe integer ≥ 1 (``bool`` rejected, ``3.0`` accepted as 3)."""
    if not is_integral_number(value) or value < 1:  # type: ignore[operator]
        raise InvalidArgument(f"{field} must be a positive integer")
    return int(value)  # type: ignore[call-overload,no-any-return]


def normalize_epoch_ms(value: object, field: str) -> int:
    """A non-negative safe integer of epoch milliseconds."""
    if not is_integral_number(value) or value < 0:  # type: ignore[operator]
        raise InvalidArgument(f"{field} must be a non-negative safe-integer epoch ms")
    return int(value)  # type: ignore[call-overload,no-any-return]


def normalize_max_attempts(value: object = DEFAULT_MAX_ATTEMPTS) -> int:
    if not is_integral_number(value) or not 1 <= value <= MAX_JOB_ATTEMPTS:  # type: ignore[operator]
        raise InvalidArgument(f"maxAttempts must be an integer between 1 and {MAX_JOB_ATTEMPTS}")
    return int(value)  # type: ignore[call-overload,no-any-return]


def normalize_history_limit(value: object = DEFAULT_HISTORY_LIMIT) -> int:
    if value is None:
        return DEFAULT_HISTORY_LIMIT
    if not is_integral_number(value) or value < 1:  # type: ignore[operator]
        raise InvalidArgument("history limit must be a positive integer")
    return min(int(value), MAX_HISTORY_LIMIT)  # type: ignore[call-overload,no-any-return]


def normalize_lease_ms(value: object) -> int:
    lease = normalize_positive_int(value, "leaseMs")
    if lease > MAX_LEASE_MS:
        raise InvalidArgument(f"leaseMs must not exceed {MAX_LEASE_MS}")
    return lease


def _utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


_FORBIDDEN_IDENTIFIER_CHARACTER: Final = re.compile("[\x00-\x1f\x7f]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def scalar_text(text: str, field: str) -> str:
    """``text`` as Unicode scalar values, or :class:`InvalidArgument` naming ``field``.

    A high surrogate followed by a low one becomes the astral character the pair spells in
    UTF-16 (an ECMAScript string holding those two code units *is* that character); a lone
    surrogate — which no UTF-8 encoder can write, and which is how Python decodes an invalid
    byte with ``surrogateescape`` — is refused. The check of every identifier stored or looked
    up as raw text (JSON text keeps lone surrogates: :func:`json_text`).
    """
    # isascii() is O(1) on CPython's compact strings: the common case costs nothing.
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    lone = _SURROGATE.search(joined)
    if lone is None:
        return joined
    point = ord(lone.group(0))
    details: dict[str, Any] = {"field": field, "codePoint": f"U+{point:04X}"}
    hint = ""
    if 0xDC80 <= point <= 0xDCFF:  # surrogateescape's spelling of the byte point - 0xDC00
        details["byte"] = f"0x{point - 0xDC00:02x}"
        hint = f" (how Python reads the byte {details['byte']}, which is not valid UTF-8)"
    raise InvalidArgument(
        f"{field} is not valid Unicode text: it holds a lone surrogate, U+{point:04X}{hint}",
        details=details,
    )


def json_text(text: str) -> str:
    """``text`` as ECMAScript reads it: a high surrogate followed by a low one joined into the
    astral character they spell; a lone surrogate kept (JSON.stringify escapes it)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def escape_surrogates(text: str) -> str:
    """``text`` with every surrogate left in it written as its ``\\uXXXX`` escape: for output
    (a terminal, a web page, a JSON document made with ``ensure_ascii=False``) that must be
    UTF-8. Inside a JSON string the escape reads back as the same code unit, as
    ``JSON.stringify`` writes it."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group(0)):04x}", text)


def normalize_identifier(
    value: object,
    field: str,
    *,
    max_length: int = MAX_IDENTIFIER_LENGTH,
    lone_surrogates: bool = False,
) -> str:
    """Trim ECMAScript whitespace; reject empty, too long (UTF-16 units), C0/DEL characters or
    lone surrogates (see :func:`scalar_text`). ``lone_surrogates=True`` keeps them, as the
    reference does, for an identifier that is only JSON material (the occurrence identity),
    never stored or looked up as raw text."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a string")
    joined = json_text(value) if lone_surrogates else scalar_text(value, field)
    text = joined.strip(_JS_WHITESPACE)
    # A string of n code points has between n and 2n UTF-16 units: only encode when it matters.
    too_long = len(text) > max_length or (
        2 * len(text) > max_length and _utf16_length(text) > max_length
    )
    if not text or too_long or _FORBIDDEN_IDENTIFIER_CHARACTER.search(text):
        raise InvalidArgument(f"{field} is not a valid identifier")
    return text


def normalize_queue_name(value: object, field: str = "queue") -> str:
    """A queue name: an identifier of at most 64 characters (SPEC §7)."""
    return normalize_identifier(value, field, max_length=MAX_QUEUE_NAME_LENGTH)


def normalize_partition(value: object, field: str = "partition") -> str:
    """A partition (``"customer:42"``): an identifier of at most 256 characters."""
    return normalize_identifier(value, field, max_length=MAX_PARTITION_LENGTH)


def normalize_priority(value: object, field: str = "priority") -> int:
    """A priority: an integer from -100 to 100; larger runs first (``bool`` is refused)."""
    if type(value) is not int or not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise InvalidArgument(
            f"{field} must be an integer between {MIN_PRIORITY} and {MAX_PRIORITY}",
            details={"field": field},
        )
    return value


def normalize_lost_lease_policy(value: object, field: str = "on_lost_lease") -> str:
    """What a lost lease becomes: ``"retry"`` (run again) or ``"adjudicate"`` (SPEC §9)."""
    if value not in LOST_LEASE_POLICIES:
        raise InvalidArgument(
            f"{field} must be one of {', '.join(LOST_LEASE_POLICIES)}", details={"field": field}
        )
    return str(value)


def normalize_parent_failure_policy(value: object, field: str = "on_parent_failure") -> str:
    """What a failed parent does to its child: ``"cancel"`` it or ``"run"`` it (SPEC §10)."""
    if value not in PARENT_FAILURE_POLICIES:
        raise InvalidArgument(
            f"{field} must be one of {', '.join(PARENT_FAILURE_POLICIES)}",
            details={"field": field},
        )
    return str(value)


# ---------------------------------------------------------------------------------------------
# JSON


def utf16_sort_key(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare exactly like UTF-16 code units, which is how ECMAScript's
    # default sort orders strings (it differs from code-point order only for astral characters).
    return key.encode("utf-16-be", "surrogatepass")


def _is_array_index(key: str) -> bool:
    return _ARRAY_INDEX.fullmatch(key) is not None and int(key) <= _MAX_ARRAY_INDEX


def _ordered_keys(keys: list[str]) -> list[str]:
    indexes = sorted((k for k in keys if _is_array_index(k)), key=int)
    names = sorted((k for k in keys if not _is_array_index(k)), key=utf16_sort_key)
    return indexes + names


def normalize_json(value: object, field: str = "value") -> Any:
    """Return a plain JSON value (dict/list/str/int/float/bool/None) with keys in canonical order.

    Raises :class:`InvalidArgument` for non-JSON values, cycles, non-finite numbers, integers a
    double cannot hold, nesting deeper than 64, or an encoding larger than 1 MiB. Strings and keys
    are read as ECMAScript reads them (:func:`json_text`): a lone surrogate is kept, and written
    as its ``\\udxxx`` escape.
    """
    normalized = _normalize(value, field, 0, set())
    size = len(_encode(normalized).encode("utf-8"))
    if size > MAX_JSON_BYTES:
        raise InvalidArgument(f"{field} exceeds {MAX_JSON_BYTES} encoded bytes")
    return normalized


def _normalize(value: object, field: str, depth: int, active: set[int]) -> Any:
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgument(f"{field} exceeds maximum JSON depth")
    if value is None or type(value) is bool:
        return value
    if type(value) is str:
        return json_text(value)
    if type(value) is int:
        try:
            exact = float(value) == value
        except OverflowError:  # beyond the largest double: no JSON number can hold it
            exact = False
        if not exact:
            raise InvalidArgument(
                f"{field} contains an integer that a JSON number (IEEE 754 double) cannot hold"
            )
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise InvalidArgument(f"{field} contains a non-finite number")
        if value.is_integer() and abs(value) <= 2**53:
            return int(value)  # also turns -0.0 into 0, as JSON.stringify does
        return value
    if type(value) in (list, tuple, dict):
        marker = id(value)
        if marker in active:
            raise InvalidArgument(f"{field} contains a cycle")
        active.add(marker)
        try:
            if type(value) is dict:
                for key in value:
                    if type(key) is not str:
                        raise InvalidArgument(f"{field} object keys must be strings")
                items = {
                    json_text(k): _normalize(v, field, depth + 1, active) for k, v in value.items()
                }
                return {k: items[k] for k in _ordered_keys(list(items))}
            return [_normalize(item, field, depth + 1, active) for item in value]  # type: ignore[attr-defined]
        finally:
            active.discard(marker)
    if isinstance(value, (dict, list, tuple, str, int, float)):
        raise InvalidArgument(f"{field} must be a plain object")
    raise InvalidArgument(f"{field} contains a non-JSON value")


_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
# A lone surrogate is written as its escape, as well-formed JSON.stringify does (lowercase hex):
# the text is then always UTF-8, and reads back as the same UTF-16 string.
_NEEDS_ESCAPE: Final = re.compile('["\\\\\x00-\x1f\ud800-\udfff]')


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group(0)
    return _ESCAPES.get(ch) or f"\\u{ord(ch):04x}"


def _encode_string(text: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, text) + '"'


def ecmascript_number(value: int | float) -> str:
    """ECMAScript Number::toString for a finite number."""
    if type(value) is int:
        if abs(value) <= 2**53:
            return str(value)
        value = float(value)
    if value == 0:
        return "0"
    if value < 0:
        return "-" + ecmascript_number(-value)
    # repr() gives the shortest digit string that round-trips, the same digits ECMAScript picks.
    _, digit_tuple, exponent10 = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple))
    assert isinstance(exponent10, int)
    stripped = digits.rstrip("0")
    exponent10 += len(digits) - len(stripped)
    digits = stripped.lstrip("0") or "0"
    point = len(digits) + exponent10  # ECMAScript's n: where the decimal point falls
    k, n = len(digits), point
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    exponent = n - 1
    sign = "+" if exponent >= 0 else "-"
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{head}e{sign}{abs(exponent)}"


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is str:
        return _encode_string(value)
    if type(value) in (int, float):
        return ecmascript_number(value)
    if type(value) is list:
        return "[" + ",".join(_encode(item) for item in value) + "]"
    return "{" + ",".join(_encode_string(k) + ":" + _encode(v) for k, v in value.items()) + "}"


def canonical_json(value: object, field: str = "value") -> str:
    """Canonical JSON text: ECMAScript ``JSON.stringify`` of the key-sorted, normalized value."""
    return _encode(normalize_json(value, field))


def encode_trusted_json(value: Any) -> str:
    """Canonical JSON text of a value jobledger built itself, skipping validation.

    For audit-event data and other values made of identifiers the store already validated,
    safe integers, ``None`` and booleans, with object keys given in canonical order; the text is
    byte-identical to :func:`canonical_json` of the same value. Never pass user input here.
    """
    return _encode(value)


def json_string(text: str) -> str:
    """The canonical JSON string literal of ``text`` (quotes and escapes included)."""
    return _encode_string(text)


def _parse_number(text: str) -> int | float:
    number = float(text)
    if number.is_integer() and abs(number) <= 2**53:
        return int(number)
    return number


_DECODER: Final = json.JSONDecoder(parse_int=_parse_number, parse_float=_parse_number)


def parse_stored_json(text: str) -> Any:
    """Parse JSON text the way an ECMAScript engine reads it (every number is a double).

    Raises ``ValueError`` for text that is not JSON, and :class:`DataCorrupt` for JSON nested so
    deeply (about 1,000 levels) that the parser's recursion gives out: nothing jobledger writes
    passes 64 levels, so such text in the store is damage, whichever read meets it.
    """
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise DataCorrupt(
            f"Stored JSON is nested deeper than jobledger writes ({MAX_JSON_DEPTH} levels) and "
            "too deep to read"
        ) from None


# ---------------------------------------------------------------------------------------------
# Occurrence identity


def derive_occurrence_identity(
    *, job_id: object, job_revision: object, scheduled_for: object, trigger_key: object
) -> tuple[str, str]:
    """Return ``(occurrence_id, idempotency_key)`` for one logical firing of a job.

    The same (job, revision, scheduled instant, trigger key) always yields the same identity,
    in any process on any machine, and the same one the reference implementation derives.
    """
    return occurrence_identity(
        # Identity material is JSON (a lone surrogate is hashed as its escape, as the reference
        # hashes it); storing such an id's job or trigger key is what refuses it.
        normalize_identifier(job_id, "jobId", lone_surrogates=True),
        normalize_positive_int(job_revision, "jobRevision"),
        normalize_epoch_ms(scheduled_for, "scheduledFor"),
        normalize_identifier(trigger_key, "triggerKey", lone_surrogates=True),
    )


def occurrence_identity(
    job_id: str, job_revision: int, scheduled_for: int, trigger_key: str
) -> tuple[str, str]:
    """:func:`derive_occurrence_identity` for arguments that are already normalized.

    The canonical material is spelled out (keys in canonical order, safe integers print as
    decimal digits), which is what makes the store's enqueue cheap; a test checks it against the
    validated path.
    """
    material = (
        f'{{"contractVersion":{CONTRACT_VERSION},'
        f'"jobId":{_encode_string(job_id)},'
        f'"jobRevision":{job_revision},"scheduledFor":{scheduled_for},'
        f'"triggerKey":{_encode_string(trigger_key)}}}'
    )
    digest = hashlib.sha256(IDENTITY_PREFIX + material.encode("utf-8")).hexdigest()
    return f"occ_{digest}", f"scheduler:v1:{digest}"
