"""The README's Python examples run as written (each in a fresh working directory)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = [
    block
    for block in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    if "import jobledger" in block
]


def test_the_readme_has_runnable_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path):
    script = tmp_path / f"example_{index}.py"
    script.write_text(BLOCKS[index])
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip(), "an example should show what it did"
