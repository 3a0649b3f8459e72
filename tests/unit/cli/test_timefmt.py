"""Instants and durations on the command line: exact (integers, never a float), one-line
refusals, and the same occurrence identity as the library for the same instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jobledger
from jobledger.cli.timefmt import (
    format_age,
    format_duration,
    format_instant,
    iso_utc,
    parse_duration,
    parse_instant,
    parse_zone,
)
from jobledger.durations import epoch_ms_from
from jobledger.errors import InvalidArgument

SETTINGS = settings(derandomize=True, deadline=None, max_examples=300)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

instants = st.integers(
    min_value=86_400_000, max_value=253_402_128_000_000
)  # 1970-01-02..9999-12-30
offsets = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@SETTINGS
@given(instant=instants, zone=offsets)
def test_an_iso_instant_in_any_offset_parses_to_exactly_its_epoch_ms(instant, zone):
    moment = (EPOCH + timedelta(milliseconds=instant)).astimezone(zone)
    text = moment.isoformat(timespec="milliseconds")
    assert parse_instant(text) == instant == epoch_ms_from(moment, "at")
    # …and printed back in UTC it reads the same instant
    assert parse_instant(format_instant(instant)) == instant
    assert parse_instant(iso_utc(instant)) == instant


@SETTINGS
@given(instant=instants)
def test_epoch_ms_forms(instant):
    assert parse_instant(str(instant)) == instant
    assert parse_instant(f"@{instant}") == instant


@SETTINGS
@given(
    weeks=st.integers(0, 50),
    days=st.integers(0, 400),
    hours=st.integers(0, 100),
    minutes=st.integers(0, 100),
    seconds=st.integers(0, 100),
    millis=st.integers(0, 999),
)
def test_durations_are_exact_in_both_forms(weeks, days, hours, minutes, seconds, millis):
    expected = timedelta(
        weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds, milliseconds=millis
    )
    parts = [
        (weeks, "w"),
        (days, "d"),
        (hours, "h"),
        (minutes, "m"),
        (seconds, "s"),
        (millis, "ms"),
    ]
    short = "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"
    assert parse_duration(short) == expected
    iso = f"P{weeks}W{days}DT{hours}H{minutes}M{seconds}.{millis:03d}S"
    assert parse_duration(iso) == expected


def test_the_float_trap_is_gone():
    # int(datetime.timestamp() * 1000) gives 1772953200122 for this instant: a float error of
    # one millisecond, which made the CLI derive another occurrence than App.enqueue(at=…).
    text = "2026-03-08T07:00:00.123+00:00"
    moment = datetime.fromisoformat(text)
    assert parse_instant(text) == epoch_ms_from(moment, "at") == 1772953200123


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-01T00:00:00Z", 1_767_225_600_000),
        ("2026-01-01T01:00:00+01:00", 1_767_225_600_000),
        ("2025-12-31T19:00:00.250-05:00", 1_767_225_600_250),
        ("20260101T000000Z", 1_767_225_600_000),
        ("  @0  ", 0),
        ("1767225600000", 1_767_225_600_000),
    ],
)
def test_instants(text, expected):
    assert parse_instant(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "²",  # a superscript digit: str.isdigit() says yes, int() says no
        "١٧٦٧",  # Arabic-Indic digits
        "2026-01-01T00:00:00",  # naive: which zone?
        "2026-01-01",
        "2026-01-01T00:00:00.0005Z",  # sub-millisecond
        "1969-12-31T23:59:59Z",
        "@-5",
        "-5",
        "",
        "   ",
        "now",
        "1e3",
        "12.5",
        "@99999999999999999999",
        "2026-13-01T00:00:00Z",
        "2026-01-01T00:00:00Z junk",
    ],
)
def test_garbage_instants_are_one_coded_error(text):
    with pytest.raises(InvalidArgument) as caught:
        parse_instant(text, "--at")
    assert caught.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert "\n" not in caught.value.message.replace(repr(text), "")
    assert caught.value.message.startswith("--at: ")


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("30s", 30_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1w", 604_800_000),
        ("1h30m", 5_400_000),
        ("250ms", 250),
        ("1m30s250ms", 90_250),
        ("0s", 0),
        ("PT30S", 30_000),
        ("P1D", 86_400_000),
        ("PT0.25S", 250),
        ("PT1,5S", 1500),
        ("P1DT12H", 129_600_000),
        ("pt1m", 60_000),
        ("PT1.000000S", 1000),
    ],
)
def test_durations(text, millis):
    assert parse_duration(text) == timedelta(milliseconds=millis)


@pytest.mark.parametrize(
    "text",
    [
        "30",  # no unit: seconds? milliseconds?
        "5m1h",  # out of order
        "1m1m",
        "1.5s",
        "5 m",
        "-5s",
        "P",
        "PT",
        "P1DT",
        "PT1.0001S",
        "P1M",  # months and years have no fixed length
        "P1Y",
        "P1Y2M3D",
        "²s",
        "",
        "1x",
    ],
)
def test_garbage_durations_are_refused(text):
    with pytest.raises(InvalidArgument):
        parse_duration(text, "--every")


def test_months_get_a_helpful_message():
    with pytest.raises(InvalidArgument, match="no fixed length"):
        parse_duration("P1M")


def test_formatting():
    assert format_instant(1_767_225_600_000) == "2026-01-01T00:00:00Z"
    assert format_instant(1_767_225_600_250) == "2026-01-01T00:00:00.250Z"
    assert format_instant(1_767_225_600_000, parse_zone("Europe/Paris")) == (
        "2026-01-01T01:00:00+01:00"
    )
    assert format_instant(None) == "-"
    assert iso_utc(None) is None
    assert format_instant(2**53 - 1) == "@9007199254740991"  # beyond datetime's year 9999
    assert [format_duration(ms) for ms in (0, 250, 45_000, 192_000, 7_200_000, 90_061_000)] == [
        "0ms",
        "250ms",
        "45s",
        "3m12s",
        "2h",
        "1d1h",
    ]
    assert format_age(1000, 61_000) == "1m ago"
    assert format_age(61_000, 1000) == "in 1m"


def test_zones():
    assert parse_zone("UTC") is UTC
    assert parse_zone("Z") is UTC
    assert str(parse_zone("America/New_York")) == "America/New_York"
    for bad in ("Mars/Olympus", "../etc/passwd", "", "Europe/Pärïs"):
        with pytest.raises(InvalidArgument, match="unknown time zone"):
            parse_zone(bad)


@SETTINGS
@given(
    instant=st.integers(min_value=0, max_value=4_102_444_800_000),
    key=st.text(
        alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=20
    ),
)
def test_cli_instant_and_app_derive_the_same_identity(instant, key):
    at = EPOCH + timedelta(milliseconds=instant)
    via_cli = parse_instant(at.isoformat())
    via_app = epoch_ms_from(at, "at")
    assert jobledger.derive_occurrence_identity(
        job_id="j", job_revision=1, scheduled_for=via_cli, trigger_key=f"key:{key}"
    ) == jobledger.derive_occurrence_identity(
        job_id="j", job_revision=1, scheduled_for=via_app, trigger_key=f"key:{key}"
    )
