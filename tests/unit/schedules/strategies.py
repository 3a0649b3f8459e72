"""Random cron expressions: ``cron_expressions`` (Hypothesis) and ``random_expression`` (seeded).

Both generators lean towards the hours DST moves (0-3 and 23) and towards fields that make
fixed-time entries, and both avoid the degenerate step range ``a-a/n``: cronsim 2.8 reads it as
``a/n`` (``6-6/4`` → 6, 10, 14, 18, 22) where Vixie cron, cronsim 2.9 and jobledger read ``{a}``,
and the oracles use cronsim's parser, so the differential tests hold whichever cronsim is
installed (jobledger's own reading: ``test_cron_parsing.test_a_step_range_stays_inside_its_range``).
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from jobledger.errors import InvalidArgument
from jobledger.schedules import Cron

HOT_MINUTES = [0, 15, 30, 45, 59]
HOT_HOURS = [0, 1, 2, 3, 23]
HOT_DAYS = [1, 6, 15, 28, 29, 31]
HOT_MONTHS = [2, 3, 4, 9, 10, 11]
DOW_FORMS = ["1-5", "0", "sun", "mon-fri", "*/2", "6,0", "7", "sat", "sun,wed"]


def _field_from(choose, low: int, high: int, hot: list[int]) -> str:
    """One field; ``choose(kind, arg)`` supplies the random choices."""
    form = choose("form", 7)

    def value() -> int:
        if choose("hot", 2):
            return hot[choose("index", len(hot))]
        return low + choose("value", high - low + 1)

    if form == 0:
        return "*"
    if form == 1:
        return f"*/{2 + choose('step', max(1, (high - low + 1) // 2 - 1))}"
    if form == 2:
        return str(value())
    if form == 3:
        return ",".join(str(v) for v in sorted({value() for _ in range(2 + choose("n", 2))}))
    start = value()
    if start >= high:
        return str(start)
    end = start + 1 + choose("span", high - start)
    if form == 4:
        return f"{start}-{end}"
    if form == 5:
        return f"{start}-{end}/{2 + choose('step', 4)}"
    return f"{start}/{2 + choose('step', 9)}"


def _expression_from(choose, seconds: bool) -> str:
    minute = _field_from(choose, 0, 59, HOT_MINUTES)
    hour = _field_from(choose, 0, 23, HOT_HOURS)
    dom = "*" if choose("dom", 10) < 7 else _field_from(choose, 1, 31, HOT_DAYS)
    month = "*" if choose("month", 10) < 8 else _field_from(choose, 1, 12, HOT_MONTHS)
    dow = "*" if choose("dow", 10) < 7 else DOW_FORMS[choose("dowform", len(DOW_FORMS))]
    text = f"{minute} {hour} {dom} {month} {dow}"
    if seconds:
        text = f"{_field_from(choose, 0, 59, [0, 30, 59])} {text}"
    return text


def _can_fire(text: str) -> bool:
    try:
        Cron(text)
    except InvalidArgument:
        return False
    return True


def random_expression(rng: random.Random, *, seconds: bool = False) -> str:
    """A valid random expression from a seeded ``random.Random``."""
    while True:
        text = _expression_from(lambda _kind, size: rng.randrange(size), seconds)
        if _can_fire(text):
            return text


@st.composite
def cron_expressions(draw, seconds: bool = False) -> str:
    """A valid random expression (5 fields, or 6 with ``seconds=True``)."""
    text = _expression_from(
        lambda _kind, size: draw(st.integers(min_value=0, max_value=size - 1)), seconds
    )
    if not _can_fire(text):
        text = "0 0 1 * *" if not seconds else "0 0 0 1 * *"
    return text
