"""From a Django model to the core's QueueSpec: field kinds, options, defaults.

A split queue (``QueueModel``) takes its payload from the model's own fields; a ring queue
(``RingQueueModel``) from its generated failed model's, which keep the nullability declared
(the slot table's payload columns are all nullable: an empty slot holds no message).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from dbqueue.errors import InvalidSpec
from dbqueue.schema import SPLIT_BASE_COLUMNS
from dbqueue.spec import NO_DEFAULT, Field, FieldKind, QueueOptions, QueueSpec, options_from
from dbqueue.unique import UNIQUE_KEY_COLUMN, UniqueScope
from dbqueue.unique import unique_columns as core_unique_columns

#: Django's internal field types and the kinds they store.
KINDS: dict[str, FieldKind] = {
    "SmallIntegerField": FieldKind.SMALLINT,
    "PositiveSmallIntegerField": FieldKind.SMALLINT,
    "IntegerField": FieldKind.INTEGER,
    "PositiveIntegerField": FieldKind.INTEGER,
    "BigIntegerField": FieldKind.BIGINT,
    "PositiveBigIntegerField": FieldKind.BIGINT,
    "FloatField": FieldKind.FLOAT,
    "DecimalField": FieldKind.DECIMAL,
    "CharField": FieldKind.TEXT,
    "SlugField": FieldKind.TEXT,
    "TextField": FieldKind.TEXT,
    "GenericIPAddressField": FieldKind.TEXT,
    "BooleanField": FieldKind.BOOLEAN,
    "DateTimeField": FieldKind.DATETIME,
    "DateField": FieldKind.DATE,
    "JSONField": FieldKind.JSON,
    "BinaryField": FieldKind.BYTES,
    "UUIDField": FieldKind.UUID,
}
#: What a ForeignKey stores when its target is an auto-incremented key (most models' id): the
#: integer of the key, whose internal type is none of KINDS.
AUTO_KINDS: dict[str, FieldKind] = {
    "SmallAutoField": FieldKind.SMALLINT,
    "AutoField": FieldKind.INTEGER,
    "BigAutoField": FieldKind.BIGINT,
}
#: The columns every split queue model has; they are not payload.
BASE_FIELDS = SPLIT_BASE_COLUMNS


def payload_fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    """The model's own concrete fields, in column order: every field but the columns its kind
    of queue table has anyway (``queue_base_fields``)."""
    base = getattr(model, "queue_base_fields", BASE_FIELDS)
    return [f for f in model._meta.concrete_fields if f.name not in base]


def is_ring(model: type[models.Model]) -> bool:
    """True for a ring queue model (``RingQueueModel``), False for a split one."""
    return getattr(model, "queue_layout", "split") == "ring"


def _kind(f: models.Field[Any, Any]) -> FieldKind:
    target = f.target_field if isinstance(f, models.ForeignKey) else f
    kinds = {**KINDS, **AUTO_KINDS} if target is not f else KINDS
    try:
        return kinds[target.get_internal_type()]
    except KeyError:
        raise InvalidSpec(
            f"field {f.name!r} is a {type(f).__name__}, which a queue cannot store; supported: "
            f"{', '.join(sorted(KINDS))} and ForeignKey to them or to an auto-incremented key"
        ) from None


def to_field(f: models.Field[Any, Any]) -> Field:
    """The core description of one Django field."""
    kind = _kind(f)
    target = f.target_field if isinstance(f, models.ForeignKey) else f
    internal = target.get_internal_type()
    return Field(
        name=str(f.column),
        kind=kind,
        nullable=f.null,
        max_length=(target.max_length or (39 if internal == "GenericIPAddressField" else None))
        if kind is FieldKind.TEXT and internal != "TextField"
        else None,
        max_digits=getattr(target, "max_digits", None) if kind is FieldKind.DECIMAL else None,
        decimal_places=getattr(target, "decimal_places", None)
        if kind is FieldKind.DECIMAL
        else None,
        default=f.default if f.has_default() else NO_DEFAULT,
        min_value=0 if internal.startswith("Positive") else None,
    )


def options_of(model: type[models.Model]) -> QueueOptions:
    """QueueOptions from the model's inner ``class QueueOptions``: every attribute optional,
    except ``capacity`` for a ring queue; the ring's options are refused on a split queue.
    ``unique`` names model fields (a ForeignKey by its name or attname), given to the core as
    their columns."""
    declared = getattr(model, "QueueOptions", None)
    values = {k: v for k, v in vars(declared).items() if not k.startswith("_")} if declared else {}
    if "unique" in values and not is_ring(model):  # a ring's options_from refuses it
        values["unique"] = unique_columns(model, values["unique"])
    return options_from(
        values,
        label=f"{model._meta.label}.QueueOptions",
        ring=is_ring(model),
        aware_datetimes=bool(settings.USE_TZ),
        ring_hint="subclass dbqueue_django.models.RingQueueModel for a bounded ring of "
        "preallocated slots, or remove it from this QueueModel",
    )


def unique_columns(model: type[models.Model], declared: Any) -> Any:
    """The columns of the payload fields ``QueueOptions.unique`` names, by name or attname
    (``order`` or ``order_id`` -> ``order_id``); InvalidSpec naming the model for a name that
    is not one."""
    columns: dict[str, str] = {}
    for f in payload_fields(model):
        columns[f.name] = columns[str(f.attname)] = str(f.column)
    return core_unique_columns(declared, columns, f"{model._meta.label}.QueueOptions")


def valid_options_of(model: type[models.Model]) -> QueueOptions | None:
    """A split queue model's options, or None when they are invalid (the system check reports
    them; the model and its meta model(s) must still be created)."""
    try:
        return options_of(model)
    except InvalidSpec:
        return None


def unique_scope_of(model: type[models.Model]) -> UniqueScope | None:
    """The scope of a split queue model's unique keys, or None when it has none or its options
    are invalid (see :func:`valid_options_of`)."""
    options = valid_options_of(model)
    return options.unique_scope_mode if options is not None and options.is_unique else None


def groups_of(model: type[models.Model]) -> tuple[str, ...]:
    """The consumer groups a queue model declares (``QueueOptions.groups``), none when
    its options are invalid (see :func:`valid_options_of`)."""
    options = valid_options_of(model)
    return options.groups if options is not None else ()


def meta_relation(group: str | None = None) -> str:
    """The name of the data model's reverse one-to-one to its meta model: ``queue_meta``, or
    for a consumer group's meta model ``queue_meta_<group>``."""
    return "queue_meta" if group is None else f"queue_meta_{group}"


