"""A process for test_group_commit_kill: threads enqueue through one store until killed.

Usage: python group_enqueue_process.py TARGET THREADS OUT_FILE

Each thread calls ``enqueue_batch`` of one request in a loop (the store's write transaction,
shared by group commit among the threads that meet) and appends the returned id to OUT_FILE —
one ``write`` on an ``O_APPEND`` descriptor — only after the call returned. The test SIGKILLs
this process at a random instant: every id written must be committed.
"""

from __future__ import annotations

import os
import sys
import threading

import jobledger
from jobledger import EnqueueRequest


def main(target: str, threads: int, out_file: str) -> int:
    options = {"listen": False} if target.startswith("postgresql://") else {}
    store = jobledger.open_store(target, **options)  # type: ignore[arg-type]
    out = os.open(out_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def work(index: int) -> None:
        n = 0
        while True:
            n += 1
            [made] = store.enqueue_batch([EnqueueRequest("j", 0, f"t{index}-{n}")])
            os.write(out, (made.id + "\n").encode())

    for index in range(threads):
        threading.Thread(target=work, args=(index,), daemon=True).start()
    os.write(out, b"ready\n")
    threading.Event().wait()  # until killed
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
