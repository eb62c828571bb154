"""``KeptJob``, Job's twin that keeps its processed items as done (``keep_done``), on a base
of its own: a module apart from tests.sqlalchemy.models, so the ``dbqueue`` CLI tests that
declare every queue of that module, and the tests that create every table of its
``Base.metadata``, are unchanged by it."""

from __future__ import annotations

from sqlalchemy.orm import DeclarativeBase

from dbqueue_sa import QueueMixin
from tests.sqlalchemy.models import Job, JobColumns


class KeptBase(DeclarativeBase):
    """KeptJob's own base and MetaData."""


class KeptJob(JobColumns, QueueMixin, KeptBase):
    """Job's twin that keeps its processed items as done (testapp.KeptJob's twin)."""

    __tablename__ = "sa_kept_job"
    __queue_options__ = {**Job.__queue_options__, "keep_done": True}
