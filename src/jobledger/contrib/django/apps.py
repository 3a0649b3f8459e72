"""The Django app config of :mod:`jobledger.contrib.django`."""

from __future__ import annotations

from django.apps import AppConfig


class JobledgerConfig(AppConfig):
    name = "jobledger.contrib.django"
    label = "jobledger"
    verbose_name = "jobledger"
