"""The test dependencies are pinned: scripts/test installs with constraints/test.txt, and every
package of the test extra has exactly one pinned version there."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert found is not None, requirement
    return re.sub(r"[-_.]+", "-", found.group(0)).lower()


def test_scripts_test_installs_with_the_constraints() -> None:
    script = (ROOT / "scripts" / "test").read_text("utf-8")
    assert "pip install --quiet -c constraints/test.txt -e '.[test]'" in script


def test_every_test_dependency_is_pinned_once() -> None:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints" / "test.txt").read_text("utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        assert version and re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), line
        assert _name(name) not in pins, line
        pins[_name(name)] = version
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"][
        "optional-dependencies"
    ]["test"]
    missing = sorted({_name(requirement) for requirement in extra} - set(pins))
    assert missing == [], missing
