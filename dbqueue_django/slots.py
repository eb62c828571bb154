"""``RingSlots``: a ring queue's preallocated slots and counters in Django migrations.

Django's migrations know tables, columns, indexes and constraints, not rows or sequences. A ring
table is useless without its ``capacity`` slot rows and its push and pop counters, and
``makemigrations`` must write them into the project's own migrations with no hand-written
operation. So ``RingQueueModel`` adds this index to the model's ``Meta.indexes``:

* its SQL is the core's (:func:`dbqueue.schema.ring_slot_statements`): the counters (PostgreSQL
  sequences, SQLite one-row tables), the slot rows, and the storage parameters (PostgreSQL) or
  the index on ``seq`` (SQLite, where it is this very index); on PostgreSQL a ring of more
  than 6,000 slots first has its table split into segments
  (:func:`dbqueue.schema.ring_segment_bounds`), and removing the slots makes it one table
  again;
* it deconstructs with its ``capacity``, so changing the capacity makes the autodetector write
  ``RemoveIndex`` + ``AddIndex``: the old slots are removed (only from an empty ring, else
  :class:`RingNotEmpty`) and the new ones preallocated, their numbers continuing above every
  number the counters ever handed out. Migrating backwards runs the same two steps the other
  way.

Numbering continues rather than restarting so that the protocol's invariants hold across the
change: slot ``mod(p, C)`` holds ``p - C`` for the first number ``p`` it will receive, both
counters start at the same number, and no new message takes the number of one still in the
failed table.
"""

from __future__ import annotations

from typing import Any

from django.core.management.color import no_style
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.backends.ddl_references import Statement

from dbqueue.ring import RingQueue
from dbqueue.schema import (
    drop_group_counter_statements,
    group_ring_fill_statements,
    ring_plain_statements,
)
from dbqueue.spec import GROUP_STATE_INFIX, QueueOptions, QueueSpec, index_name
from dbqueue_django.executor import DjangoExecutor, dialect_for

#: The purpose part of the index's name: ``dbq_<hash of the table>_seq``, the name the core
#: gives the ring's ``seq`` index on SQLite.
PURPOSE = "seq"


class FillingIndex(models.Index):
    """An index on ``seq`` whose creation fills its table with rows and counters the core's
    statements make (:meth:`fill`), and whose removal empties the table and undoes them
    (:meth:`unfill`): what Django's migrations cannot say otherwise."""

    def copied(self, model: type[models.Model]) -> bool:
        """Whether ``model`` is SQLite's copy of the table (``new__<table>``), which gets the
        plain index: see :meth:`RingSlots.copied`."""
        raise NotImplementedError

    def fill(self, model: type[models.Model], schema_editor: BaseDatabaseSchemaEditor) -> list[str]:
        """The statements that fill ``model``'s new (or emptied) table."""
        raise NotImplementedError

    def unfill(
        self, model: type[models.Model], schema_editor: BaseDatabaseSchemaEditor
    ) -> list[str]:
        """The statements run after the table is emptied, when the index is removed."""
        raise NotImplementedError

    def create_sql(
        self,
        model: type[models.Model],
        schema_editor: BaseDatabaseSchemaEditor,
        using: str = "",
        **kwargs: Any,
    ) -> Statement:
        if self.copied(model):
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        statements = self.fill(model, schema_editor)
        return Statement("%(sql)s", sql=run_all_but_last(schema_editor, statements))

    def remove_sql(
        self, model: type[models.Model], schema_editor: BaseDatabaseSchemaEditor, **kwargs: Any
    ) -> str:
        connection = schema_editor.connection
        table = model._meta.db_table
        unfill = self.unfill(model, schema_editor)  # before anything runs: it may refuse
        statements = list(connection.ops.sql_flush(no_style(), [table], reset_sequences=False))
        statements += unfill
        with connection.cursor() as cursor:
            if self.name in connection.introspection.get_constraints(cursor, table):
                statements.append(str(super().remove_sql(model, schema_editor, **kwargs)))
        return run_all_but_last(schema_editor, statements)


class RingSlots(FillingIndex):
    """The slots, counters and storage settings of a ring table (see the module docstring)."""

    def __init__(self, *, capacity: int, name: str) -> None:
        super().__init__(fields=["seq"], name=name)
        self.capacity = capacity

    @classmethod
    def for_table(cls, table: str, capacity: int) -> RingSlots:
        """The index of the ring table ``table`` holding ``capacity`` slots."""
        return cls(capacity=capacity, name=index_name(table, PURPOSE))

    def deconstruct(self) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
        path, _, _ = super().deconstruct()
        return path, (), {"capacity": self.capacity, "name": self.name}

    def spec(self, model: type[models.Model]) -> QueueSpec:
        """The core spec of ``model``'s ring as far as its tables go (no payload needed)."""
        return QueueSpec(model._meta.db_table, (), QueueOptions(capacity=self.capacity))

    def group_specs(self, model: type[models.Model]) -> list[QueueSpec]:
        """The core spec of each consumer group of ``model``'s ring (a current or historical
        model): the groups whose state model's key is a one-to-one to its slots."""
        prefix = f"{model._meta.db_table}{GROUP_STATE_INFIX}"
        related = [r.related_model._meta.db_table for r in model._meta.related_objects]
        groups = tuple(t.removeprefix(prefix) for t in related if t.startswith(prefix))
        spec = QueueSpec(
            model._meta.db_table, (), QueueOptions(capacity=self.capacity, groups=groups)
        )
        return list(spec.group_specs)

    def copied(self, model: type[models.Model]) -> bool:
        # SQLite changes a table by creating "new__<table>", copying the rows and renaming it:
        # the slots come along with the rows and the counters are left alone, so only the
        # index on seq is built again, as Django builds its own indexes on the copy.
        return self.name != index_name(model._meta.db_table, PURPOSE)

    def fill(self, model: type[models.Model], schema_editor: BaseDatabaseSchemaEditor) -> list[str]:
        return fill_statements(schema_editor.connection, self.spec(model))

    def unfill(
        self, model: type[models.Model], schema_editor: BaseDatabaseSchemaEditor
    ) -> list[str]:
        connection = schema_editor.connection
        if not schema_editor.collect_sql:  # sqlmigrate only shows the SQL
            # A ring with consumer groups holds what its groups' rows say (the slots' own
            # states are the pushers'): each group must be empty.
            for spec in self.group_specs(model) or [self.spec(model)]:
                check_empty(connection, spec)
        # The counters stay: create_sql reads the next number from them, then replaces them.
        return ring_plain_statements(self.spec(model), dialect_for(connection))


