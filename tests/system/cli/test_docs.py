"""docs/cli.md documents every command with its real ``--help`` output, and its examples run."""

from __future__ import annotations

import difflib

from jobledger.cli import web
from tests.system.cli.docs_sync import DOC, command_helps, documented


def test_every_command_is_documented_with_its_current_help():
    helps = command_helps()
    docs = documented(DOC.read_text(encoding="utf-8"))
    if not web.available():  # without the web extra only a stub of `jobledger web` exists
        helps.pop("jobledger web")
        docs.pop("jobledger web", None)
    assert len(helps) >= 28
    unknown = sorted(set(docs) - set(helps))
    assert not unknown, f"docs/cli.md documents commands that do not exist: {unknown}"
    missing = [command for command in helps if command not in docs]
    assert not missing, (
        f"docs/cli.md has no help block for {missing}; add `<!-- help: COMMAND -->` blocks and "
        "run `.venv/bin/python -m tests.system.cli.docs_sync`"
    )
    stale = []
    for command, text in helps.items():
        if docs[command] != text:
            stale.append(
                "".join(
                    difflib.unified_diff(
                        docs[command].splitlines(keepends=True),
                        text.splitlines(keepends=True),
                        fromfile=f"docs/cli.md: {command}",
                        tofile=f"{command} --help",
                    )
                )
            )
    assert not stale, (
        "docs/cli.md is out of date; regenerate with "
        "`.venv/bin/python -m tests.system.cli.docs_sync`"
        "\n\n" + "\n".join(stale)
    )


def test_the_blocks_follow_the_command_tree_order():
    order = list(command_helps())
    docs = list(documented(DOC.read_text(encoding="utf-8")))
    assert docs == order
