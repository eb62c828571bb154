"""System checks: a bad queue declaration or an unsupported database engine is reported by
``manage.py check`` as an Error naming what to change.

Throwaway queue models are declared inside ``isolate_apps``; the checks then run on the
isolated registry's ``testapp`` config through Django's public ``run_checks``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.apps.registry import Apps
from django.core import checks
from django.core.management import call_command
from django.db import connections, models
from django.db.backends.dummy.base import DatabaseWrapper as DummyDatabaseWrapper
from django.test.utils import isolate_apps, override_settings

from dbqueue.errors import UnsupportedDatabase
from dbqueue_django.executor import DjangoExecutor, dialect_for
from dbqueue_django.models import QueueModel, RingQueueModel

pytestmark = pytest.mark.django


@pytest.fixture
def isolated() -> Iterator[Apps]:
    with isolate_apps("tests.django.testapp") as apps:
        yield apps


def dbqueue_errors(apps: Apps) -> list[checks.CheckMessage]:
    """What the registered checks report for the isolated testapp's models (dbqueue's only)."""
    messages = checks.run_checks(app_configs=[apps.get_app_config("testapp")], tags=["models"])
    return [m for m in messages if m.id and m.id.startswith("dbqueue.")]


def only_error(apps: Apps, model: type[QueueModel]) -> checks.CheckMessage:
    errors = dbqueue_errors(apps)
    assert [(e.id, e.obj) for e in errors] == [("dbqueue.E001", model)], errors
    (error,) = errors
    assert error.level == checks.ERROR and error.hint
    return error


# -- declarations ---------------------------------------------------------------------------


def test_a_valid_queue_model_has_no_errors(isolated: Apps) -> None:
    class Mail(QueueModel):
        to = models.EmailField()
        subject = models.CharField(max_length=200)
        sent_by = models.GenericIPAddressField(null=True)
        size = models.PositiveIntegerField(default=0)

        class Meta:
            app_label = "testapp"

        class QueueOptions:
            max_attempts = 10
            lease = timedelta(minutes=5)

    assert dbqueue_errors(isolated) == []


def test_a_foreign_key_to_a_model_with_an_auto_incremented_key_is_a_payload_field(
    isolated: Apps,
) -> None:
    """Most models' key is an AutoField or BigAutoField (auth.User's, any model's default): a
    ForeignKey to one stores that integer, and the queue's key may name it."""

    class Member(models.Model):
        id = models.BigAutoField(primary_key=True)

        class Meta:
            app_label = "testapp"

        def __str__(self) -> str:
            return f"member {self.pk}"

    class Welcome(QueueModel):
        user = models.ForeignKey(Member, on_delete=models.CASCADE)

        class Meta:
            app_label = "testapp"

        class QueueOptions:
            unique = ("user",)

    assert dbqueue_errors(isolated) == []
    (field,) = Welcome.queue.spec.fields
    assert (field.name, field.kind) == ("user_id", "bigint")
    assert Welcome.queue.spec.options.unique == ("user_id",)


@pytest.mark.parametrize("reserved", ["state", "priority", "attempts", "run_at"])
def test_a_reserved_field_name(isolated: Apps, reserved: str) -> None:
    Bad = type(
        "Bad",
        (QueueModel,),
        {
            "__module__": __name__,
            reserved: models.IntegerField(default=0),
            "Meta": type("Meta", (), {"app_label": "testapp"}),
        },
    )
    error = only_error(isolated, Bad)
    assert f"field {reserved!r}" in error.msg and "reserved" in error.msg
    assert error.msg.startswith("testapp.Bad:")


def test_a_reserved_column_name_under_another_field_name(isolated: Apps) -> None:
    class Renamed(QueueModel):
        status = models.IntegerField(db_column="state")

        class Meta:
            app_label = "testapp"

    assert "'state'" in only_error(isolated, Renamed).msg


def test_an_unsupported_field_type(isolated: Apps) -> None:
    class Upload(QueueModel):
        document = models.FileField()

        class Meta:
            app_label = "testapp"

    msg = only_error(isolated, Upload).msg
    assert "'document'" in msg and "FileField" in msg and "cannot store" in msg


def test_a_many_to_many_field_is_not_a_payload(isolated: Apps) -> None:
    """A many-to-many field has no column; its through table keeps foreign keys to the data
    row, which the queue deletes with plain SQL on every ack. It must be reported."""

    class Tagged(QueueModel):
        tags = models.ManyToManyField("auth.Group")

        class Meta:
            app_label = "testapp"

    msg = only_error(isolated, Tagged).msg
    assert "'tags'" in msg and "ManyToManyField" in msg


def test_an_upper_case_db_table(isolated: Apps) -> None:
    class Shouty(QueueModel):
        body = models.TextField()

        class Meta:
            app_label = "testapp"
            db_table = "Shouty_Jobs"

    msg = only_error(isolated, Shouty).msg
    assert "'Shouty_Jobs'" in msg and "lower-case" in msg


def test_an_unknown_queue_option(isolated: Apps) -> None:
    class Typo(QueueModel):
        body = models.TextField()

        class Meta:
            app_label = "testapp"

        class QueueOptions:
            max_attempt = 3  # max_attempts

    msg = only_error(isolated, Typo).msg
    assert "unknown option(s) max_attempt" in msg and "max_attempts" in msg


