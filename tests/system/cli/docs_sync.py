"""Keep docs/cli.md's help blocks equal to the real ``--help`` output.

docs/cli.md embeds every command's ``--help`` between markers::

    <!-- help: jobledger job add -->
    ```text
    usage: jobledger job add …
    ```
    <!-- /help -->

``tests/system/cli/test_docs.py`` fails (with a diff) when a block is stale, missing or names a
command that does not exist. To regenerate the blocks after changing the parser::

    .venv/bin/python -m tests.system.cli.docs_sync
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from jobledger.cli import build_parser

DOC = Path(__file__).resolve().parents[3] / "docs" / "cli.md"
BLOCK = re.compile(
    r"<!-- help: (?P<command>[^>]+?) -->\n```text\n(?P<body>.*?)```\n<!-- /help -->", re.S
)


def _children(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """A parser's sub-commands by primary name (aliases point at the same parser)."""
    found: list[tuple[str, argparse.ArgumentParser]] = []
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                if id(child) not in seen:
                    seen.add(id(child))
                    found.append((name, child))
    return found


def command_helps() -> dict[str, str]:
    """``{"jobledger": help, "jobledger db": help, "jobledger db init": help, …}`` in tree order."""
    helps: dict[str, str] = {}

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        helps[prefix] = parser.format_help()
        for name, child in _children(parser):
            walk(f"{prefix} {name}", child)

    walk("jobledger", build_parser())
    return helps


def documented(text: str) -> dict[str, str]:
    return {match["command"]: match["body"] for match in BLOCK.finditer(text)}


def render(text: str, helps: dict[str, str]) -> str:
    """``text`` with every help block's body replaced by the current help."""

    def replace(match: re.Match[str]) -> str:
        command = match["command"]
        body = helps.get(command, match["body"])
        return f"<!-- help: {command} -->\n```text\n{body}```\n<!-- /help -->"

    return BLOCK.sub(replace, text)


def main() -> int:
    text = DOC.read_text(encoding="utf-8")
    helps = command_helps()
    missing = [command for command in helps if command not in documented(text)]
    DOC.write_text(render(text, helps), encoding="utf-8")
    if missing:
        sys.stderr.write(
            "docs/cli.md has no help block for: " + ", ".join(missing) + "\n"
            "add `<!-- help: COMMAND -->` blocks for them and run this again\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
