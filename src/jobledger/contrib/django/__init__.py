"""jobledger in a Django project (``pip install 'jobledger[django]'``).

Add ``"jobledger.contrib.django"`` to ``INSTALLED_APPS`` and say where the store and the
handlers are::

    JOBLEDGER = {
        # The store. Default: the "default" database's PostgreSQL, so that
        # app.enqueue(..., conn=django.db.connection) commits with your models (SPEC §8).
        "STORE": "postgresql://app@db/app",
        # The jobledger.App whose handlers the worker runs ("module:attribute"); without it an
        # App with no handlers is made on STORE (enough to enqueue, not to work).
        "APP": "myproject.jobs:app",
        "STORE_OPTIONS": {"schema": "jobledger"},     # passed to jobledger.open_store
    }

Then ``python manage.py jobledger_worker`` runs a worker, and in a view::

    from django.db import connection, transaction
    from jobledger.contrib.django import get_app

    with transaction.atomic():
        order = Order.objects.create(...)
        get_app().enqueue("confirm", payload={"order": order.pk}, key=f"order-{order.pk}",
                          conn=connection)

:func:`enqueue_on_commit` is for a store on *another* database: it enqueues after Django's
commit, which is **not atomic** (a crash between the two loses the job; docs/transactions.md).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any
from urllib.parse import quote

from ...app import App
from ...errors import InvalidArgument
from ...models import Occurrence

__all__ = ["enqueue_on_commit", "get_app", "reset", "settings_store"]

_lock = threading.Lock()
_made: dict[str, App] = {}  # "app" -> the App get_app() made or imported


def _settings() -> dict[str, Any]:
    from django.conf import settings

    value = getattr(settings, "JOBLEDGER", {})
    if not isinstance(value, dict):
        raise InvalidArgument("settings.JOBLEDGER must be a dict", details={"field": "JOBLEDGER"})
    unknown = sorted(set(value) - {"STORE", "APP", "STORE_OPTIONS", "NAME"})
    if unknown:
        raise InvalidArgument(
            f"unknown JOBLEDGER settings: {', '.join(unknown)}",
            details={"field": "JOBLEDGER", "unknown": unknown},
        )
    return value


def settings_store() -> str:
    """``JOBLEDGER["STORE"]``, else a URL for the ``default`` database when it is PostgreSQL."""
    configured = _settings().get("STORE")
    if configured is not None:
        if not isinstance(configured, str) or not configured:
            raise InvalidArgument("JOBLEDGER['STORE'] must be a store path or URL")
        return configured
    from django.conf import settings

    database = settings.DATABASES.get("default", {})
    if database.get("ENGINE") != "django.db.backends.postgresql":
        raise InvalidArgument(
            "set JOBLEDGER['STORE']: the default database is not PostgreSQL",
            details={"field": "JOBLEDGER"},
        )
    user = quote(str(database.get("USER") or ""), safe="")
    password = database.get("PASSWORD")
    auth = f"{user}:{quote(str(password), safe='')}@" if password else (f"{user}@" if user else "")
    host = quote(str(database.get("HOST") or "localhost"), safe="")
    port = f":{database['PORT']}" if database.get("PORT") else ""
    return f"postgresql://{auth}{host}{port}/{quote(str(database['NAME']), safe='')}"


def get_app() -> App:
    """The project's :class:`~jobledger.App` (made once per process from ``JOBLEDGER``)."""
    with _lock:
        if "app" not in _made:
            _made["app"] = _load()
        return _made["app"]


def _load() -> App:
    config = _settings()
    target = config.get("APP")
    if target is not None:
        module_name, _, attribute = str(target).partition(":")
        found = getattr(importlib.import_module(module_name), attribute or "app", None)
        if not isinstance(found, App):
            raise InvalidArgument(
                f"JOBLEDGER['APP'] must name a jobledger.App (module:attribute): {target}",
                details={"field": "JOBLEDGER"},
            )
        return found
    options = config.get("STORE_OPTIONS") or {}
    return App(settings_store(), name=config.get("NAME", "django"), store_options=options)


def reset() -> None:
    """Forget the app made by :func:`get_app` (closing it if this module made it): for tests
    that change ``JOBLEDGER``."""
    with _lock:
        app = _made.pop("app", None)
    if app is not None and _settings().get("APP") is None:
        app.close()


def enqueue_on_commit(job_id: str, *, using: str | None = None, **options: Any) -> None:
    """Enqueue after the current Django transaction commits (at once outside one) — for a
    store on **another** database than ``using``. Not atomic: the job is lost if the process
    dies between Django's commit and the enqueue, and errors surface in the commit hook. On the
    same PostgreSQL database use ``get_app().enqueue(..., conn=connection)`` instead."""
    from django.db import transaction

    app = get_app()

    def enqueue() -> Occurrence:
        return app.enqueue(job_id, **options)

    transaction.on_commit(enqueue, using=using, robust=False)
