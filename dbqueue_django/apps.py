"""App configuration: system checks, post-migrate table tuning and ring upkeep, the keeper's
setting."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate, pre_migrate


class DBQueueConfig(AppConfig):
    name = "dbqueue_django"
    label = "dbqueue_django"
    verbose_name = "dbqueue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dbqueue_django import checks  # noqa: F401 - registers the checks
        from dbqueue_django.tuning import tune_tables
        from dbqueue_django.upkeep import note_rings, restore_rings

        def _tune(sender: AppConfig, using: str, **kwargs: Any) -> None:
            tune_tables(sender, using)

        post_migrate.connect(_tune, weak=False, dispatch_uid="dbqueue_django.tune")
        pre_migrate.connect(note_rings, weak=False, dispatch_uid="dbqueue_django.note_rings")
        post_migrate.connect(restore_rings, weak=False, dispatch_uid="dbqueue_django.rings")
        self._register_admin()
        self._keeper()

    @staticmethod
    def _keeper() -> None:
        """``DBQUEUE_KEEPER = False`` turns off the keeper of the queues this process pops
        through ``Model.queue`` (:mod:`dbqueue.upkeep.keeper`): their upkeep is then left to
        a worker, or to the project calling ``Model.queue.upkeep()``."""
        from django.conf import settings

        from dbqueue.upkeep import keeper

        if getattr(settings, "DBQUEUE_KEEPER", True) is False:
            keeper.disable()

    def _register_admin(self) -> None:
        """Every queue model in the admin, the task results and the periodic schedules, unless
        the project registered them itself.

        The admin modules are imported first (as the admin's own ready() does; imports are
        cached, so nothing registers twice), whatever the order of INSTALLED_APPS.
        """
        from django.apps import apps

        if not apps.is_installed("django.contrib.admin"):
            return
        from django.contrib import admin

        from dbqueue_django.admin import register_queue_models
        from dbqueue_django.schedules_admin import register_schedules
        from dbqueue_django.tasks_admin import register_task_results

        admin.autodiscover()
        register_queue_models(admin.site)
        register_task_results(admin.site)
        register_schedules(admin.site)
