"""The conformance queue for the core fronts: the twin of ``tests.django.testapp.Job``
(``tests/django/test_parity.py`` checks that the two agree), the options of its twin that
keeps done items (``KeptJob``), and those of the conformance ring (``RingJob``)."""

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
#: The ring's: 1,024 slots; stranded_after 0, so that a rescue pushes again at once what a
#: rolled-back transactional pop stranded (PostgreSQL's pop numbers are not transactional);
#: push_timeout 60 s, so that producers that outrun their consumers wait for them (SQLite's
#: writers take the lock in no fair order: a consumer may wait seconds for its turn).
RING_OPTIONS = replace(
    JOB_OPTIONS, capacity=1024, stranded_after=timedelta(0), push_timeout=timedelta(seconds=60)
)
