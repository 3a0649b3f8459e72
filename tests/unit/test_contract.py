"""The contract layer: reference §3.1 rules and the §3.19 conformance vectors.

Messages are asserted wherever the reference fixes them; everything raised on purpose must be an
``InvalidArgument`` with code ``SCHEDULER_INVALID_ARGUMENT``.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import decimal
import enum
import hashlib
import json
import math
import re

import pytest

from jobledger.authority import normalize_authority
from jobledger.contract import (
    AUTHORITY_ENVELOPE_VERSION,
    CONTRACT_VERSION,
    DEFAULT_HISTORY_LIMIT,
    DEFAULT_MAX_ATTEMPTS,
    MAX_HISTORY_LIMIT,
    MAX_JOB_ATTEMPTS,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_LEASE_MS,
    MAX_SAFE_INTEGER,
    OCCURRENCE_STATUSES,
    TERMINAL_STATUSES,
    canonical_json,
    derive_occurrence_identity,
    ecmascript_number,
    encode_trusted_json,
    is_safe_int,
    normalize_epoch_ms,
    normalize_history_limit,
    normalize_identifier,
    normalize_json,
    normalize_lease_ms,
    normalize_max_attempts,
    normalize_positive_int,
    parse_stored_json,
)
from jobledger.errors import InvalidArgument, SchedulerError
from jobledger.store.rows import idempotency_key_of

INVALID = "SCHEDULER_INVALID_ARGUMENT"


@contextlib.contextmanager
def invalid(message: str):
    """Expect an InvalidArgument with the invalid-argument code and exactly ``message``."""
    with pytest.raises(InvalidArgument) as info:
        yield info
    assert info.value.code == INVALID
    assert info.value.message == message


def error_of(func, *args, **kwargs) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        func(*args, **kwargs)
    assert info.value.code == INVALID
    assert isinstance(info.value, SchedulerError)
    return info.value


def nested_arrays(levels: int, core: object) -> object:
    value = core
    for _ in range(levels):
        value = [value]
    return value


# ---------------------------------------------------------------------------------------------
# Constants


def test_constants_match_the_reference():
    assert CONTRACT_VERSION == 1
    assert AUTHORITY_ENVELOPE_VERSION == 1
    assert DEFAULT_MAX_ATTEMPTS == 3
    assert MAX_JOB_ATTEMPTS == 32
    assert DEFAULT_HISTORY_LIMIT == 50
    assert MAX_HISTORY_LIMIT == 200
    assert MAX_JSON_BYTES == 1_048_576
    assert MAX_JSON_DEPTH == 64
    assert MAX_LEASE_MS == 86_400_000
    assert MAX_SAFE_INTEGER == 2**53 - 1
    # The reference's five statuses, plus jobledger's operator cancellation (terminal, schema v3)
    # and a child waiting for its parents (schema v4, SPEC §10).
    assert OCCURRENCE_STATUSES == (
        "blocked",
        "queued",
        "running",
        "retry_wait",
        "succeeded",
        "dead_letter",
        "cancelled",
    )
    assert TERMINAL_STATUSES == {"succeeded", "dead_letter", "cancelled"}


# ---------------------------------------------------------------------------------------------
# normalize_identifier

# ECMAScript WhiteSpace + LineTerminator: what String.prototype.trim strips.
JS_TRIMMED = [
    "\t", "\n", "\v", "\f", "\r", " ", "\u00a0", "\u1680",
    *[chr(c) for c in range(0x2000, 0x200B)],
    "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff",
]  # fmt: skip


def test_identifier_vectors_from_the_reference():
    assert normalize_identifier("  a  ", "jobId") == "a"
    assert normalize_identifier("a\x85b", "jobId") == "a\x85b"
    assert normalize_identifier("a" * 256, "jobId") == "a" * 256
    for bad in ["", " ", "a\tb", "a\x7fb", "a" * 257]:
        err = error_of(normalize_identifier, bad, "jobId")
        assert err.message == "jobId is not a valid identifier"


@pytest.mark.parametrize("ws", JS_TRIMMED, ids=lambda ch: f"U+{ord(ch):04X}")
def test_identifier_trims_every_ecmascript_whitespace(ws):
    assert normalize_identifier(f"{ws}{ws}job{ws}", "jobId") == "job"
    # Only whitespace: empty after trimming.
    with invalid("jobId is not a valid identifier"):
        normalize_identifier(ws * 3, "jobId")


def test_identifier_trims_bom_which_python_strip_keeps():
    assert "\ufeffa".strip() == "\ufeffa"  # the Python pitfall this rule guards against
    assert normalize_identifier("\ufeffa\ufeff", "jobId") == "a"


def test_identifier_keeps_nel_which_python_strip_removes():
    assert "\x85a\x85".strip() == "a"  # the Python pitfall
    assert normalize_identifier("\x85a\x85", "jobId") == "\x85a\x85"


@pytest.mark.parametrize("ch", ["\x1c", "\x1d", "\x1e", "\x1f"])
def test_identifier_rejects_separators_python_strip_would_remove(ch):
    # JS trim keeps U+001C..U+001F, so they stay and are rejected as C0 controls.
    assert f"{ch}a".strip() == "a"
    with invalid("jobId is not a valid identifier"):
        normalize_identifier(f"{ch}a", "jobId")


def test_identifier_does_not_trim_non_whitespace_format_characters():
    assert normalize_identifier("\u200ba\u200b", "jobId") == "\u200ba\u200b"  # ZWSP
    assert normalize_identifier("\u180ea", "jobId") == "\u180ea"  # not whitespace since ES2016


@pytest.mark.parametrize("code", [*range(0x20), 0x7F])
def test_identifier_rejects_c0_controls_and_del_inside(code):
    with invalid("triggerKey is not a valid identifier"):
        normalize_identifier(f"a{chr(code)}b", "triggerKey")


@pytest.mark.parametrize("code", [0x80, 0x85, 0x9F, 0xA0])
def test_identifier_allows_c1_controls_and_nbsp_inside(code):
    value = f"a{chr(code)}b"
    assert normalize_identifier(value, "jobId") == value


def test_identifier_allows_internal_spaces_and_unicode():
    assert normalize_identifier(" daily report ", "jobId") == "daily report"
    assert normalize_identifier("tâche-😀", "jobId") == "tâche-😀"


@pytest.mark.parametrize("value", [None, 1, 1.5, True, b"job", ["job"], {"id": "job"}])
def test_identifier_must_be_a_string(value):
    with invalid("jobId must be a string"):
        normalize_identifier(value, "jobId")


def test_identifier_length_counts_utf16_code_units():
    astral = "\U0001f600"  # two UTF-16 code units
    assert normalize_identifier(astral * 128, "jobId") == astral * 128
    with invalid("jobId is not a valid identifier"):
        normalize_identifier(astral * 129, "jobId")
    assert normalize_identifier("a" * 254 + astral, "jobId") == "a" * 254 + astral
    with invalid("jobId is not a valid identifier"):
        normalize_identifier("a" * 255 + astral, "jobId")
    # BMP non-ASCII counts one unit, like ASCII.
    assert normalize_identifier("é" * 256, "jobId") == "é" * 256


def test_identifier_length_is_measured_after_trimming():
    assert normalize_identifier("  " + "a" * 256 + "\ufeff", "jobId") == "a" * 256


def test_identifier_custom_max_length():
    assert normalize_identifier("a" * 64, "type", max_length=64) == "a" * 64
    with invalid("type is not a valid identifier"):
        normalize_identifier("a" * 65, "type", max_length=64)


# chr(): linters cannot tell some surrogate literals apart.
LONE = {
    "high": chr(0xD800),
    "low-inside": "a" + chr(0xDFFF) + "b",
    "high-high": chr(0xDBFF) + chr(0xD800),
    "low-then-high": chr(0xDE00) + chr(0xD83D),
    "escaped-byte-padded": " x" + chr(0xDCFF) + " ",
}


@pytest.mark.parametrize("bad", list(LONE.values()), ids=list(LONE))
def test_identifier_with_a_lone_surrogate_is_refused(bad):
    error = error_of(normalize_identifier, bad, "jobId")
    assert error.message.startswith("jobId is not valid Unicode text: it holds a lone surrogate")
    assert error.details is not None and error.details["field"] == "jobId"


def test_identifier_invalid_byte_from_surrogateescape_is_named_without_the_raw_text():
    argv_word = b"bad\xffid".decode("utf-8", "surrogateescape")
    with invalid(
        "ownerId is not valid Unicode text: it holds a lone surrogate, U+DCFF "
        "(how Python reads the byte 0xff, which is not valid UTF-8)"
    ) as info:
        normalize_identifier(argv_word, "ownerId")
    assert info.value.details == {"field": "ownerId", "codePoint": "U+DCFF", "byte": "0xff"}
    json.dumps(info.value.to_dict()).encode("utf-8")  # the error itself is valid UTF-8 text


def test_identifier_surrogate_pair_is_the_astral_character_it_spells():
    assert normalize_identifier("a\ud83d\ude00", "jobId") == "a\U0001f600"
    # Still two UTF-16 units: 128 pairs fit in 256, 129 do not.
    assert normalize_identifier("\ud83d\ude00" * 128, "jobId") == "\U0001f600" * 128
    with invalid("jobId is not a valid identifier"):
        normalize_identifier("\ud83d\ude00" * 129, "jobId")


# ---------------------------------------------------------------------------------------------
# normalize_json: shapes, depth, size, types


def test_json_depth_64_arrays_around_a_scalar_pass_65_fail():
    assert normalize_json(nested_arrays(64, 1)) == nested_arrays(64, 1)
    with invalid("payload exceeds maximum JSON depth"):
        normalize_json(nested_arrays(65, 1), "payload")


def test_json_depth_65_nested_empty_arrays_pass_66_fail():
    # nested_arrays(64, []) is 65 arrays deep: the innermost (empty) one sits at depth 64.
    assert normalize_json(nested_arrays(64, [])) == nested_arrays(64, [])
    with invalid("value exceeds maximum JSON depth"):
        normalize_json(nested_arrays(65, []))


def test_json_depth_counts_objects_like_arrays():
    deep: object = 1
    for _ in range(64):
        deep = {"k": deep}
    assert normalize_json(deep) == deep
    with invalid("value exceeds maximum JSON depth"):
        normalize_json({"k": deep})


def test_json_depth_far_beyond_the_limit_is_a_clean_error():
    with invalid("value exceeds maximum JSON depth"):
        normalize_json(nested_arrays(5000, 1))


def test_json_size_limit_is_one_mebibyte_of_encoded_utf8():
    ok = "a" * 1_048_574  # plus two quotes: exactly 1,048,576 bytes
    assert normalize_json(ok) == ok
    with invalid("payload exceeds 1048576 encoded bytes"):
        normalize_json(ok + "a", "payload")


def test_json_size_counts_bytes_not_characters():
    two_byte = "é" * 524_287  # 1,048,574 bytes
    assert normalize_json(two_byte) == two_byte
    with invalid("value exceeds 1048576 encoded bytes"):
        normalize_json(two_byte + "a")


def test_json_size_counts_escapes():
    escaped = "\n" * 524_287  # each newline encodes as two bytes: \n
    assert normalize_json(escaped) == escaped
    with invalid("value exceeds 1048576 encoded bytes"):
        normalize_json(escaped + "\n")


def test_json_size_counts_structure():
    # ["…"] adds two bytes of brackets to the string's 1,048,576.
    with invalid("value exceeds 1048576 encoded bytes"):
        normalize_json(["a" * 1_048_574])
    assert normalize_json(["a" * 1_048_572]) == ["a" * 1_048_572]


def test_json_cycles_are_rejected():
    looped: list = []
    looped.append(looped)
    with invalid("payload contains a cycle"):
        normalize_json(looped, "payload")
    selfish: dict = {}
    selfish["me"] = selfish
    with invalid("value contains a cycle"):
        normalize_json(selfish)
    outer: dict = {"list": []}
    outer["list"].append({"back": outer})
    with invalid("value contains a cycle"):
        normalize_json(outer)


def test_json_same_object_twice_without_nesting_is_fine():
    shared = {"x": [1, 2]}
    value = {"a": shared, "b": shared, "c": [shared, shared]}
    assert normalize_json(value) == {
        "a": {"x": [1, 2]},
        "b": {"x": [1, 2]},
        "c": [{"x": [1, 2]}, {"x": [1, 2]}],
    }
    assert (
        canonical_json(value) == '{"a":{"x":[1,2]},"b":{"x":[1,2]},"c":[{"x":[1,2]},{"x":[1,2]}]}'
    )


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_json_non_finite_numbers_are_rejected(number):
    with invalid("payload contains a non-finite number"):
        normalize_json({"n": [number]}, "payload")


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        frozenset(),
        b"bytes",
        bytearray(b"x"),
        datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
        datetime.date(2024, 1, 1),
        object(),
        decimal.Decimal("1.5"),
        1j,
        print,
        range(3),
    ],
    ids=lambda v: type(v).__name__,
)
def test_json_non_json_values_are_rejected(value):
    with invalid("payload contains a non-JSON value"):
        normalize_json({"nested": [value]}, "payload")


class _Color(enum.Enum):
    RED = "red"


class _Level(enum.IntEnum):
    LOW = 1


class _Name(enum.StrEnum):
    A = "a"


@pytest.mark.parametrize(
    "value",
    [
        collections.OrderedDict(a=1),
        collections.defaultdict(list),
        collections.Counter("ab"),
        _Level.LOW,
        _Name.A,
        type("MyList", (list,), {})([1]),
    ],
    ids=lambda v: type(v).__name__,
)
def test_json_subclasses_of_plain_types_are_rejected(value):
    with invalid("value must be a plain object"):
        normalize_json(value)


def test_json_plain_enum_is_not_json():
    with invalid("value contains a non-JSON value"):
        normalize_json(_Color.RED)


@pytest.mark.parametrize("key", [1, None, True, 1.5, ("a",), b"a"], ids=repr)
def test_json_object_keys_must_be_strings(key):
    with invalid("payload object keys must be strings"):
        normalize_json({"ok": {key: 1}}, "payload")


def test_json_tuples_become_lists():
    assert normalize_json((1, (2, "x"))) == [1, [2, "x"]]
    assert canonical_json((1, (2, "x"))) == '[1,[2,"x"]]'


def test_json_bool_is_not_an_integer():
    result = normalize_json([True, False, 1, 0])
    assert result == [True, False, 1, 0]
    assert [type(x) for x in result] == [bool, bool, int, int]
    assert canonical_json([True, False, 1, 0]) == "[true,false,1,0]"


def test_json_scalars_pass_through():
    assert normalize_json(None) is None
    assert normalize_json("text") == "text"
    assert normalize_json(1.5) == 1.5
    assert normalize_json({}) == {}
    assert normalize_json([]) == []


def test_json_integers_a_double_cannot_hold_are_rejected():
    message = "payload contains an integer that a JSON number (IEEE 754 double) cannot hold"
    for bad in [2**53 + 1, -(2**53) - 1, 2**64 + 1, 10**400, -(10**400), 2**1024]:
        with invalid(message):
            normalize_json({"n": bad}, "payload")


def test_json_integers_a_double_holds_are_accepted():
    assert normalize_json(2**53) == 2**53
    assert normalize_json(-(2**53)) == -(2**53)
    assert canonical_json(2**53) == "9007199254740992"
    # Larger but exactly representable: accepted and printed as ECMAScript prints the double.
    assert normalize_json(2**60) == 2**60
    assert canonical_json(2**60) == "1152921504606847000"


def test_json_integral_floats_become_ints_and_negative_zero_becomes_zero():
    assert type(normalize_json(1.0)) is int
    assert normalize_json(1.0) == 1
    zero = normalize_json(-0.0)
    assert zero == 0
    assert type(zero) is int
    assert math.copysign(1, zero) == 1
    assert type(normalize_json(2.0**53)) is int
    assert type(normalize_json(2.0**54)) is float  # beyond 2**53 stays a float
    assert type(normalize_json(0.5)) is float


def test_json_object_keys_are_reordered_canonically():
    result = normalize_json({"b": 1, "10": 2, "2": 3, "a": 4, "4294967295": 9, "4294967294": 8})
    assert list(result) == ["2", "10", "4294967294", "4294967295", "a", "b"]


def test_json_does_not_mutate_the_input():
    value = {"b": [2.0, {"z": -0.0, "a": 1}], "a": "\ud83d\ude00"}
    snapshot = repr(value)
    normalize_json(value)
    canonical_json(value)
    assert repr(value) == snapshot
    assert list(value) == ["b", "a"]


def test_json_joins_surrogate_pairs_like_ecmascript():
    # Two code points forming a valid UTF-16 pair are one astral character in ECMAScript.
    assert normalize_json("\ud83d\ude00") == "\U0001f600"
    assert normalize_json({"\ud83d\ude00": 1}) == {"\U0001f600": 1}


@pytest.mark.parametrize(
    "value",
    [
        "\ud800",
        ["ok", "a\udfffb"],
        {"k": {"deep": ["\udbff\ud800"]}},
        {"\udc00": 1},
        {"ok": {"\ude00\ud83d": None}},
        b"bad\xff".decode("utf-8", "surrogateescape"),
    ],
)
def test_json_keeps_a_lone_surrogate_and_writes_its_escape(value):
    # SPEC §2 "Text": JSON.stringify writes a lone surrogate as its \uXXXX escape; so does
    # canonical_json, and the text reads back as the same string (byte for byte again).
    assert normalize_json(value, "job.payload") == value
    text = canonical_json(value, "result")
    text.encode("utf-8")  # always UTF-8
    assert "\\u" in text
    assert parse_stored_json(text) == value
    assert canonical_json(parse_stored_json(text)) == text


# ---------------------------------------------------------------------------------------------
# canonical_json


def test_canonical_key_order_vector():
    value = {
        "b": 1,
        "10": 2,
        "2": 3,
        "a": {"é": 1, "e": 2, "Z": 0},
        "4294967295": 9,
        "4294967294": 8,
    }
    assert canonical_json(value) == (
        '{"2":3,"10":2,"4294967294":8,"4294967295":9,"a":{"Z":0,"e":2,"é":1},"b":1}'
    )


def test_canonical_number_vector():
    numbers = [
        1.0,
        0.1,
        1e21,
        1.5e-7,
        -0.0,
        123456789012345680000.0,
        5e-324,
        1e-7,
        1e-6,
        2**53,
    ]
    assert canonical_json(numbers) == (
        "[1,0.1,1e+21,1.5e-7,0,123456789012345680000,5e-324,1e-7,0.000001,9007199254740992]"
    )


def test_canonical_proto_key_is_kept_as_data():
    text = '{"__proto__":{"polluted":true},"constructor":"payload"}'
    parsed = json.loads(text)
    assert canonical_json(parsed) == text
    assert normalize_json(parsed) == {"__proto__": {"polluted": True}, "constructor": "payload"}


def test_canonical_non_index_numeric_keys_sort_as_strings():
    value = {"01": 0, "-1": 0, "1.5": 0, "1": 0, "0": 0, " 1": 0, "1e3": 0}
    assert canonical_json(value) == '{"0":0,"1":0," 1":0,"-1":0,"01":0,"1.5":0,"1e3":0}'


def test_canonical_keys_sort_by_utf16_code_units_not_code_points():
    # U+1F600 is D83D DE00 in UTF-16, which sorts before U+FFFF; code-point order says otherwise.
    assert canonical_json({"\uffff": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\uffff":1}'
    assert canonical_json({"\ue000": 1, "\U00010000": 2}) == '{"\U00010000":2,"\ue000":1}'


def test_canonical_string_escaping():
    assert canonical_json('"\\') == r'"\"\\"'
    assert canonical_json("\b\f\n\r\t") == r'"\b\f\n\r\t"'
    assert canonical_json("\x00\x01\x1f") == r'"\u0000\u0001\u001f"'
    assert canonical_json("\x0b") == r'"\u000b"'
    # Emitted raw: slash, HTML characters, DEL, C1, line separators, non-ASCII, astral.
    raw = "/<>&\x7f\x85\u2028\u2029é😀"
    assert canonical_json(raw) == f'"{raw}"'


def test_canonical_escapes_lone_surrogates_and_joins_pairs():
    # as JSON.stringify: lowercase \udxxx for each lone one (high-high, low-high are two)
    assert canonical_json("\ud800") == '"\\ud800"'
    assert canonical_json("a\udfffb") == '"a\\udfffb"'
    assert canonical_json("\udbff\ud800") == '"\\udbff\\ud800"'
    assert canonical_json("\ude00\ud83d") == '"\\ude00\\ud83d"'
    assert canonical_json({"\udc00": "\ud83d\ude00"}) == '{"\\udc00":"\U0001f600"}'
    assert canonical_json({"k": "\ud83d\ude00"}) == '{"k":"\U0001f600"}'


def test_trusted_encoding_still_escapes_a_lone_surrogate_in_lowercase():
    # Stored text an earlier version wrote (or the reference: JSON.stringify escapes them) is
    # re-encoded byte for byte, and the output is always valid UTF-8.
    stored = '{"p":"a\\udfffb"}'
    value = parse_stored_json(stored)
    assert value == {"p": "a\udfffb"}
    assert encode_trusted_json(value) == stored
    assert encode_trusted_json(value).encode("utf-8")


def test_canonical_has_no_whitespace():
    assert canonical_json({"a": [1, {"b": None}], "c": True}) == '{"a":[1,{"b":null}],"c":true}'


def test_canonical_errors_use_the_given_field():
    with invalid("trigger contains a non-finite number"):
        canonical_json(math.nan, "trigger")


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (-1.5, "-1.5"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e20, "100000000000000000000"),
        (9.999999999999999e20, "999999999999999900000"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (0.000001, "0.000001"),
        (0.0000015, "0.0000015"),
        (1e-7, "1e-7"),
        (1.23e-18, "1.23e-18"),
        (5e-324, "5e-324"),
        (-5e-324, "-5e-324"),
        (2**53, "9007199254740992"),
        (-(2**53), "-9007199254740992"),
        (2**60, "1152921504606847000"),
        (123.456, "123.456"),
    ],
)
def test_ecmascript_number(number, text):
    assert ecmascript_number(number) == text


# ---------------------------------------------------------------------------------------------
# Integer helpers


def test_is_safe_int():
    assert is_safe_int(0)
    assert is_safe_int(MAX_SAFE_INTEGER)
    assert is_safe_int(-MAX_SAFE_INTEGER)
    assert not is_safe_int(MAX_SAFE_INTEGER + 1)
    assert not is_safe_int(True)
    assert not is_safe_int(3.0)
    assert not is_safe_int("3")


def test_normalize_positive_int():
    assert normalize_positive_int(1, "n") == 1
    assert normalize_positive_int(3.0, "n") == 3
    assert type(normalize_positive_int(3.0, "n")) is int
    assert normalize_positive_int(MAX_SAFE_INTEGER, "n") == MAX_SAFE_INTEGER
    for bad in [0, -1, 1.5, True, "5", None, 2**53, math.nan, math.inf]:
        with invalid("n must be a positive integer"):
            normalize_positive_int(bad, "n")


def test_history_limit_vectors():
    assert normalize_history_limit() == 50
    assert normalize_history_limit(201) == 200
    for bad in [0, 1.5, "5"]:
        with invalid("history limit must be a positive integer"):
            normalize_history_limit(bad)


def test_history_limit_more():
    assert normalize_history_limit(None) == 50  # None stands for "not given" (JS undefined)
    assert normalize_history_limit(1) == 1
    assert normalize_history_limit(200) == 200
    assert normalize_history_limit(3.0) == 3
    assert type(normalize_history_limit(3.0)) is int
    assert normalize_history_limit(MAX_SAFE_INTEGER) == 200
    for bad in [True, False, -1, 2**53, 201.5, math.inf, [5]]:
        with invalid("history limit must be a positive integer"):
            normalize_history_limit(bad)


def test_max_attempts_vectors():
    assert normalize_max_attempts() == 3
    for bad in [0, 33, None]:
        with invalid("maxAttempts must be an integer between 1 and 32"):
            normalize_max_attempts(bad)


def test_max_attempts_more():
    assert normalize_max_attempts(1) == 1
    assert normalize_max_attempts(32) == 32
    assert normalize_max_attempts(3.0) == 3
    assert type(normalize_max_attempts(3.0)) is int
    for bad in [True, "3", 1.5, -1, math.nan]:
        with invalid("maxAttempts must be an integer between 1 and 32"):
            normalize_max_attempts(bad)


def test_epoch_ms():
    assert normalize_epoch_ms(0, "scheduledFor") == 0
    assert normalize_epoch_ms(1_700_000_000_000, "scheduledFor") == 1_700_000_000_000
    assert normalize_epoch_ms(MAX_SAFE_INTEGER, "scheduledFor") == MAX_SAFE_INTEGER
    assert normalize_epoch_ms(3.0, "scheduledFor") == 3
    assert type(normalize_epoch_ms(3.0, "scheduledFor")) is int
    for bad in [-1, 2**53, True, False, "5", None, 1.5, -0.5, math.nan, math.inf, 2.0**53]:
        with invalid("scheduledFor must be a non-negative safe-integer epoch ms"):
            normalize_epoch_ms(bad, "scheduledFor")


def test_lease_ms():
    assert normalize_lease_ms(1) == 1
    assert normalize_lease_ms(30_000.0) == 30_000
    assert normalize_lease_ms(86_400_000) == 86_400_000
    with invalid("leaseMs must not exceed 86400000"):
        normalize_lease_ms(86_400_001)
    for bad in [0, -1, True, "1000", 1.5, None]:
        with invalid("leaseMs must be a positive integer"):
            normalize_lease_ms(bad)


# ---------------------------------------------------------------------------------------------
# parse_stored_json


def test_parse_stored_json_reads_numbers_as_doubles():
    assert parse_stored_json('{"a":1.0,"b":[2,0.5]}') == {"a": 1, "b": [2, 0.5]}
    assert type(parse_stored_json("1.0")) is int
    # 2**53 + 1 is not a double; ECMAScript reads it as 2**53.
    assert parse_stored_json("9007199254740993") == 2**53
    assert type(parse_stored_json("1e300")) is float


def test_parse_stored_json_too_deep_to_read_is_data_corrupt():
    from jobledger.errors import DataCorrupt

    assert parse_stored_json("[" * 500 + "]" * 500) is not None
    with pytest.raises(DataCorrupt):
        parse_stored_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError):  # not JSON: the caller says which value
        parse_stored_json("[")


def test_parse_stored_json_roundtrips_canonical_text():
    value = {"2": [0.1, 1e21, "\U0001f600"], "a": None, "é": True}
    assert canonical_json(parse_stored_json(canonical_json(value))) == canonical_json(value)


# ---------------------------------------------------------------------------------------------
# normalize_authority

MINIMAL_AUTHORITY_CANONICAL = (
    '{"authorizationRefs":{"approvalIds":[],"decisionId":null,"delegationIds":[],"grantIds":[],'
    '"policyRevision":null},"principal":{"id":"p","type":"agent"},"requestedCapabilities":[],'
    '"schemaVersion":1,"tenantId":null,"workspaceId":null}'
)


def test_authority_minimal_vector():
    envelope = normalize_authority({"principal": {"type": "agent", "id": "p"}})
    assert canonical_json(envelope) == MINIMAL_AUTHORITY_CANONICAL


def test_authority_defaults_and_field_order():
    envelope = normalize_authority({"principal": {"id": "p", "type": "agent"}})
    assert envelope == {
        "schemaVersion": 1,
        "principal": {"type": "agent", "id": "p"},
        "tenantId": None,
        "workspaceId": None,
        "requestedCapabilities": [],
        "authorizationRefs": {
            "decisionId": None,
            "policyRevision": None,
            "grantIds": [],
            "approvalIds": [],
            "delegationIds": [],
        },
    }
    assert list(envelope) == [
        "schemaVersion",
        "principal",
        "tenantId",
        "workspaceId",
        "requestedCapabilities",
        "authorizationRefs",
    ]
    assert list(envelope["principal"]) == ["type", "id"]
    assert list(envelope["authorizationRefs"]) == [
        "decisionId",
        "policyRevision",
        "grantIds",
        "approvalIds",
        "delegationIds",
    ]


def test_authority_full_envelope_is_trimmed_deduplicated_and_sorted():
    envelope = normalize_authority(
        {
            "schemaVersion": 1,
            "principal": {"type": " user ", "id": " alice "},
            "tenantId": " t1 ",
            "workspaceId": "w1",
            "requestedCapabilities": ["b", "a", "b", " a ", "\U0001f600", "\uffff"],
            "authorizationRefs": {
                "decisionId": " d1 ",
                "policyRevision": "p1",
                "schedulerPolicyRevision": "s1",
                "grantIds": ["g2", "g1", "g2"],
                "approvalIds": ("x", "x"),
                "delegationIds": [],
            },
        }
    )
    assert envelope["principal"] == {"type": "user", "id": "alice"}
    assert envelope["tenantId"] == "t1"
    assert envelope["workspaceId"] == "w1"
    # UTF-16 order: U+1F600 (D83D…) sorts before U+FFFF.
    assert envelope["requestedCapabilities"] == ["a", "b", "\U0001f600", "\uffff"]
    assert envelope["authorizationRefs"] == {
        "decisionId": "d1",
        "policyRevision": "p1",
        "schedulerPolicyRevision": "s1",
        "grantIds": ["g1", "g2"],
        "approvalIds": ["x"],
        "delegationIds": [],
    }
    assert list(envelope["authorizationRefs"]) == [
        "decisionId",
        "policyRevision",
        "schedulerPolicyRevision",
        "grantIds",
        "approvalIds",
        "delegationIds",
    ]


def test_authority_scheduler_policy_revision_only_when_given():
    absent = normalize_authority({"principal": {"type": "a", "id": "p"}, "authorizationRefs": {}})
    assert "schedulerPolicyRevision" not in absent["authorizationRefs"]
    given_null = normalize_authority(
        {
            "principal": {"type": "a", "id": "p"},
            "authorizationRefs": {"schedulerPolicyRevision": None},
        }
    )
    assert given_null["authorizationRefs"]["schedulerPolicyRevision"] is None
    assert '"schedulerPolicyRevision":null' in canonical_json(given_null)
    assert "schedulerPolicyRevision" not in canonical_json(absent)


def test_authority_null_optional_fields():
    envelope = normalize_authority(
        {
            "principal": {"type": "a", "id": "p"},
            "tenantId": None,
            "workspaceId": None,
            "authorizationRefs": None,
        }
    )
    assert canonical_json(envelope) == canonical_json(
        normalize_authority({"principal": {"type": "a", "id": "p"}})
    )


def test_authority_unknown_fields_are_listed_sorted():
    err = error_of(
        normalize_authority,
        {"principal": {"type": "a", "id": "p"}, "zeta": 1, "allowExecution": True, "alpha": 2},
    )
    assert err.message == "authority contains unknown fields"
    assert err.details == {"fields": ["allowExecution", "alpha", "zeta"]}


def test_authority_unknown_principal_and_ref_fields():
    err = error_of(normalize_authority, {"principal": {"type": "a", "id": "p", "role": "x"}})
    assert err.message == "authority.principal contains unknown fields"
    assert err.details == {"fields": ["role"]}
    err = error_of(
        normalize_authority,
        {"principal": {"type": "a", "id": "p"}, "authorizationRefs": {"grant": 1, "allow": 2}},
    )
    assert err.message == "authority.authorizationRefs contains unknown fields"
    assert err.details == {"fields": ["allow", "grant"]}


def test_authority_principal_type_is_limited_to_64_units():
    assert normalize_authority({"principal": {"type": "t" * 64, "id": "p"}})["principal"] == {
        "type": "t" * 64,
        "id": "p",
    }
    with invalid("authority.principal.type is not a valid identifier"):
        normalize_authority({"principal": {"type": "t" * 65, "id": "p"}})
    assert normalize_authority({"principal": {"type": "t", "id": "i" * 256}})["principal"]["id"]
    with invalid("authority.principal.id is not a valid identifier"):
        normalize_authority({"principal": {"type": "t", "id": "i" * 257}})


@pytest.mark.parametrize(
    ("authority", "message"),
    [
        (None, "authority must be a plain object"),
        ([], "authority must be a plain object"),
        ("agent", "authority must be a plain object"),
        (
            collections.OrderedDict(principal={"type": "a", "id": "p"}),
            "authority must be a plain object",
        ),
        ({}, "authority.principal must be a plain object"),
        ({"principal": None}, "authority.principal must be a plain object"),
        ({"principal": {"id": "p"}}, "authority.principal.type must be a string"),
        ({"principal": {"type": "a"}}, "authority.principal.id must be a string"),
        (
            {"principal": {"type": " ", "id": "p"}},
            "authority.principal.type is not a valid identifier",
        ),
        (
            {"principal": {"type": "a", "id": "p"}, "schemaVersion": 2},
            "authority.schemaVersion must be 1",
        ),
        (
            {"principal": {"type": "a", "id": "p"}, "schemaVersion": True},
            "authority.schemaVersion must be 1",
        ),
        (
            {"principal": {"type": "a", "id": "p"}, "schemaVersion": "1"},
            "authority.schemaVersion must be 1",
        ),
        (
            {"principal": {"type": "a", "id": "p"}, "tenantId": ""},
            "authority.tenantId is not a valid identifier",
        ),
        (
            {"principal": {"type": "a", "id": "p"}, "workspaceId": 7},
            "authority.workspaceId must be a string",
        ),
        (
            {"principal": {"type": "a", "id": "p"}, "authorizationRefs": []},
            "authority.authorizationRefs must be a plain object",
        ),
        (
            {"principal": {"type": "a", "id": "p"}, "requestedCapabilities": ["ok", "a\tb"]},
            "authority.requestedCapabilities is not a valid identifier",
        ),
    ],
)
def test_authority_rejections(authority, message):
    err = error_of(normalize_authority, authority)
    assert err.message == message


def test_authority_schema_version_one_is_accepted_in_any_numeric_spelling():
    for version in (1, 1.0):
        envelope = normalize_authority(
            {"schemaVersion": version, "principal": {"type": "a", "id": "p"}}
        )
        assert envelope["schemaVersion"] == 1


def test_authority_capability_lists_must_be_arrays_of_at_most_256():
    base = {"principal": {"type": "a", "id": "p"}}
    many = [f"c{i}" for i in range(256)]
    assert (
        len(normalize_authority({**base, "requestedCapabilities": many})["requestedCapabilities"])
        == 256
    )
    err = error_of(normalize_authority, {**base, "requestedCapabilities": [*many, "c256"]})
    assert err.message.startswith("authority.requestedCapabilities")
    err = error_of(normalize_authority, {**base, "requestedCapabilities": "a"})
    assert err.message.startswith("authority.requestedCapabilities")
    err = error_of(normalize_authority, {**base, "authorizationRefs": {"grantIds": {"g": 1}}})
    assert err.message.startswith("authority.authorizationRefs.grantIds")


def test_authority_does_not_mutate_input():
    raw = {"principal": {"type": " a ", "id": "p"}, "requestedCapabilities": ["b", "a", "b"]}
    snapshot = json.dumps(raw)
    normalize_authority(raw)
    assert json.dumps(raw) == snapshot


# ---------------------------------------------------------------------------------------------
# derive_occurrence_identity

DIGEST_A = "446d76bcd5745d299bb10199ea7e6822aa628b68173303c1a22b74e1cc0a71d3"


def test_identity_vector_a():
    occurrence_id, key = derive_occurrence_identity(
        job_id="job-a", job_revision=1, scheduled_for=1_700_000_000_000, trigger_key="agenda:daily"
    )
    assert occurrence_id == f"occ_{DIGEST_A}"
    assert key == f"scheduler:v1:{DIGEST_A}"


def test_identity_material_vector():
    material = canonical_json(
        {
            "triggerKey": "agenda:daily",
            "scheduledFor": 1_700_000_000_000,
            "jobRevision": 1,
            "jobId": "job-a",
            "contractVersion": 1,
        }
    )
    assert material == (
        '{"contractVersion":1,"jobId":"job-a","jobRevision":1,'
        '"scheduledFor":1700000000000,"triggerKey":"agenda:daily"}'
    )
    prefix = b"chainlesschain.scheduler.occurrence.v1\x00"
    assert hashlib.sha256(prefix + material.encode()).hexdigest() == DIGEST_A


@pytest.mark.parametrize(
    ("job_id", "revision", "scheduled_for", "trigger_key", "digest"),
    [
        (" job-a ", 2, 0, "x", "96a07b94488f56f356a6ea6afa0cc04a0e6316e85b8f609cf58876689aa89a5f"),
        (
            "j",
            3,
            0,
            "manual:r1",
            "11859e568167bc845184caa13caf2253129fbf2f73b329451c37e78bb668ed0e",
        ),
    ],
)
def test_identity_vectors(job_id, revision, scheduled_for, trigger_key, digest):
    assert derive_occurrence_identity(
        job_id=job_id, job_revision=revision, scheduled_for=scheduled_for, trigger_key=trigger_key
    ) == (f"occ_{digest}", f"scheduler:v1:{digest}")


def test_identity_trims_job_id_and_trigger_key():
    plain = derive_occurrence_identity(
        job_id="job-a", job_revision=2, scheduled_for=0, trigger_key="x"
    )
    padded = derive_occurrence_identity(
        job_id="\ufeff job-a\u3000", job_revision=2, scheduled_for=0, trigger_key="\tx\n"
    )
    assert padded == plain


def test_identity_is_stable_and_formatted():
    args = {"job_id": "job-a", "job_revision": 1, "scheduled_for": 5, "trigger_key": "t"}
    first = derive_occurrence_identity(**args)
    assert derive_occurrence_identity(**args) == first
    occurrence_id, key = first
    assert re.fullmatch(r"occ_[a-f0-9]{64}", occurrence_id)
    assert re.fullmatch(r"scheduler:v1:[a-f0-9]{64}", key)
    assert occurrence_id[4:] == key[13:]


def test_identity_depends_on_every_component():
    base = {"job_id": "job-a", "job_revision": 1, "scheduled_for": 5, "trigger_key": "t"}
    seen = {derive_occurrence_identity(**base)}
    for change in [
        {"job_revision": 2},
        {"scheduled_for": 6},
        {"trigger_key": "u"},
        {"job_id": "job-b"},
    ]:
        seen.add(derive_occurrence_identity(**{**base, **change}))
    assert len(seen) == 5


def test_identity_accepts_integral_floats_like_the_reference():
    ints = derive_occurrence_identity(
        job_id="j", job_revision=3, scheduled_for=0, trigger_key="manual:r1"
    )
    floats = derive_occurrence_identity(
        job_id="j", job_revision=3.0, scheduled_for=0.0, trigger_key="manual:r1"
    )
    assert floats == ints


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"job_id": " "}, "jobId is not a valid identifier"),
        ({"job_id": None}, "jobId must be a string"),
        ({"job_id": "j" * 257}, "jobId is not a valid identifier"),
        ({"trigger_key": "a\x00b"}, "triggerKey is not a valid identifier"),
        ({"trigger_key": 1}, "triggerKey must be a string"),
        ({"job_revision": 0}, "jobRevision must be a positive integer"),
        ({"job_revision": True}, "jobRevision must be a positive integer"),
        ({"job_revision": "1"}, "jobRevision must be a positive integer"),
        ({"job_revision": 1.5}, "jobRevision must be a positive integer"),
        ({"job_revision": 2**53}, "jobRevision must be a positive integer"),
        ({"scheduled_for": -1}, "scheduledFor must be a non-negative safe-integer epoch ms"),
        ({"scheduled_for": 2**53}, "scheduledFor must be a non-negative safe-integer epoch ms"),
        ({"scheduled_for": False}, "scheduledFor must be a non-negative safe-integer epoch ms"),
        ({"scheduled_for": "0"}, "scheduledFor must be a non-negative safe-integer epoch ms"),
    ],
)
def test_identity_rejections(change, message):
    args = {"job_id": "j", "job_revision": 1, "scheduled_for": 0, "trigger_key": "t", **change}
    err = error_of(derive_occurrence_identity, **args)
    assert err.message == message


@pytest.mark.parametrize("trigger_key", ["t", "key:order-1", "cron:1700000000000", "é\u2028"])
def test_the_idempotency_key_is_derived_from_the_id_as_schema_v4_reads_it(trigger_key):
    """Schema v4 stores no idempotency key: the store derives it from the occurrence id (the
    same digest), as does the v4 migration's check of older rows."""
    occurrence_id, key = derive_occurrence_identity(
        job_id="job-a", job_revision=3, scheduled_for=1_700_000_000_000, trigger_key=trigger_key
    )
    assert idempotency_key_of(occurrence_id) == key
    assert "scheduler:v1:" + occurrence_id.removeprefix("occ_") == key
