"""Parsing the cron dialect of SPEC §6: every form, names, ranges and steps, refusals."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from cronsim import CronSim

from jobledger.errors import InvalidArgument
from jobledger.schedules import Cron
from jobledger.schedules.cron_fields import parse_cron

from .strategies import random_expression


def sets(expression: str) -> tuple[set[int], ...]:
    spec = parse_cron(expression)
    return tuple(set(field.values) for field in spec.fields)


ALL_MINUTES = set(range(60))


@pytest.mark.parametrize(
    ("expression", "field_index", "expected"),
    [
        ("* * * * *", 1, ALL_MINUTES),
        ("*/15 * * * *", 1, {0, 15, 30, 45}),
        ("5 * * * *", 1, {5}),
        ("5,10,59 * * * *", 1, {5, 10, 59}),
        ("10-13 * * * *", 1, {10, 11, 12, 13}),
        ("10-20/5 * * * *", 1, {10, 15, 20}),
        ("50/4 * * * *", 1, {50, 54, 58}),  # a/n = a-max/n
        ("0-10/5,30 * * * *", 1, {0, 5, 10, 30}),
        ("0 */6 * * *", 2, {0, 6, 12, 18}),
        ("0 0 */10 * *", 3, {1, 11, 21, 31}),
        ("0 0 1 */4 *", 4, {1, 5, 9}),
        ("0 0 1 jan,JUL,Dec *", 4, {1, 7, 12}),
        ("0 0 1 feb-apr *", 4, {2, 3, 4}),
        ("0 0 * * mon-FRI", 5, {1, 2, 3, 4, 5}),
        ("0 0 * * 7", 5, {0}),  # 7 is Sunday
        ("0 0 * * 0,7", 5, {0}),
        ("0 0 * * 5-7", 5, {5, 6, 0}),
        ("0 0 * * */2", 5, {0, 2, 4, 6}),  # 0..7 step 2; 7 would also be Sunday
        ("0 0 * * Sun", 5, {0}),
        ("0 0 * * 1/3", 5, {1, 4, 0}),  # 1, 4, 7
    ],
)
def test_field_forms(expression, field_index, expected):
    assert sets(expression)[field_index] == expected


def test_five_fields_get_second_zero_and_six_fields_keep_theirs():
    assert sets("* * * * *")[0] == {0}
    assert not parse_cron("* * * * *").has_seconds
    spec = parse_cron("*/20 30 2 * * *")
    assert spec.has_seconds
    assert set(spec.second.values) == {0, 20, 40}
    assert set(spec.minute.values) == {30}
    assert set(spec.hour.values) == {2}


def test_whitespace_is_normalised_and_case_kept():
    assert Cron("  0\t0  * *   MON ").expression == "0 0 * * MON"
    assert Cron("0 0 * * MON") == Cron("0  0 * * MON")


def test_dom_dow_or_only_when_neither_starts_with_star():
    assert parse_cron("0 0 13 * 5").day_or
    assert not parse_cron("0 0 */2 * 5").day_or
    assert not parse_cron("0 0 13 * */2").day_or
    assert not parse_cron("0 0 * * 5").day_or


@pytest.mark.parametrize(
    ("expression", "fixed"),
    [
        ("30 2 * * *", True),
        ("0-59 2 * * *", True),  # does not start with * although it covers every minute
        ("0,30 1,2 * * *", True),
        ("*/5 2 * * *", False),
        ("0 * * * *", False),
        ("0 */2 * * *", False),
        ("* 30 2 * * *", True),  # the seconds field does not count
        ("0 */5 2 * * *", False),
    ],
)
def test_fixed_time_rule(expression, fixed):
    assert parse_cron(expression).fixed_time is fixed


def test_parser_agrees_with_cronsims_on_random_expressions():
    rng = random.Random(11)
    for index in range(600):
        expression = random_expression(rng, seconds=index % 3 == 0)
        theirs = CronSim(expression, datetime(2000, 1, 1))
        mine = sets(expression)
        assert mine[0] == theirs.seconds
        assert mine[1] == theirs.minutes
        assert mine[2] == theirs.hours
        assert mine[3] == theirs.days
        assert mine[4] == theirs.months
        assert mine[5] == {w % 7 for w in theirs.weekdays}
        assert parse_cron(expression).day_or is not theirs.day_and


@pytest.mark.parametrize(
    ("expression", "field_index", "expected"),
    [
        ("0 6-6/4 * * *", 2, {6}),  # a one-value range: a step past b takes nothing more
        ("6-6/4 * * * *", 1, {6}),
        ("0 6-9/4 * * *", 2, {6}),
        ("0 6-10/4 * * *", 2, {6, 10}),
        ("0 0 1 12-12/3 *", 4, {12}),
    ],
)
def test_a_step_range_stays_inside_its_range(expression, field_index, expected):
    # docs/schedules.md: a-b/n is every n-th value of the range a..b, and never a value past b
    # (Vixie cron's reading). Only jobledger's own parser is asked: third-party parsers have
    # disagreed on the degenerate a-a/n (cronsim 2.8 read it as a/n, 2.9 as {a}).
    assert sets(expression)[field_index] == expected
    trigger = Cron(expression)
    fires = []
    instant = 0  # 1970-01-01T00:00:00Z, UTC
    for _ in range(3):
        instant = trigger.next_after(instant)
        fires.append(datetime.fromtimestamp(instant / 1000, UTC))
    value = {1: "minute", 2: "hour", 4: "month"}[field_index]
    assert {getattr(fire, value) for fire in fires} <= expected


@pytest.mark.parametrize(
    ("expression", "cron_field", "words"),
    [
        ("60 * * * *", "minute", "out of range 0-59"),
        ("* 24 * * *", "hour", "out of range 0-23"),
        ("0 0 0 * *", "day-of-month", "out of range 1-31"),
        ("0 0 32 * *", "day-of-month", "out of range"),
        ("0 0 * 13 *", "month", "out of range 1-12"),
        ("0 0 * 0 *", "month", "out of range"),
        ("0 0 * * 8", "day-of-week", "out of range 0-7"),
        ("60 * * * * *", "second", "out of range"),
        ("*/0 * * * *", "minute", "step"),
        ("*/61 * * * *", "minute", "step"),
        ("5-1 * * * *", "minute", "backwards"),
        ("1,,2 * * * *", "minute", "not valid"),
        ("-1 * * * *", "minute", "not valid"),
        ("1- * * * *", "minute", "not valid"),
        ("a * * * *", "minute", "not a number"),
        ("0 0 * * monday", "day-of-week", "not a number"),
        ("0 0 * jan2 *", "month", "not a number"),
        ("0 0 * * jan", "day-of-week", "not a number"),
        ("0 0 L * *", "day-of-month", "extension"),
        ("0 0 15W * *", "day-of-month", "extension"),
        ("0 0 LW * *", "day-of-month", "extension"),
        ("0 0 * * 5L", "day-of-week", "extension"),
        ("0 0 * * 5#3", "day-of-week", "extension"),
        ("0 0 ? * *", "day-of-month", "extension"),
        ("H * * * *", "minute", "extension"),
        ("0 0 * *", "expression", "4 fields"),
        ("0 0 * * * * *", "expression", "7 fields"),
        ("", "expression", "0 fields"),
        ("@daily", "expression", "macros"),
        ("@reboot", "expression", "macros"),
        ("1234567 * * * *", "minute", "out of range"),
        ("0 0 30 2 *", "day-of-month", "never"),
        ("0 0 31 4,6 *", "day-of-month", "never"),
        ("0 0 30,31 feb *", "day-of-month", "never"),
        ("0 0 31 4,6 */2", "day-of-month", "never"),  # dow starts with *: AND, still never
        ("0 0 0 30 2 *", "day-of-month", "never"),
    ],
)
def test_refusals_name_the_field(expression, cron_field, words):
    with pytest.raises(InvalidArgument) as caught:
        Cron(expression)
    error = caught.value
    assert error.code == "SCHEDULER_INVALID_ARGUMENT"
    assert error.details == {"field": "expression", "cronField": cron_field}
    assert error.message.startswith("expression: ")
    assert words in error.message


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 30 2 1",  # dom and dow both restricted: Mondays in February fire
        "0 0 29 2 *",  # leap days exist
        "0 0 31 * *",
        "0 0 */31 2 *",  # */31 = {1}
        "0 0 30 2,3 *",
    ],
)
def test_rare_but_possible_expressions_are_accepted(expression):
    Cron(expression)


@pytest.mark.parametrize("value", [None, 5, b"0 0 * * *", ["0", "0"], "x" * 1001])
def test_expression_must_be_a_string(value):
    with pytest.raises(InvalidArgument) as caught:
        Cron(value)
    assert caught.value.details == {"field": "expression"}


@pytest.mark.parametrize(
    "zone",
    ["Mars/Olympus", "../../etc/passwd", "/usr/share/zoneinfo/UTC", "localtime", "", 5, None],
)
def test_bad_timezones_are_refused(zone):
    with pytest.raises(InvalidArgument) as caught:
        Cron("0 0 * * *", timezone=zone)
    assert caught.value.details == {"field": "timezone"}
    assert "timezone" in caught.value.message


@pytest.mark.parametrize(
    ("keyword", "value"),
    [("nonexistent", "later"), ("nonexistent", None), ("ambiguous", "second"), ("ambiguous", 1)],
)
def test_bad_policies_are_refused(keyword, value):
    with pytest.raises(InvalidArgument) as caught:
        Cron("0 0 * * *", **{keyword: value})
    assert caught.value.details == {"field": keyword}
    assert keyword in caught.value.message
