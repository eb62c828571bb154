"""QueueSpec, Field and QueueOptions validation: the first line of defence for identifiers.

Every name that reaches SQL comes from a QueueSpec, so a bad name must be refused here, with a
message that names what was wrong. No database is needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from dbqueue.backoff import Backoff
from dbqueue.errors import InvalidSpec
from dbqueue.spec import (
    LONGEST_SUFFIX,
    MAX_IDENTIFIER_BYTES,
    MAX_TABLE_NAME,
    RESERVED_NAMES,
    Field,
    FieldKind,
    QueueOptions,
    QueueSpec,
    WhenFull,
    index_name,
    options_from,
)

TEXT = Field("body", FieldKind.TEXT)
SUFFIXES = ("_meta", "_push_seq", "_pop_seq", "_failed", "_stage")
ROOT = Path(__file__).resolve().parents[2]


# -- table names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["emails", "_private", "q1", "a", "order_events_2026", "x" * MAX_TABLE_NAME]
)
def test_good_table_names_are_accepted(name: str) -> None:
    spec = QueueSpec(name, (TEXT,))
    assert spec.table == name
    assert spec.meta_table == f"{name}_meta"


@pytest.mark.parametrize(
    "name",
    [
        "Emails",  # upper case
        "EMAILS",
        'emails"',  # a quote
        "em'ails",
        'x"; DROP TABLE users; --',
        "my queue",  # a space
        " emails",
        "emails\t",
        "1emails",  # leading digit
        "public.emails",  # schema-qualified
        "a.b",
        "emails-2",
        "émails",  # non-ASCII
        "",
    ],
)
def test_bad_table_names_are_refused_and_named(name: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        QueueSpec(name, (TEXT,))
    assert repr(name) in str(err.value)
    assert "queue table name" in str(err.value)


@pytest.mark.parametrize("name", ["emails\n", "emails\r\n"])
def test_a_trailing_newline_is_not_a_valid_table_name(name: str) -> None:
    # ``$`` in the allow-list pattern also matches just before a trailing newline, so the
    # pattern must be anchored with \Z (or used with fullmatch) to really be an allow-list.
    with pytest.raises(InvalidSpec, match="queue table name"):
        QueueSpec(name, (TEXT,))


@pytest.mark.parametrize("name", [None, 42, b"emails", ["emails"]])
def test_a_table_name_that_is_not_a_str_is_refused(name: object) -> None:
    with pytest.raises(InvalidSpec) as err:
        QueueSpec(name, (TEXT,))  # type: ignore[arg-type]
    assert repr(name) in str(err.value)


def test_table_name_length_boundary_leaves_room_for_every_suffix() -> None:
    assert max(len(s) for s in SUFFIXES) == LONGEST_SUFFIX == len("_push_seq")
    longest = "t" * MAX_TABLE_NAME
    QueueSpec(longest, (TEXT,))
    for suffix in SUFFIXES:
        assert len((longest + suffix).encode()) <= MAX_IDENTIFIER_BYTES
    too_long = "t" * (MAX_TABLE_NAME + 1)
    assert len((too_long + "_push_seq").encode()) == MAX_IDENTIFIER_BYTES + 1
    with pytest.raises(InvalidSpec) as err:
        QueueSpec(too_long, (TEXT,))
    message = str(err.value)
    assert repr(too_long) in message
    assert f"{MAX_TABLE_NAME + 1} bytes" in message and f"at most {MAX_TABLE_NAME}" in message


# -- field names and declarations ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["Body", "to address", "1st", "a.b", 'x"', "", "naïve"])
def test_bad_field_names_are_refused_and_named(name: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        QueueSpec("emails", (Field(name, FieldKind.TEXT),))
    assert repr(name) in str(err.value)
    assert "'emails'" in str(err.value)  # the queue it belongs to


def test_a_field_name_that_is_not_a_str_is_refused() -> None:
    with pytest.raises(InvalidSpec, match="7"):
        QueueSpec("emails", (Field(7, FieldKind.TEXT),))  # type: ignore[arg-type]


def test_field_name_length_limit() -> None:
    QueueSpec("emails", (Field("f" * MAX_IDENTIFIER_BYTES, FieldKind.TEXT),))
    with pytest.raises(InvalidSpec, match="f" * (MAX_IDENTIFIER_BYTES + 1)):
        QueueSpec("emails", (Field("f" * (MAX_IDENTIFIER_BYTES + 1), FieldKind.TEXT),))


@pytest.mark.parametrize("name", sorted(RESERVED_NAMES))
def test_every_reserved_name_is_refused_as_a_field(name: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        QueueSpec("emails", (TEXT, Field(name, FieldKind.INTEGER)))
    message = str(err.value)
    assert f"field {name!r}" in message and "reserved" in message and "'emails'" in message


def test_the_layouts_own_columns_are_all_reserved() -> None:
    for column in ("id", "state", "priority", "run_at", "attempts", "lease_until",
                   "enqueued_at", "last_error", "slot", "seq", "pushed_at"):  # fmt: skip
        assert column in RESERVED_NAMES


def test_a_duplicate_field_is_refused_and_named() -> None:
    with pytest.raises(InvalidSpec) as err:
        QueueSpec("emails", (TEXT, Field("to", FieldKind.TEXT), Field("to", FieldKind.INTEGER)))
    assert "'to'" in str(err.value) and "twice" in str(err.value)


@pytest.mark.parametrize(
    "kind", [k for k in FieldKind if k is not FieldKind.TEXT], ids=lambda k: k.value
)
def test_max_length_on_a_non_text_field_is_refused(kind: FieldKind) -> None:
    with pytest.raises(InvalidSpec) as err:
        QueueSpec("emails", (Field("size", kind, max_length=10),))
    assert "'size'" in str(err.value) and "max_length" in str(err.value)


@pytest.mark.parametrize("max_length", [0, -5])
def test_a_non_positive_max_length_is_refused(max_length: int) -> None:
    with pytest.raises(InvalidSpec, match="'to'"):
        QueueSpec("emails", (Field("to", FieldKind.TEXT, max_length=max_length),))


def test_a_spec_with_every_kind_and_no_fields_is_valid() -> None:
    fields = tuple(Field(f"f_{k.value}", k) for k in FieldKind)
    spec = QueueSpec("every_kind", fields)
    assert spec.field_names == tuple(f"f_{k.value}" for k in FieldKind)
    assert QueueSpec("empty", ()).field_names == ()


# -- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 32768, 40000])
def test_max_attempts_out_of_range_is_refused(value: int) -> None:
    with pytest.raises(InvalidSpec) as err:
        QueueOptions(max_attempts=value)
    assert "max_attempts" in str(err.value) and str(value) in str(err.value)


def test_max_attempts_boundaries_are_accepted() -> None:
    assert QueueOptions(max_attempts=1).max_attempts == 1
    assert QueueOptions(max_attempts=32767).max_attempts == 32767


@pytest.mark.parametrize("value", ["5", 2.5, True], ids=["str", "float", "bool"])
def test_max_attempts_must_be_an_int(value: object) -> None:
    # max_attempts is compared with a smallint column; "5" raises TypeError on comparison and
    # 2.5 or True pass the range check unless the type is checked.
    with pytest.raises(InvalidSpec, match="max_attempts"):
        QueueOptions(max_attempts=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "lease",
    [60, 60.0, "60s", None, timedelta(0), timedelta(seconds=-1)],
    ids=["int", "float", "str", "none", "zero", "negative"],
)
def test_lease_must_be_a_positive_timedelta(lease: object) -> None:
    with pytest.raises(InvalidSpec) as err:
        QueueOptions(lease=lease)  # type: ignore[arg-type]
    assert "lease" in str(err.value) and repr(lease) in str(err.value)


@pytest.mark.parametrize("name", ["max_payload_bytes", "push_many_batch", "rescue_batch"])
@pytest.mark.parametrize("value", [0, -1, True, 1.5, "10"])
def test_sizes_must_be_positive_ints(name: str, value: object) -> None:
    with pytest.raises(InvalidSpec) as err:
        QueueOptions(**{name: value})  # type: ignore[arg-type]
    assert name in str(err.value) and repr(value) in str(err.value)


def test_backoff_option_must_be_a_backoff() -> None:
    # Otherwise the first fail() raises AttributeError, long after the declaration.
    with pytest.raises(InvalidSpec, match="backoff"):
        QueueOptions(backoff=timedelta(seconds=5))  # type: ignore[arg-type]


def test_default_options_are_valid() -> None:
    options = QueueOptions()
    assert options.max_attempts >= 1 and options.lease > timedelta(0)
    assert isinstance(options.backoff, Backoff)
    assert options.aware_datetimes is True
    assert options.keep_done is False
    assert options.durable_acks is False


def test_the_default_lease_brings_a_dead_workers_items_back_within_15_s() -> None:
    """A lease plus a third of one (the rescue of a busy fleet) stays under 15 s; see
    bench/reports/2026-11-27-lease.md for the recovery measured."""
    assert QueueOptions().lease == timedelta(seconds=10)


@pytest.mark.parametrize("name", ["keep_done", "durable_acks"])
@pytest.mark.parametrize("value", [1, 0, "yes", None], ids=["one", "zero", "str", "none"])
def test_flags_must_be_bools(name: str, value: object) -> None:
    # 1 or "yes" would select statements by truthiness; say so at declaration.
    with pytest.raises(InvalidSpec) as err:
        QueueOptions(**{name: value})  # type: ignore[arg-type]
    assert f"{name} must be True or False" in str(err.value) and repr(value) in str(err.value)


def test_keep_done_is_refused_on_a_ring() -> None:
    with pytest.raises(InvalidSpec, match="keep_done is an option of split queues only"):
        QueueOptions(capacity=8, keep_done=True)
    assert QueueOptions(capacity=8, keep_done=False).capacity == 8


def _declared(values: dict[str, object], *, ring: bool) -> QueueOptions:
    return options_from(
        values, label="app.Model.QueueOptions", ring=ring, aware_datetimes=True, ring_hint="hint"
    )


def test_a_declaration_sets_keep_done_on_a_split_queue() -> None:
    assert _declared({"keep_done": True}, ring=False).keep_done is True
    with pytest.raises(InvalidSpec, match=r"^app\.Model\.QueueOptions: keep_done must be"):
        _declared({"keep_done": "true"}, ring=False)


@pytest.mark.parametrize("value", [True, False])
def test_a_ring_declaration_refuses_keep_done_naming_it(value: bool) -> None:
    with pytest.raises(InvalidSpec) as err:
        _declared({"capacity": 8, "keep_done": value}, ring=True)
    message = str(err.value)
    assert message.startswith("app.Model.QueueOptions: keep_done is an option of split queues")
    assert "reuses its slots" in message


# -- derived names and keys ---------------------------------------------------------------------


@pytest.mark.parametrize("table", ["a", "emails", "x" * MAX_TABLE_NAME])
@pytest.mark.parametrize("purpose", ["ready", "leased"])
def test_index_names_are_short_and_deterministic(table: str, purpose: str) -> None:
    spec = QueueSpec(table, (TEXT,))
    name = spec.index_name(purpose)
    assert len(name) <= 30  # Django's limit for index names
    assert name == index_name(table, purpose) == QueueSpec(table, ()).index_name(purpose)
    assert name.endswith(f"_{purpose}")
    QueueSpec("ok", (Field(name, FieldKind.TEXT),))  # itself a valid identifier


def test_index_names_differ_between_tables_and_purposes() -> None:
    names = {index_name(t, p) for t in ("emails", "emails2", "sms") for p in ("ready", "leased")}
    assert len(names) == 6


def test_lock_key_is_a_signed_64_bit_int_and_differs_per_table() -> None:
    keys = {QueueSpec(f"q{i}", ()).lock_key for i in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert isinstance(key, int) and -(2**63) <= key < 2**63
    assert any(k < 0 for k in keys)  # signed: both halves of the range are used
    assert QueueSpec("emails", (TEXT,)).lock_key == QueueSpec("emails", ()).lock_key


def test_lock_key_is_stable_across_processes() -> None:
    # Not Python's hash(): another process (another hash seed) must compute the same key, or
    # two rescuers would not exclude each other.
    code = "from dbqueue.spec import QueueSpec; print(QueueSpec('emails', ()).lock_key)"
    keys = set()
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        keys.add(int(out.stdout))
    assert keys == {QueueSpec("emails", ()).lock_key}


def test_when_full_takes_a_mode_by_name_or_member() -> None:
    assert QueueOptions(capacity=4, when_full="raise").when_full_mode is WhenFull.RAISE
    assert QueueOptions(capacity=4, when_full=WhenFull.WAIT).when_full_mode is WhenFull.WAIT
    # Not declared: spill, unless push_timeout is (what such a ring did before when_full).
    assert QueueOptions(capacity=4).when_full_mode is WhenFull.SPILL
    assert QueueOptions(push_timeout=timedelta(seconds=1)).when_full_mode is WhenFull.WAIT
    # Not declared stays not declared: options made from others may declare push_timeout.
    waiting = replace(QueueOptions(capacity=4), push_timeout=timedelta(seconds=1))
    assert (waiting.when_full, waiting.when_full_mode) == (None, WhenFull.WAIT)


@pytest.mark.parametrize("bad", ["block", "SPILL", 1, b"spill"])
def test_when_full_names_the_allowed_values(bad: object) -> None:
    with pytest.raises(InvalidSpec, match="when_full must be one of 'spill', 'raise', 'wait'"):
        QueueOptions(capacity=4, when_full=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["spill", "raise"])
def test_push_timeout_is_refused_with_a_mode_that_never_waits(mode: str) -> None:
    with pytest.raises(InvalidSpec, match=f"push_timeout applies to when_full='wait' only.*{mode}"):
        QueueOptions(capacity=4, when_full=mode, push_timeout=timedelta(seconds=1))  # type: ignore[arg-type]


def test_when_full_is_a_ring_option() -> None:
    with pytest.raises(InvalidSpec, match="when_full is an option of ring queues only"):
        options_from({"when_full": "raise"}, label="Q", ring=False, aware_datetimes=True,
                     ring_hint="declare a ring")  # fmt: skip
    ring = options_from({"capacity": 8, "when_full": "raise"}, label="Q", ring=True,
                        aware_datetimes=True, ring_hint="")  # fmt: skip
    assert ring.when_full_mode is WhenFull.RAISE
    with pytest.raises(InvalidSpec, match=r"^Q: when_full must be one of"):
        options_from({"capacity": 8, "when_full": "nope"}, label="Q", ring=True,
                     aware_datetimes=True, ring_hint="")  # fmt: skip
