"""From a Django model to the core's QueueSpec: field kinds, options, defaults."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models

from dbqueue.backoff import Backoff
from dbqueue.errors import InvalidSpec
from dbqueue.spec import NO_DEFAULT, Field, FieldKind, QueueOptions, QueueSpec

if TYPE_CHECKING:
    from dbqueue_django.models import QueueModel

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
#: The columns every queue model has; they are not payload.
BASE_FIELDS = frozenset({"id", "enqueued_at", "last_error"})
OPTION_NAMES = frozenset(QueueOptions.__dataclass_fields__) - {"aware_datetimes"}


def payload_fields(model: type[QueueModel]) -> list[models.Field[Any, Any]]:
    """The model's own concrete fields, in column order."""
    return [f for f in model._meta.concrete_fields if f.name not in BASE_FIELDS]


def _kind(f: models.Field[Any, Any]) -> FieldKind:
    target = f.target_field if isinstance(f, models.ForeignKey) else f
    try:
        return KINDS[target.get_internal_type()]
    except KeyError:
        raise InvalidSpec(
            f"field {f.name!r} is a {type(f).__name__}, which a queue cannot store; supported: "
            f"{', '.join(sorted(KINDS))} and ForeignKey to them"
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


def options_of(model: type[QueueModel]) -> QueueOptions:
    """QueueOptions from the model's inner ``class QueueOptions`` (every attribute optional)."""
    declared = getattr(model, "QueueOptions", None)
    values = {k: v for k, v in vars(declared).items() if not k.startswith("_")} if declared else {}
    unknown = sorted(set(values) - OPTION_NAMES)
    if unknown:
        raise InvalidSpec(
            f"{model._meta.label}.QueueOptions: unknown option(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(OPTION_NAMES))}"
        )
    backoff = values.get("backoff")
    if backoff is not None and not isinstance(backoff, Backoff):
        raise InvalidSpec(f"{model._meta.label}.QueueOptions.backoff must be a dbqueue.Backoff")
    lease = values.get("lease", timedelta(seconds=60))
    if not isinstance(lease, timedelta):
        raise InvalidSpec(f"{model._meta.label}.QueueOptions.lease must be a timedelta")
    return QueueOptions(**values, aware_datetimes=bool(settings.USE_TZ))


def spec_for_model(model: type[QueueModel]) -> QueueSpec:
    """Build and validate the QueueSpec of a queue model (raises InvalidSpec)."""
    if model._meta.pk is None or model._meta.pk.name != "id":
        raise InvalidSpec(f"{model._meta.label}: a queue model keeps the inherited 'id' key")
    if model._meta.local_many_to_many:
        names = ", ".join(
            f"{f.name!r} ({type(f).__name__})" for f in model._meta.local_many_to_many
        )
        # The join table's foreign key would block the raw delete of an acknowledged item.
        raise InvalidSpec(
            f"{model._meta.label}: many-to-many field(s) {names} cannot be part of a queue "
            f"payload; store the ids in a JSONField instead"
        )
    fields = tuple(to_field(f) for f in payload_fields(model))
    try:
        return QueueSpec(model._meta.db_table, fields, options_of(model))
    except InvalidSpec as exc:
        raise InvalidSpec(f"{model._meta.label}: {exc}") from None
