"""The ``jobledger`` command's ``main(argv)`` with generated command lines: every outcome is an
exit status of the documented set (0–5) with, on failure, one coded ``error: <CODE>: …`` line —
never ``SCHEDULER_INTERNAL_ERROR`` (an uncaught exception inside) and never an exception out of
``main`` — and a command that fails changes nothing in the store.

Command lines are generated from the parser itself: a command path from the real command tree,
its positionals and a random subset of its options, each value drawn from plausible values (ids
that exist, instants, durations, JSON, cron expressions) and hostile ones (bytes that are not
UTF-8, as Python hands them over; ``@file`` and ``-`` JSON forms; JSON nested 100,000 deep).
Plus entirely random word lists. Left out: ``worker`` (imports the module it is named) and
``web`` (serves until stopped), ``history --follow`` (follows until interrupted); ``--db`` is
always this test's store.
"""

from __future__ import annotations

import argparse
import io
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jobledger
from jobledger.cli import build_parser, main

from .support import budget, call_coded, counted, invalid_bytes, snapshot, text

EXIT_STATUSES = {0, 1, 2, 3, 4, 5}
CODED_LINE = re.compile(r"^error: [A-Z][A-Z0-9_]+: ")
SKIP_COMMANDS = {"worker", "web"}
SKIP_OPTIONS = {"--db", "-f", "--follow", "--help", "-h", "--version", "--debug"}


def _leaves(parser: argparse.ArgumentParser, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    seen: set[int] = set()
    for name, sub in subs[0].choices.items():
        if id(sub) in seen or name in SKIP_COMMANDS:
            continue
        seen.add(id(sub))
        yield from _leaves(sub, [*path, name])


LEAVES = list(_leaves(build_parser(mount_web=False), []))

PLAUSIBLE = [
    "job",
    "sched",
    "missing",
    "work",
    "5",
    "0",
    "-1",
    "1",
    "1000",
    "2026-01-01T00:00:00Z",
    "2026-13-45T99:00:00",
    "1767225600000",
    "5s",
    "1h",
    "-3m",
    "0s",
    "10d",
    '{"a": 1}',
    "[1, 2",
    "null",
    "*/5 * * * *",
    "0 3 * * 1-5",
    "61 * * * *",
    "user:alice",
    "alice",
    "UTC",
    "Europe/Paris",
    "Nowhere/Else",
    "succeeded",
    "queued",
]


def _deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def values() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(PLAUSIBLE),
        # argv words: any bytes but NUL, decoded as Python decodes them (surrogateescape)
        text().map(lambda t: t.replace("\x00", "")),
        invalid_bytes().map(lambda t: t.replace("\x00", "")),
        # JSON options' other forms and nesting past what json.loads can recurse through
        st.sampled_from(["-", "@", "@/nonexistent/payload.json", "@/dev/null", "@/"]),
        st.sampled_from([63, 64, 65, 1_000, 10_000, 100_000]).map(_deep_json),
    )


@st.composite
def command_lines(draw: st.DrawFn, occurrence_ids: list[str]) -> list[str]:
    path, parser = draw(st.sampled_from(LEAVES))
    argv = list(path)
    for action in parser._actions:
        if action.option_strings:
            continue
        if isinstance(action, argparse._SubParsersAction):
            continue
        count = 1 if action.nargs in (None, 1) else draw(st.integers(0, 2))
        for _ in range(count):
            if "occurrence" in action.dest and occurrence_ids:
                argv.append(draw(st.sampled_from(occurrence_ids)))
            else:
                argv.append(draw(values()))
    optionals = [
        a for a in parser._actions if a.option_strings and not set(a.option_strings) & SKIP_OPTIONS
    ]
    for action in draw(st.lists(st.sampled_from(optionals), max_size=4, unique_by=id)):
        argv.append(draw(st.sampled_from(action.option_strings)))
        if action.nargs != 0:
            if action.choices and draw(st.booleans()):
                argv.append(str(draw(st.sampled_from(list(action.choices)))))
            else:
                argv.append(draw(values()))
    return argv


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    target = str(tmp_path_factory.mktemp("fuzz-cli") / "db" / "cli.sqlite3")
    with jobledger.App(target, name="fuzz-cli", authorize=jobledger.allow_all) as app:
        app.ensure_job("job", "work")
        occurrences = [o.id for o in app.enqueue_many("job", [{"n": n} for n in range(5)])]
        app.schedule("sched", "work", cron="*/5 * * * *")
    return target, occurrences


def _run(target: str, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--db", target, *argv],
        env={"JOBLEDGER_DB": target, "HOME": "/nonexistent"},
        stdin=io.StringIO(""),
        stdout=out,
        stderr=err,
        sleep=lambda seconds: None,
    )
    return code, out.getvalue(), err.getvalue()


def _check(target: str, argv: list[str]) -> None:
    before = snapshot(target)
    ok, outcome = call_coded("cli.main", lambda: _run(target, argv))
    assert ok, outcome
    code, _out, err = outcome
    assert code in EXIT_STATUSES, (argv, code, err)
    assert "SCHEDULER_INTERNAL_ERROR" not in err, (argv, err)
    if code != 0:
        lines = err.strip().splitlines()
        assert any(CODED_LINE.match(line) for line in lines) or any(
            line.startswith("usage: ") for line in lines
        ), (argv, err)
        assert snapshot(target) == before, f"{argv} failed ({code}) but changed the store"


@budget(short=500, long=5_000)
@given(data=st.data())
def test_generated_command_lines(cli_store, data):
    target, occurrences = cli_store
    _check(target, data.draw(command_lines(occurrences), label="argv"))


@budget(short=200, long=3_000)
@given(
    argv=st.lists(st.one_of(values(), st.sampled_from([leaf[0][0] for leaf in LEAVES])), max_size=6)
)
def test_random_words(cli_store, argv):
    target, _ = cli_store
    if set(argv) & (SKIP_COMMANDS | SKIP_OPTIONS):
        counted("cli.skipped")
        return
    _check(target, argv)
