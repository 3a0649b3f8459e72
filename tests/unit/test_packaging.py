"""pyproject.toml builds without deprecation warnings: the licence is an SPDX expression (the
table form makes setuptools warn on every `pip install`), with a setuptools that reads it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


def test_the_license_is_an_spdx_expression():
    assert PYPROJECT["project"]["license"] == "MIT"


def test_the_build_needs_a_setuptools_that_reads_it():
    [setuptools] = [
        requirement
        for requirement in PYPROJECT["build-system"]["requires"]
        if requirement.startswith("setuptools")
    ]
    found = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", setuptools)
    assert found and int(found[1]) >= 77, setuptools


def test_the_sqlalchemy_extra_brings_what_async_sessions_need():
    """Issue 32 item 10: with SQLAlchemy 2.1 `enqueue_async(conn=AsyncSession)` failed on a
    missing greenlet: SQLAlchemy's asyncio support is its own extra."""
    requirements = PYPROJECT["project"]["optional-dependencies"]["sqlalchemy"]
    [sqlalchemy] = [r for r in requirements if r.startswith("sqlalchemy")]
    assert re.match(r"sqlalchemy\[([a-z,]*\b)?asyncio\b", sqlalchemy), sqlalchemy