def test_an_invalid_queue_option_value(isolated: Apps) -> None:
    class Impatient(QueueModel):
        body = models.TextField()

        class Meta:
            app_label = "testapp"

        class QueueOptions:
            lease = 30  # seconds, but a timedelta is required

    assert "lease must be a timedelta" in only_error(isolated, Impatient).msg


def test_keep_done_must_be_a_bool(isolated: Apps) -> None:
    class Hoarder(QueueModel):
        body = models.TextField()

        class Meta:
            app_label = "testapp"

        class QueueOptions:
            keep_done = "yes"

    msg = only_error(isolated, Hoarder).msg
    assert msg.startswith("testapp.Hoarder.QueueOptions: keep_done must be True or False")
    assert "'yes'" in msg


def test_unique_must_name_payload_fields(isolated: Apps) -> None:
    class Deduped(QueueModel):
        body = models.TextField()

        class Meta:
            app_label = "testapp"

        class QueueOptions:
            unique = ("body", "bodyy")

    msg = only_error(isolated, Deduped).msg
    assert msg.startswith("testapp.Deduped.QueueOptions: unique names 'bodyy'")
    assert "its fields: body" in msg


def test_an_unknown_unique_scope(isolated: Apps) -> None:
    class Scoped(QueueModel):
        body = models.TextField()

        class Meta:
            app_label = "testapp"

        class QueueOptions:
            unique = "body"
            unique_scope = "forever"

    msg = only_error(isolated, Scoped).msg
    assert "unique_scope must be one of 'queued', 'unfinished', 'stored'" in msg


def test_a_ring_cannot_have_unique_items(isolated: Apps) -> None:
    class UniqueRing(RingQueueModel):
        body = models.TextField()

        class Meta:
            app_label = "testapp"

        class QueueOptions:
            capacity = 4
            unique = ("body",)

    assert "split queue" in only_error(isolated, UniqueRing).msg


def test_each_bad_model_is_reported_once(isolated: Apps) -> None:
    class One(QueueModel):
        state = models.IntegerField()

        class Meta:
            app_label = "testapp"

    class Two(QueueModel):
        blob = models.FileField()

        class Meta:
            app_label = "testapp"

    class Fine(QueueModel):
        body = models.TextField()

        class Meta:
            app_label = "testapp"

    errors = dbqueue_errors(isolated)
    assert sorted(e.obj.__name__ for e in errors) == ["One", "Two"]


# -- the real project -----------------------------------------------------------------------


@pytest.mark.postgresql
@pytest.mark.sqlite
@pytest.mark.django_db(databases=["default", "sqlite"])
def test_check_passes_for_the_test_project() -> None:
    call_command("check", verbosity=0)  # raises SystemCheckError on any error
    call_command("check", "--database", "default", "--database", "sqlite", verbosity=0)
    from dbqueue_django.checks import check_queue_models

    assert check_queue_models(app_configs=None) == []


# -- database engines -----------------------------------------------------------------------


class MySQLLikeWrapper(DummyDatabaseWrapper):
    """A Django connection object of another vendor; it is never connected."""

    vendor = "mysql"


def mysql_like(alias: str = "legacy") -> MySQLLikeWrapper:
    return MySQLLikeWrapper({"ENGINE": "django.db.backends.dummy", "NAME": "legacy"}, alias)


def test_dialect_for_names_the_alias_and_the_supported_engines() -> None:
    with pytest.raises(UnsupportedDatabase) as info:
        dialect_for(mysql_like())
    msg = str(info.value)
    assert "'legacy'" in msg and "'mysql'" in msg and "postgresql, sqlite" in msg
    dummy = DummyDatabaseWrapper({"ENGINE": "django.db.backends.dummy"}, "nothing")
    with pytest.raises(UnsupportedDatabase, match="'unknown'"):
        dialect_for(dummy)


@pytest.mark.postgresql
@pytest.mark.sqlite
def test_dialect_for_the_configured_databases() -> None:
    assert dialect_for(connections["default"]).name == "postgresql"
    assert dialect_for(connections["sqlite"]).name == "sqlite"


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_a_queue_model_routed_to_an_unsupported_database_is_e002() -> None:
    from django.apps import apps
    from django.conf import settings

    from dbqueue_django.checks import check_queue_models

    connections["legacy"] = mysql_like()
    try:
        databases = {**settings.DATABASES, "legacy": {"ENGINE": "django.db.backends.dummy"}}
        with override_settings(DATABASES=databases):
            errors = check_queue_models(app_configs=[apps.get_app_config("testapp")])
            with pytest.raises(UnsupportedDatabase, match="'legacy'"):
                DjangoExecutor("legacy")
    finally:
        del connections["legacy"]
    assert {e.id for e in errors} == {"dbqueue.E002"}
    assert sorted(e.obj.__name__ for e in errors) == [
        "FanoutJob", "FanoutTick", "Job", "KeptJob", "Ping", "QueuedUniqueJob", "RingJob",
        "StoredUniqueJob", "Tick", "UniqueJob",
    ]  # fmt: skip
    assert all("'legacy'" in e.msg and "router" in (e.hint or "") for e in errors)