class RingGroupRows(FillingIndex):
    """What a consumer group's state table of a ring needs besides its columns
    (:func:`dbqueue.schema.group_ring_fill_statements`): its storage parameters (PostgreSQL)
    or index on ``seq`` (SQLite, where it is this very index), the group's pop counter started
    at the ring's push counter, and a row per slot copied from the slot table, so the group
    receives what is pushed from then on. ``RingQueueModel`` adds it to each group's state
    model (``<Model>Ring_<group>``), so ``makemigrations`` writes it with the model: adding a
    group to a ring is a migration creating its models. Removing it (with the group, or for a
    capacity change, whose new slots it is then added for again) empties the table and drops
    the counter, and is refused (:class:`RingNotEmpty`) while the group holds messages; a
    migration that deletes the model without it (Django 5.2) leaves the counter
    to :func:`dbqueue_django.upkeep.restore_rings`."""

    def __init__(self, *, ring: str, group: str, capacity: int, name: str) -> None:
        super().__init__(fields=["seq"], name=name)
        self.ring, self.group, self.capacity = ring, group, capacity

    @classmethod
    def for_group(cls, ring: str, group: str, capacity: int) -> RingGroupRows:
        """The index of group ``group``'s state table of the ring table ``ring`` of
        ``capacity`` slots."""
        spec = cls.group_spec(ring, group, capacity)
        # Named after the state table, as the core names the group's index on seq.
        name = index_name(spec.state_table, PURPOSE)
        return cls(ring=ring, group=group, capacity=capacity, name=name)

    @staticmethod
    def group_spec(ring: str, group: str, capacity: int) -> QueueSpec:
        """The core spec of the group, as far as its tables go (no payload needed)."""
        options = QueueOptions(capacity=capacity, groups=(group,))
        return QueueSpec(ring, (), options).for_group(group)

    def deconstruct(self) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
        path, _, _ = super().deconstruct()
        kwargs = {"ring": self.ring, "group": self.group, "capacity": self.capacity}
        return path, (), {**kwargs, "name": self.name}

    @property
    def spec(self) -> QueueSpec:
        """The group's core spec (see :meth:`group_spec`)."""
        return self.group_spec(self.ring, self.group, self.capacity)

    def copied(self, model: type[models.Model]) -> bool:
        return model._meta.db_table != self.spec.state_table

    def fill(self, model: type[models.Model], schema_editor: BaseDatabaseSchemaEditor) -> list[str]:
        dialect = dialect_for(schema_editor.connection)
        # A counter already there is one a removed group left (Django 5.2 deletes the model
        # without this index, and the counter waits for restore_rings after migrate, so a
        # later migration of the same run that adds the group again finds it): the group's
        # new rows start at the push counter, and so does a new counter.
        return [
            *drop_group_counter_statements(self.spec, dialect),
            *group_ring_fill_statements(self.spec, dialect),
        ]

    def unfill(
        self, model: type[models.Model], schema_editor: BaseDatabaseSchemaEditor
    ) -> list[str]:
        connection = schema_editor.connection
        if not schema_editor.collect_sql:  # sqlmigrate only shows the SQL
            # The group's own messages live in these rows: a capacity change migrated back
            # removes them first (the operations run in reverse, the ring's own check last),
            # and so does the group's removal on Django 6. Neither may drop a message.
            check_empty(connection, self.spec)
        return drop_group_counter_statements(self.spec, dialect_for(connection))


def run_all_but_last(schema_editor: BaseDatabaseSchemaEditor, statements: list[str]) -> str:
    """Run every statement but the last through the schema editor, which runs (or defers) the
    last one it gets back: Django runs one statement per index, SQLite one per call, and
    ``sqlmigrate`` then lists all of them in order."""
    *first, last = statements
    for statement in first:
        schema_editor.execute(statement, params=None)
    return last


def fill_statements(connection: BaseDatabaseWrapper, spec: QueueSpec) -> list[str]:
    """The statements that give an empty ring table its slots and new counters (see
    :meth:`dbqueue.RingQueue.refill_statements`)."""
    ring = RingQueue(spec, dialect_for(connection))
    return ring.refill_statements(DjangoExecutor(connection.alias))


def check_empty(connection: BaseDatabaseWrapper, spec: QueueSpec) -> None:
    """Raise :class:`RingNotEmpty` unless the ring (or the consumer group ``spec`` is) holds
    no message."""
    group = "" if spec.group is None else f" --group {spec.group}"
    RingQueue(spec, dialect_for(connection)).check_empty(
        DjangoExecutor(connection.alias),
        worker=f"manage.py runqueueworker <app_label.Model>{group}",
        then="run migrate again (see the ring queue how-to)",
    )
