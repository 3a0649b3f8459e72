"""``jobledger.contrib.django``: the store from Django's settings, enqueue with
``conn=connection`` inside ``transaction.atomic()``, and ``manage.py jobledger_worker``."""

from __future__ import annotations

import io

import pytest

import jobledger
from tests.system.transactions import django_app
from tests.system.transactions.drivers import use_database

pytestmark = pytest.mark.postgres


def test_the_store_comes_from_the_default_database_and_the_worker_command_runs_it(
    postgres_database_url: str,
) -> None:
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, transaction

    from jobledger.contrib import django as contrib

    use_database(postgres_database_url)
    settings.JOBLEDGER = {}
    contrib.reset()
    try:
        assert contrib.settings_store().endswith("/" + settings.DATABASES["default"]["NAME"])
        plain = contrib.get_app()  # made from DATABASES["default"]: no handlers
        plain.create_job("confirm", "send_confirmation")
        with transaction.atomic():
            occurrence = plain.enqueue("confirm", payload={"order": 7}, conn=connection)
            assert plain.store.get_occurrence(occurrence.id) is None
        assert plain.store.get_occurrence(occurrence.id) is not None
        contrib.reset()

        worker_app = jobledger.App(postgres_database_url, authorize=jobledger.allow_all)
        done: list[object] = []
        worker_app.handler("send_confirmation")(lambda ctx: done.append(ctx.payload))
        django_app.app = worker_app
        settings.JOBLEDGER = {"APP": "tests.system.transactions.django_app:app"}
        assert contrib.get_app() is worker_app
        out = io.StringIO()
        call_command("jobledger_worker", "--until-idle", stdout=out)
        assert done == [{"order": 7}]
        assert "idle" in out.getvalue()
    finally:
        contrib.reset()
        if django_app.app is not None:
            django_app.app.close()
            django_app.app = None
        settings.JOBLEDGER = {}
        connection.close()


def test_bad_settings_are_refused(postgres_database_url: str) -> None:
    from django.conf import settings

    from jobledger.contrib import django as contrib

    use_database(postgres_database_url)
    contrib.reset()
    settings.JOBLEDGER = {"STORE": "x", "WHAT": 1}
    with pytest.raises(jobledger.InvalidArgument):
        contrib.get_app()
    settings.JOBLEDGER = {"APP": "tests.system.transactions.django_app:nothing"}
    with pytest.raises(jobledger.InvalidArgument):
        contrib.get_app()
    settings.JOBLEDGER = {}


def test_the_worker_command_takes_exactly_the_options_of_jobledger_worker(
    postgres_database_url: str,
) -> None:
    import argparse

    from jobledger.cli.worker import OPTION_FLAGS, options_from_args
    from jobledger.contrib.django.management.commands.jobledger_worker import Command

    use_database(postgres_database_url)
    parser = Command().create_parser("manage.py", "jobledger_worker")
    flags = {option for action in parser._actions for option in action.option_strings}
    assert set(OPTION_FLAGS.values()) <= flags
    argv = [
        "--queues=mail,sms",
        "--queues=push",
        "--poll-interval=2500ms",
        "--grace-period=30s",
        "--lease=2m",
        "--metrics-port=9100",
        "--kinds=send_confirmation",
        "--no-planner",
    ]
    from_manage = options_from_args(parser.parse_args(argv))
    cli = argparse.ArgumentParser()
    from jobledger.cli.worker import add_option_flags

    add_option_flags(cli)
    assert from_manage == options_from_args(cli.parse_args(argv))
    assert from_manage.queues == frozenset({"mail", "sms", "push"})
    assert from_manage.metrics_port == 9100 and from_manage.planner is False
