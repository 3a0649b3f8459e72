"""Child process for the kill test: open a caller transaction, write the application's row
and enqueue in it, say "ready", and wait to be killed (``SIGKILL``) before committing."""

from __future__ import annotations

import sys
import threading

import jobledger
from tests.system.transactions.drivers import SQLITE, Driver


def main() -> None:
    name, target = sys.argv[1], sys.argv[2]
    options = {"shared_file": True} if name in SQLITE else {}
    app = jobledger.App(target, authorize=jobledger.allow_all, **options)
    caller = Driver(name, app, target).begin()
    caller.order(1)
    occurrence = caller.enqueue(payload={"order": 1}, key="order-1")
    print(f"ready {occurrence.id}", flush=True)
    threading.Event().wait()  # never commits: the parent kills this process


if __name__ == "__main__":
    main()
