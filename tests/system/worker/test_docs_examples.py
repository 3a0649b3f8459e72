"""The code examples in docs/runtime.md, docs/fenced-side-effects.md, docs/queues.md and
docs/flows.md run, in order.

Each page's ``python`` blocks run as one session in a temporary directory; ``sql`` blocks run
against an in-memory SQLite database. A ``test_*`` function an example defines is called too.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[3] / "docs"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(page: str, language: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return [code for lang, code in BLOCK.findall(text) if lang == language]


@pytest.mark.parametrize("page", ["runtime.md", "fenced-side-effects.md", "queues.md", "flows.md"])
def test_python_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page}"}
    found = blocks(page, "python")
    assert found
    try:
        for number, code in enumerate(found, 1):
            exec(compile(code, f"{page} example {number}", "exec"), namespace)
        for name, value in list(namespace.items()):
            if name.startswith("test_") and callable(value):
                (tmp_path / name).mkdir()
                value(tmp_path / name)
    finally:
        app = namespace.get("app")
        if app is not None:
            app.close()
        db = namespace.get("db")
        if isinstance(db, sqlite3.Connection):
            db.close()


def test_sql_examples_run():
    [sql] = blocks("fenced-side-effects.md", "sql")
    create, upsert = sql.split(";", 1)
    upsert = re.sub(r"^\s*--.*$", "", upsert, flags=re.MULTILINE).strip().rstrip(";")
    with sqlite3.connect(":memory:") as db:
        db.execute(create)

        def write(fence: int, total: int) -> int:
            row = {"occurrence_id": "occ_1", "fence": fence, "total_cents": total}
            return db.execute(upsert, row).rowcount

        assert write(2, 100) == 1
        assert write(1, 50) == 0  # an older fence is refused
        assert write(3, 70) == 1
        assert db.execute("SELECT fence, total_cents FROM invoice_totals").fetchall() == [(3, 70)]
