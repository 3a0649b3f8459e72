"""The Procrastinate side of the bench: an App on its psycopg connector, one async no-op task.

All its tables live in schema ``procrastinate`` of database ``peersbench``, reached through
``search_path`` on every connection (the worker's and the driver's alike). The worker is
Procrastinate's own::

    procrastinate --app peers_procrastinate_app.app worker --concurrency 4
"""

from __future__ import annotations

import os

import peerscommon as common
from procrastinate import App, PsycopgConnector


def conninfo() -> str:
    """The bench role's URL with ``search_path`` set to Procrastinate's schema."""
    return os.environ.get(
        "PEERSBENCH_PROCRASTINATE_DSN",
        f"{common.PG_URL}?options=-csearch_path%3D{common.PROCRASTINATE_SCHEMA}",
    )


app = App(connector=PsycopgConnector(conninfo=conninfo()))


@app.task(name="noop")
async def noop() -> None:
    return None
