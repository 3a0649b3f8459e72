"""Backoff policies are pure: bounds hold for every attempt, jitter and random seed."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jobledger
from jobledger.engine.retry import ExponentialBackoff, FixedBackoff

policies = st.builds(
    lambda base, factor, extra, jitter: ExponentialBackoff(
        base=timedelta(milliseconds=base),
        factor=factor,
        cap=timedelta(milliseconds=base + extra),
        jitter=jitter,
    ),
    base=st.integers(0, 10**7),
    factor=st.floats(1, 10, allow_nan=False),
    extra=st.integers(0, 10**9),
    jitter=st.floats(0, 1, allow_nan=False),
)


@given(policy=policies, attempt=st.integers(1, 10_000), seed=st.integers(0, 2**32))
def test_exponential_delay_stays_within_documented_bounds(policy, attempt, seed):
    delay = policy.delay_ms(attempt, random.Random(seed))
    try:
        raw = min(policy.cap_ms, policy.base_ms * policy.factor ** (attempt - 1))
    except OverflowError:
        raw = policy.cap_ms if policy.base_ms else 0
    assert isinstance(delay, int)
    assert delay <= policy.cap_ms
    assert math.floor(raw * (1 - policy.jitter)) - 1 <= delay
    assert delay <= math.ceil(min(policy.cap_ms, raw * (1 + policy.jitter))) + 1


@given(
    base=st.integers(1, 10**6),
    factor=st.floats(1, 4, allow_nan=False),
    attempt=st.integers(1, 200),
)
def test_without_jitter_the_delay_grows_monotonically_to_the_cap(base, factor, attempt):
    policy = ExponentialBackoff(
        base=timedelta(milliseconds=base), factor=factor, cap=timedelta(seconds=base), jitter=0
    )
    rng = random.Random(0)
    assert policy.delay_ms(attempt, rng) <= policy.delay_ms(attempt + 1, rng)
    assert policy.delay_ms(1, rng) == base


def test_defaults_and_timedeltas():
    policy = ExponentialBackoff()
    assert (policy.base_ms, policy.factor, policy.cap_ms, policy.jitter) == (
        1_000,
        2.0,
        600_000,
        0.2,
    )
    rng = random.Random(1)
    assert policy.raw_delay_ms(1) == 1_000
    assert policy.raw_delay_ms(4) == 8_000
    assert policy.raw_delay_ms(10**6) == 600_000
    assert ExponentialBackoff(base=timedelta(seconds=2), jitter=0).delay_ms(2, rng) == 4_000
    assert FixedBackoff(timedelta(seconds=3)).delay_ms(9, rng) == 3_000
    assert FixedBackoff(delay_ms=3_000) == FixedBackoff(timedelta(seconds=3))
    assert FixedBackoff(timedelta(0)).delay_ms(1, rng) == 0
    assert isinstance(policy, jobledger.BackoffPolicy)


@pytest.mark.parametrize(
    "options",
    [
        {"base": timedelta(milliseconds=-1)},
        {"base": timedelta(seconds=10), "cap": timedelta(seconds=5)},
        {"factor": 0.5},
        {"factor": float("inf")},
        {"jitter": 1.5},
        {"jitter": -0.1},
        {"base": timedelta(microseconds=1500)},  # not a whole number of milliseconds
    ],
)
def test_invalid_policies_are_refused(options):
    with pytest.raises(jobledger.InvalidArgument):
        ExponentialBackoff(**options)


def test_attempt_must_be_positive():
    with pytest.raises(jobledger.InvalidArgument):
        ExponentialBackoff().delay_ms(0, random.Random())
    with pytest.raises(jobledger.InvalidArgument):
        FixedBackoff(timedelta(seconds=1)).delay_ms(0, random.Random())


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: ExponentialBackoff(base=1000), "base"),
        (lambda: ExponentialBackoff(cap=60), "cap"),
        (lambda: ExponentialBackoff(base=1.5), "base"),
        (lambda: FixedBackoff(30), "delay"),
        (lambda: FixedBackoff(30.0), "delay"),
    ],
)
def test_bare_numbers_are_refused_where_the_name_has_no_unit(build, field):
    # FixedBackoff(30) used to be 30 ms (issue 8): now the error says what to pass instead.
    with pytest.raises(jobledger.InvalidArgument) as raised:
        build()
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert "timedelta" in raised.value.message
    assert field in raised.value.message


def test_fixed_backoff_needs_exactly_one_of_delay_and_delay_ms():
    with pytest.raises(jobledger.InvalidArgument):
        FixedBackoff()
    with pytest.raises(jobledger.InvalidArgument):
        FixedBackoff(timedelta(seconds=1), delay_ms=1000)
    with pytest.raises(jobledger.InvalidArgument):
        FixedBackoff(delay_ms=timedelta(seconds=1))
    with pytest.raises(jobledger.InvalidArgument):
        FixedBackoff(delay_ms=-1)
