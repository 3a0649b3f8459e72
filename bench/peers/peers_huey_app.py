"""The Huey side of the bench: a SqliteHuey with every default, and one no-op task.

The database file comes from ``PEERSBENCH_HUEY_DB``. The consumer is Huey's own::

    huey_consumer peers_huey_app.huey -w 4 -k thread -l huey.log
"""

from __future__ import annotations

import os

from huey import SqliteHuey

huey = SqliteHuey(
    "peersbench", filename=os.environ.get("PEERSBENCH_HUEY_DB", "/tmp/peersbench-huey.db")
)


@huey.task()
def noop() -> None:
    return None
