"""Create the bench's PostgreSQL role, database and schemas, and apply Procrastinate's schema.

Run by setup.sh with the peers' venv. Idempotent; ``--reset`` drops both schemas first.

* role ``peersbench`` (LOGIN; the server trusts 127.0.0.1) owning database ``peersbench``;
* schema ``procrastinate``: Procrastinate's own schema (``procrastinate schema --apply``),
  reached through ``search_path`` (see peers_procrastinate_app.py);
* schema ``jlbench``: jobledger's, created by jobledger itself when a driver opens the store.

The admin connection is ``PEERSBENCH_PG_ADMIN`` with the database swapped for ``postgres``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import peerscommon as common
import psycopg
from psycopg import conninfo, sql


def admin(dbname: str) -> psycopg.Connection:
    params = conninfo.conninfo_to_dict(common.PG_ADMIN_URL)
    params["dbname"] = dbname
    return psycopg.connect(conninfo.make_conninfo(**params), autocommit=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reset", action="store_true", help="drop both schemas first")
    args = parser.parse_args(argv)
    bench = conninfo.conninfo_to_dict(common.PG_URL)
    role, database = bench["user"], bench["dbname"]

    with admin("postgres") as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            print(f"created role {role}")
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
        if exists.fetchone() is None:
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(database), sql.Identifier(role)
                )
            )
            print(f"created database {database}")

    with psycopg.connect(common.PG_URL, autocommit=True) as conn:
        if args.reset:
            for schema in (common.PROCRASTINATE_SCHEMA, common.JOBLEDGER_SCHEMA):
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
                print(f"dropped schema {schema}")
        conn.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                sql.Identifier(common.PROCRASTINATE_SCHEMA)
            )
        )
        applied = conn.execute(
            "SELECT 1 FROM information_schema.tables"
            " WHERE table_schema = %s AND table_name = 'procrastinate_jobs'",
            [common.PROCRASTINATE_SCHEMA],
        ).fetchone()

    if applied is None:
        subprocess.run(
            [common.venv_bin("procrastinate"), "--app", "peers_procrastinate_app.app", "schema",
             "--apply"],
            env=common.worker_env({}),
            cwd=str(common.HERE),
            check=True,
        )  # fmt: skip
        print(f"applied Procrastinate's schema in schema {common.PROCRASTINATE_SCHEMA}")
    else:
        print(f"Procrastinate's schema already in schema {common.PROCRASTINATE_SCHEMA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
