"""The models dbqueue generates (``…QueueMeta``, ``…QueueHead``, ``…Failed``) import like any
model, so Django 6's ``manage.py shell`` auto-imports them without a warning."""

from __future__ import annotations

import io

import django
import pytest
from django.apps import apps
from django.core.management import call_command
from django.utils.module_loading import import_string

from dbqueue_django.models import TaskItem
from tests.django.testapp.models import Job, RingJob

pytestmark = pytest.mark.django


def test_every_model_imports_from_its_module() -> None:
    for model in apps.get_models():
        assert import_string(f"{model.__module__}.{model.__name__}") is model


def test_the_generated_models_are_bound_in_their_modules() -> None:
    from dbqueue_django import models as dbqueue_models
    from tests.django.testapp import models as testapp_models

    assert testapp_models.JobQueueMeta is Job.queue_meta_model
    assert testapp_models.JobQueueHead is Job.queue_head_model
    assert testapp_models.RingJobFailed is RingJob.failed_model
    assert dbqueue_models.TaskItemQueueMeta is TaskItem.queue_meta_model
    assert dbqueue_models.TaskItemQueueHead is TaskItem.queue_head_model


@pytest.mark.skipif(django.VERSION < (6, 0), reason="shell auto-imports models from Django 6")
def test_the_shell_auto_imports_them_without_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "shell",
        command="print(JobQueueMeta.__name__, RingJobFailed.__name__)",
        verbosity=2,
        stdout=out,
        stderr=err,
    )
    assert "could not be automatically imported" not in out.getvalue() + err.getvalue()
    assert "JobQueueMeta" in out.getvalue()  # listed among the imports
    assert "JobQueueMeta RingJobFailed" in capsys.readouterr().out  # the command's print()
