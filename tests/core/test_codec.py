"""The codec: what each field kind accepts, what it refuses (naming queue and field), the size
limit, and the storage format on SQLite (the one Django and SQLAlchemy also read).

Validation is dialect-independent, so every check runs against both dialects' codecs.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any

import pytest

from dbqueue.codec import Codec, json_size_at_least
from dbqueue.dialects import PostgreSQL, SQLite
from dbqueue.errors import InvalidPayload, PayloadTooLarge
from dbqueue.spec import Field, FieldKind, QueueOptions, QueueSpec

UTC = dt.UTC
PLUS2 = dt.timezone(dt.timedelta(hours=2))
K = FieldKind

FIELDS = (
    Field("f_small", K.SMALLINT, nullable=True),
    Field("f_int", K.INTEGER, nullable=True),
    Field("f_big", K.BIGINT, nullable=True),
    Field("f_pos", K.SMALLINT, nullable=True, min_value=0),
    Field("f_float", K.FLOAT, nullable=True),
    Field("f_dec", K.DECIMAL, nullable=True, max_digits=8, decimal_places=2),
    Field("f_text", K.TEXT, nullable=True, max_length=10),
    Field("f_longtext", K.TEXT, nullable=True),
    Field("f_bool", K.BOOLEAN, nullable=True),
    Field("f_dt", K.DATETIME, nullable=True),
    Field("f_date", K.DATE, nullable=True),
    Field("f_json", K.JSON, nullable=True),
    Field("f_bytes", K.BYTES, nullable=True),
    Field("f_uuid", K.UUID, nullable=True),
    Field("f_required", K.TEXT),
)
NAMES = [f.name for f in FIELDS]
SPEC = QueueSpec("codec_q", FIELDS)
NAIVE_SPEC = QueueSpec("codec_naive", FIELDS, QueueOptions(aware_datetimes=False))


@pytest.fixture(params=[PostgreSQL(), SQLite()], ids=["postgresql", "sqlite"])
def codec(request: pytest.FixtureRequest) -> Codec:
    return Codec(SPEC, request.param)


def encode_one(codec: Codec, name: str, value: Any) -> Any:
    return codec.encode({"f_required": "r", name: value})[NAMES.index(name)]


def refused(codec: Codec, name: str, value: Any, *why: str) -> str:
    with pytest.raises(InvalidPayload) as err:
        codec.encode({"f_required": "r", name: value})
    message = str(err.value)
    assert f"queue {codec.spec.table!r}" in message, message
    assert f"field {name!r}" in message, message
    for fragment in why:
        assert fragment in message, message
    return message


# -- accepted values ----------------------------------------------------------------------------

BOUNDS = {"f_small": (-(2**15), 2**15 - 1), "f_int": (-(2**31), 2**31 - 1),
          "f_big": (-(2**63), 2**63 - 1), "f_pos": (0, 2**15 - 1)}  # fmt: skip
NOW = dt.datetime(2026, 1, 1, tzinfo=UTC)
U = uuid.UUID("12345678-1234-5678-1234-567812345678")
ACCEPTED = [
    *[(n, v, v) for n, (low, high) in BOUNDS.items() for v in (low, 0, high)],
    ("f_float", 3, 3.0), ("f_float", 2.5, 2.5),
    ("f_dec", Decimal("123456.78"), Decimal("123456.78")), ("f_dec", 5, Decimal("5.00")),
    ("f_dec", "12.5", Decimal("12.50")), ("f_dec", 0.25, Decimal("0.25")),
    ("f_dec", Decimal("1.234"), Decimal("1.23")),  # rounded to its places
    ("f_text", "x" * 10, "x" * 10), ("f_text", "é" * 10, "é" * 10), ("f_text", "", ""),
    ("f_bytes", b"\x00\xff", b"\x00\xff"), ("f_bytes", bytearray(b"ab"), b"ab"),
    ("f_bytes", memoryview(b"cd"), b"cd"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "expected"), ACCEPTED)
def test_accepted_values(codec: Codec, name: str, value: Any, expected: Any) -> None:
    got = encode_one(codec, name, value)
    if name == "f_dec" and isinstance(got, str):
        got = Decimal(got)  # SQLite binds decimals as text
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("value", [U, str(U), U.hex, str(U).upper(), "{" + str(U) + "}"])
def test_uuid_from_uuid_and_str(value: Any) -> None:
    assert encode_one(Codec(SPEC, PostgreSQL()), "f_uuid", value) == U
    assert encode_one(Codec(SPEC, SQLite()), "f_uuid", value) == U.hex


@pytest.mark.parametrize(
    "value", [{"a": [1, 2.5, None, "x"]}, [], "s", 3, True, {"nested": {"deep": ["ü", "✓"]}}]
)
def test_json_accepts_json_values_as_text(codec: Codec, value: Any) -> None:
    text = encode_one(codec, "f_json", value)
    assert isinstance(text, str) and json.loads(text) == value


def test_json_accepts_a_literal_backslash_u0000(codec: Codec) -> None:
    # The six characters \u0000 in a string (a Windows path, a regex) are not a NUL: they
    # encode as "\\u0000" and every JSON column stores them. Only a real NUL is refused.
    value = {"path": "C:\\u0000\\file"}
    assert json.loads(encode_one(codec, "f_json", value)) == value


# -- refused values: each names the queue and the field -----------------------------------------

REFUSED = [
    *[(n, v, "out of range") for n, (lo, hi) in BOUNDS.items() for v in (lo - 1, hi + 1)],
    ("f_pos", -1, "0..32767"),
    *[(n, b, "bool") for n in BOUNDS for b in (True, False)],
    *[("f_int", v, "expects an integer") for v in (1.0, 1.5, "1", Decimal(1), int)],
    *[("f_float", v, "expects a float") for v in ("2.5", True, Decimal("2.5"))],
    *[("f_dec", v, "digits") for v in (Decimal("1234567.89"), 1234567)],
    ("f_dec", Decimal("1e30"), ""),
    *[("f_dec", v, "finite") for v in (Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity"),
                                       float("inf"), float("nan"), Decimal("sNaN"))],
    *[("f_dec", v, "Decimal") for v in ("abc", True, [1], b"1")],
    ("f_text", "x" * 11, "11 characters, max 10"),
    ("f_text", "a\x00b", "NUL"), ("f_longtext", "a\x00b", "NUL"),
    *[("f_longtext", v, "expects a str") for v in (5, b"bytes", int, ["a"])],
    *[("f_bool", v, "expects a bool") for v in (0, 1, "true", int)],
    *[("f_json", v, "not JSON-encodable") for v in (object(), {"a": {1, 2}}, {"at": NOW}, b"x")],
    *[("f_json", v, "not JSON-encodable")
      for v in (float("nan"), {"x": float("inf")}, [float("-inf")])],
    *[("f_json", v, "NUL") for v in ("a\x00b", {"k": "\x00"}, {"\x00": 1})],
    ("f_dt", dt.datetime(2026, 1, 1, 12, 0), "naive"),
    ("f_dt", dt.date(2026, 1, 1), "expects a datetime"),
    ("f_dt", "2026-01-01T00:00:00+00:00", "expects a datetime"),
    ("f_date", NOW, "expects a date"), ("f_date", "2026-01-01", "expects a date"),
    *[("f_bytes", v, "expects bytes") for v in ("text", [1, 2], 5)],
    *[("f_uuid", v, "expects a UUID") for v in ("not-a-uuid", "1234", "", 12345, "g" * 32)],
    ("f_required", None, "not nullable"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "fragment"), REFUSED)
def test_refused_values(codec: Codec, name: str, value: Any, fragment: str) -> None:
    refused(codec, name, value, fragment)


@pytest.mark.parametrize("name", ["f_text", "f_longtext", "f_json"])
def test_a_lone_surrogate_is_refused(codec: Codec, name: str) -> None:
    # "\ud800" is a str, but has no UTF-8 form: the driver would fail with UnicodeEncodeError
    # (and PostgreSQL's jsonb rejects the escaped form) instead of a named InvalidPayload.
    refused(codec, name, "a\ud800b")


def test_the_error_shortens_a_huge_value(codec: Codec) -> None:
    assert len(refused(codec, "f_text", "y" * 100_000)) < 300


# -- datetimes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", [PostgreSQL(), SQLite()], ids=["postgresql", "sqlite"])
def test_naive_datetime_required_when_time_zones_are_off(dialect: Any) -> None:
    codec = Codec(NAIVE_SPEC, dialect)
    with pytest.raises(InvalidPayload, match=r"'f_dt'.*aware") as err:
        codec.encode({"f_required": "r", "f_dt": NOW})
    assert "'codec_naive'" in str(err.value)
    assert codec.encode({"f_required": "r", "f_dt": dt.datetime(2026, 1, 1)})[9] is not None


@pytest.mark.parametrize(
    "value",
    [dt.datetime.min.replace(tzinfo=PLUS2),
     dt.datetime.max.replace(tzinfo=dt.timezone(-dt.timedelta(hours=2)))],
    ids=["min+02", "max-02"],
)  # fmt: skip
def test_sqlite_datetimes_that_leave_the_range_in_utc(value: dt.datetime) -> None:
    # Converted to UTC for storage, these fall outside datetime's range: the codec must say so
    # as InvalidPayload, not let OverflowError escape from the encoder.
    with pytest.raises(InvalidPayload, match="'f_dt'"):
        Codec(SPEC, SQLite()).encode({"f_required": "r", "f_dt": value})


# -- field names, None --------------------------------------------------------------------------


def test_missing_required_field(codec: Codec) -> None:
    with pytest.raises(InvalidPayload) as err:
        codec.encode({"f_int": 1})
    message = str(err.value)
    assert "'codec_q'" in message and "missing field(s) 'f_required'" in message
    assert ", ".join(NAMES) in message


def test_unknown_field_lists_the_queues_fields(codec: Codec) -> None:
    with pytest.raises(InvalidPayload) as err:
        codec.encode({"f_required": "r", "bogus": 1, "id": 5})
    message = str(err.value)
    assert "'codec_q'" in message and "unknown field(s) 'bogus', 'id'" in message
    assert "its fields are " + ", ".join(NAMES) in message


def test_none_for_a_non_nullable_field(codec: Codec) -> None:
    refused(codec, "f_required", None, "not nullable")


def test_none_for_nullable_fields_and_omitted_nullables(codec: Codec) -> None:
    values = codec.encode({"f_required": "r", **dict.fromkeys(NAMES[:-1])})
    assert values == [None] * (len(NAMES) - 1) + ["r"]
    assert codec.encode({"f_required": "r"}) == values


def test_a_field_with_a_default_may_be_left_out() -> None:
    # Field.default is used when a push leaves the field out; a callable is called each time.
    counter = iter(range(100))
    spec = QueueSpec(
        "defaults",
        (Field("n", K.INTEGER, default=7), Field("c", K.INTEGER, default=lambda: next(counter)),
         Field("s", K.TEXT)),
    )  # fmt: skip
    for dialect in (PostgreSQL(), SQLite()):
        assert Codec(spec, dialect).encode({"s": "x"})[::2] == [7, "x"]
    assert Codec(spec, PostgreSQL()).encode({"s": "y"})[1] == 2


# -- size ---------------------------------------------------------------------------------------


def _sized(limit: int) -> Codec:
    spec = QueueSpec("sized", (Field("body", K.TEXT),), QueueOptions(max_payload_bytes=limit))
    return Codec(spec, PostgreSQL())


def test_payload_exactly_at_the_limit_passes() -> None:
    assert _sized(100).encode({"body": "x" * 100}) == ["x" * 100]


def test_payload_over_the_limit_is_too_large() -> None:
    with pytest.raises(PayloadTooLarge) as err:
        _sized(100).encode({"body": "x" * 101})
    message = str(err.value)
    assert "'sized'" in message and "max_payload_bytes=100" in message and "101" in message
    assert isinstance(err.value, InvalidPayload)


def test_the_limit_counts_every_field(codec: Codec) -> None:
    small = Codec(QueueSpec("sized2", FIELDS, QueueOptions(max_payload_bytes=300)), SQLite())
    small.encode({"f_required": "x" * 150, "f_json": ["y" * 100]})
    with pytest.raises(PayloadTooLarge):
        small.encode({"f_required": "x" * 150, "f_json": ["y" * 100], "f_bytes": b"z" * 100})


def test_json_far_over_the_limit_is_refused_before_it_is_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """100 MB of JSON (the same 1 MB string a hundred times) is never serialized to find out
    that it is too large."""
    spec = QueueSpec("big", (Field("doc", K.JSON),), QueueOptions(max_payload_bytes=1000))
    codec = Codec(spec, PostgreSQL())

    def never(*args: object, **kwargs: object) -> str:
        raise AssertionError("json.dumps ran on a payload known to be too large")

    monkeypatch.setattr("dbqueue.codec.json.dumps", never)
    with pytest.raises(PayloadTooLarge, match="more than 1000 bytes in field 'doc'"):
        codec.encode({"doc": {"chunks": ["x" * 1_000_000] * 100}})
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert json_size_at_least(cyclic, 1000) < 1000  # a cycle is json.dumps's to name


def test_the_limit_counts_bytes_not_characters() -> None:
    # max_payload_bytes: 100 three-byte characters are 300 bytes of UTF-8 on the wire and on disk.
    with pytest.raises(PayloadTooLarge):
        _sized(100).encode({"body": "€" * 100})


# -- storage format on SQLite -------------------------------------------------------------------


def test_sqlite_encoding() -> None:
    codec = Codec(SPEC, SQLite())
    u = uuid.uuid4()
    values = codec.encode({
        "f_required": "r",
        "f_dt": dt.datetime(2026, 3, 1, 14, 30, 15, 250, tzinfo=PLUS2),
        "f_date": dt.date(2026, 3, 1),
        "f_uuid": u,
        "f_dec": Decimal("12.5"),
        "f_bool": True,
        "f_json": {"a": 1},
    })  # fmt: skip
    got = dict(zip(NAMES, values, strict=True))
    assert got["f_dt"] == "2026-03-01 12:30:15.000250"  # converted to UTC
    assert got["f_date"] == "2026-03-01"
    assert got["f_uuid"] == u.hex and len(got["f_uuid"]) == 32
    assert got["f_dec"] == "12.50"
    assert got["f_bool"] == 1 and type(got["f_bool"]) is int
    assert got["f_json"] == '{"a":1}'
    assert Codec(SPEC, SQLite()).encode({"f_required": "r", "f_bool": False})[8] == 0


def test_sqlite_encodes_naive_datetimes_unchanged_when_time_zones_are_off() -> None:
    codec = Codec(NAIVE_SPEC, SQLite())
    values = codec.encode({"f_required": "r", "f_dt": dt.datetime(2026, 3, 1, 14, 30)})
    assert values[9] == "2026-03-01 14:30:00.000000"


def _row(**values: Any) -> list[Any]:
    return [values.get(n) for n in NAMES]


def test_sqlite_decoding_from_stored_text() -> None:
    codec = Codec(SPEC, SQLite())
    u = uuid.uuid4()
    got = codec.decode(_row(
        f_required="r", f_dt="2026-03-01 12:30:15.000250", f_date="2026-03-01", f_uuid=u.hex,
        f_dec="12.50", f_bool=1, f_json='{"a":[1,null]}', f_int=7, f_bytes=b"\x00",
    ))  # fmt: skip
    assert got["f_dt"] == dt.datetime(2026, 3, 1, 12, 30, 15, 250, tzinfo=UTC)
    assert got["f_dt"].utcoffset() == dt.timedelta(0)
    assert got["f_date"] == dt.date(2026, 3, 1)
    assert got["f_uuid"] == u
    assert got["f_dec"] == Decimal("12.50")
    assert got["f_bool"] is True
    assert got["f_json"] == {"a": [1, None]}
    assert got["f_int"] == 7 and got["f_bytes"] == b"\x00" and got["f_required"] == "r"
    assert got["f_small"] is None


def test_sqlite_decoding_of_values_the_connection_already_converted() -> None:
    # Django's SQLite connection (detect_types) converts declared datetime/date/bool/decimal
    # columns itself: naive datetimes in UTC, dates, bools, Decimals.
    codec = Codec(SPEC, SQLite())
    got = codec.decode(_row(
        f_required="r", f_dt=dt.datetime(2026, 3, 1, 12, 30), f_date=dt.date(2026, 3, 1),
        f_bool=False, f_dec=Decimal("1.50"),
    ))  # fmt: skip
    assert got["f_dt"] == dt.datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    assert got["f_date"] == dt.date(2026, 3, 1)
    assert got["f_bool"] is False
    assert got["f_dec"] == Decimal("1.50")


def test_sqlite_decoding_keeps_naive_datetimes_when_time_zones_are_off() -> None:
    codec = Codec(NAIVE_SPEC, SQLite())
    got = codec.decode(_row(f_required="r", f_dt="2026-03-01 12:30:00.000000"))
    assert got["f_dt"] == dt.datetime(2026, 3, 1, 12, 30) and got["f_dt"].tzinfo is None


def test_sqlite_round_trip_of_every_kind() -> None:
    codec = Codec(SPEC, SQLite())
    payload = {
        "f_small": -5, "f_int": 7, "f_big": 2**62, "f_pos": 3, "f_float": 1.5,
        "f_dec": Decimal("99.99"), "f_text": "short", "f_longtext": "ü" * 1000, "f_bool": True,
        "f_dt": dt.datetime(2026, 3, 1, 14, 30, tzinfo=PLUS2), "f_date": dt.date(2026, 3, 1),
        "f_json": {"k": ["v"]}, "f_bytes": b"\x01\x02", "f_uuid": uuid.uuid4(), "f_required": "r",
    }  # fmt: skip
    back = codec.decode(codec.encode(payload))
    assert back == payload


def test_decode_with_an_offset() -> None:
    codec = Codec(SPEC, PostgreSQL())
    row = [1, 2, 3, *_row(f_required="r", f_json='{"a":1}')]
    got = codec.decode(row, offset=3)
    assert got["f_required"] == "r" and got["f_json"] == {"a": 1}


def test_postgresql_binds_values_natively() -> None:
    codec = Codec(SPEC, PostgreSQL())
    u, when = uuid.uuid4(), dt.datetime(2026, 3, 1, 14, 30, tzinfo=PLUS2)
    values = dict(zip(NAMES, codec.encode({"f_required": "r", "f_uuid": u, "f_dt": when,
                                            "f_bool": True}), strict=True))  # fmt: skip
    assert values["f_uuid"] == u and values["f_dt"] == when and values["f_bool"] is True


# -- float specials through a real database -----------------------------------------------------


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgresql", marks=pytest.mark.postgresql),
        pytest.param("sqlite", marks=pytest.mark.sqlite),
    ],
)
@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_float_specials_are_stored_or_refused_never_lost(
    backend: str, value: float, request: pytest.FixtureRequest, table_name: str
) -> None:
    # SQLite stores a bound NaN as NULL: a nullable float field would silently lose the value
    # (and a NOT NULL one fail with IntegrityError). Either refuse it or give it back.
    import math

    from dbqueue import SplitQueue, get_dialect
    from dbqueue.drivers import executor_for
    from dbqueue.schema import create_statements

    conn = request.getfixturevalue("pg_conn" if backend == "postgresql" else "sqlite_conn")
    dialect = get_dialect(backend)
    ex = executor_for(dialect, conn)
    spec = QueueSpec(table_name, (Field("x", K.FLOAT, nullable=True),))
    for statement in create_statements(spec, dialect):
        ex.execute(statement, {})
    try:
        queue = SplitQueue(spec, dialect)
        try:
            queue.push(ex, {"x": value})
        except InvalidPayload:
            return
        (message,) = queue.pop_batch(ex, 1)
        got = message.payload["x"]
        assert got is not None, "the value was silently stored as NULL"
        assert (math.isnan(got) and math.isnan(value)) or got == value
    finally:
        if backend == "postgresql":
            ex.execute(f'DROP TABLE "{spec.table}", "{spec.meta_table}", "{spec.head_table}"', {})


def test_sqlite_times_keep_a_four_digit_year() -> None:
    """glibc's strftime writes year 15 as "15", which SQLite and fromisoformat cannot read
    back: a time before year 1000 round-trips through the SQLite dialect."""
    from dbqueue import get_dialect

    dialect = get_dialect("sqlite")
    early = dt.datetime(15, 8, 8, 22, 5, 14, 3665, tzinfo=dt.UTC)
    assert dialect.time_result(dialect.time_param(early)) == early
