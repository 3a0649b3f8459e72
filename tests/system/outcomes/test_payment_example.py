"""examples/payment.py runs on both stores: two SIGKILLed charges, two decisions, one charge
per order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_payment_example_runs(any_target):
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "payment.py"), any_target],
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "2 cases waiting for a decision; nothing was re-run" in done.stdout
    assert "order A: applied" in done.stdout
    assert "order B: not_applied" in done.stdout
    assert done.stdout.count("charged exactly once") == 2
