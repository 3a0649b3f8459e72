"""A process for test_enqueue_race: enqueue every key once through ``app.enqueue(job, key=…)``
as soon as GO_FILE appears, racing the other processes, and report which occurrence each key
returned.

Usage: python enqueue_race_process.py TARGET NAME SEED KEYS GO_FILE REPORT
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback
from pathlib import Path

import jobledger


def main(argv: list[str]) -> int:
    target, name, seed, keys, go, report = argv
    found: dict[str, list[object]] = {}
    errors: list[str] = []
    try:
        app = jobledger.App(target, authorize=jobledger.allow_all, name=name)
        with app:
            app.ensure_job("mail", "mail")  # raced as well: every process declares the job
            Path(f"{report}.ready").write_text("ready")
            deadline = time.monotonic() + 60
            while not Path(go).exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("the test never said go")
                time.sleep(0.002)
            order = [f"order-{index}" for index in range(int(keys))]
            random.Random(int(seed)).shuffle(order)
            for key in order:
                occurrence = app.enqueue("mail", key=key, payload={"order": key})
                found[key] = [occurrence.id, occurrence.deduplicated]
    except BaseException:
        errors.append(traceback.format_exc())
    Path(report).write_text(json.dumps({"found": found, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