def has_unique_keys(model: type[models.Model]) -> bool:
    """Whether a split queue model's meta model has the ``unique_key`` column (it is made
    with one for a valid unique declaration, see :func:`unique_scope_of`)."""
    meta: Any = getattr(model, "queue_meta_model", None)
    return meta is not None and any(f.name == UNIQUE_KEY_COLUMN for f in meta._meta.fields)


def spec_for_model(model: type[models.Model]) -> QueueSpec:
    """Build and validate the QueueSpec of a queue model (raises InvalidSpec)."""
    key = "slot" if is_ring(model) else "id"
    if model._meta.pk is None or model._meta.pk.name != key:
        raise InvalidSpec(f"{model._meta.label}: a queue model keeps the inherited {key!r} key")
    if model._meta.local_many_to_many:
        names = ", ".join(
            f"{f.name!r} ({type(f).__name__})" for f in model._meta.local_many_to_many
        )
        # The join table's foreign key would block the raw delete of an acknowledged item.
        raise InvalidSpec(
            f"{model._meta.label}: many-to-many field(s) {names} cannot be part of a queue "
            f"payload; store the ids in a JSONField instead"
        )
    if is_ring(model):
        check_ring_payload(model)
        # The failed model's copies keep the declared nullability (see the module docstring).
        source: type[models.Model] = model.failed_model  # type: ignore[attr-defined]
    else:
        source = model
    fields = tuple(to_field(f) for f in payload_fields(source))
    options = options_of(model)  # its errors name the model already
    try:
        return QueueSpec(model._meta.db_table, fields, options)
    except InvalidSpec as exc:
        raise InvalidSpec(f"{model._meta.label}: {exc}") from None


def check_ring_payload(model: type[models.Model]) -> None:
    """Refuse payload fields a ring table cannot hold: a slot is rewritten in place for every
    message, so it has no relations, unique values or indexes of its own."""
    label = model._meta.label
    failed_base: frozenset[str] = model.failed_model.queue_base_fields  # type: ignore[attr-defined]
    for f in payload_fields(model):
        if f.is_relation:
            raise InvalidSpec(
                f"{label}: field {f.name!r} is a {type(f).__name__}; a ring queue's payload "
                f"cannot hold a relation (a cascading delete would remove a slot, and a slot "
                f"keeps stale values after its message is gone): store the key in an "
                f"IntegerField or BigIntegerField"
            )
        if f.unique or getattr(f, "db_index", False):
            option = "unique=True" if f.unique else "db_index=True"
            raise InvalidSpec(
                f"{label}: field {f.name!r} has {option}; a ring slot is rewritten in place "
                f"for every message, so its payload columns take no unique constraint or index "
                f"(an index would also stop PostgreSQL's HOT updates): remove {option}"
            )
        if f.name in failed_base:
            raise InvalidSpec(
                f"{label}: field {f.name!r} uses a name the failed table needs "
                f"({', '.join(sorted(failed_base))})"
            )
