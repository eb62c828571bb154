"""The conformance queue for the core fronts: the twin of ``tests.django.testapp.Job``
(``tests/django/test_parity.py`` checks that the two agree), and the options of its twin that
keeps done items (``KeptJob``)."""

from dataclasses import replace
from datetime import timedelta

from dbqueue.spec import Field, FieldKind, QueueOptions

JOB_FIELDS = (
    Field("name", FieldKind.TEXT, max_length=50),
    Field("n", FieldKind.INTEGER, default=0),
    Field("doc", FieldKind.JSON, nullable=True),
    Field("at", FieldKind.DATETIME, nullable=True),
    Field("amount", FieldKind.DECIMAL, nullable=True, max_digits=8, decimal_places=2),
    Field("uid", FieldKind.UUID, nullable=True),
    Field("blob", FieldKind.BYTES, nullable=True),
    Field("flag", FieldKind.BOOLEAN, default=False),
    Field("small", FieldKind.SMALLINT, nullable=True, min_value=0),
)
JOB_OPTIONS = QueueOptions(max_attempts=3, lease=timedelta(seconds=30))
KEPT_OPTIONS = replace(JOB_OPTIONS, keep_done=True)
