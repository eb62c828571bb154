"""Named SQL statements, one file per dialect and purpose (``sql/<dialect>/<file>.sql``: a
layout's, ``split`` or ``ring``, or the Spark source's and the archive job's).

A file is a sequence of blocks, each introduced by a line ``-- name --``. A block whose name
starts with an underscore is a fragment, not a statement: other blocks of the file include it
as ``{_name}``, so SQL shared by several statements is written once per dialect. A block is one
statement, or (where a dialect lacks data-modifying CTEs, and for compaction) a few statements
separated by ``;`` at the end of a line (not inside a ``$$`` body), which the core runs in one
transaction. Comment lines are dropped so the text sent to the server, and so the
prepared-statement cache key, stays compact.

Braced placeholders are filled by :func:`render` with identifiers taken from a validated
:class:`~dbqueue.spec.QueueSpec` and quoted by the dialect; values are always bound parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from dbqueue.dialects.base import Dialect
from dbqueue.message import State
from dbqueue.spec import Field, QueueSpec
from dbqueue.unique import UniqueScope, index_predicate

_HEADER = re.compile(r"^-- ([a-z_]+) --$")


@dataclass(frozen=True, slots=True)
class Statement:
    """A named statement: one SQL text, or a block of texts run in one transaction."""

    name: str
    parts: tuple[str, ...]


def load(dialect: str, file: str) -> dict[str, tuple[str, ...]]:
    """The raw (unrendered) statements of ``sql/<dialect>/<file>.sql``, by name."""
    return {k: v for k, v in _blocks(dialect, file).items() if not k.startswith("_")}


def fragments(dialect: str, file: str) -> dict[str, str]:
    """The raw fragments of the file (blocks named ``_name``), by name (a fragment of several
    statements keeps the ``;`` between them)."""
    return {k: ";\n".join(v) for k, v in _blocks(dialect, file).items() if k.startswith("_")}


#: What the names of the statements of unique queues only have (dbqueue.unique).
UNIQUE_STATEMENT = "unique"
#: The file whose fragments the statements of every layout of a dialect may use.
COMMON = "common"
#: The file whose statements replace the split layout's for a queue with consumer groups.
GROUPS = "split_groups"
#: The file whose statements replace the ring layout's for a ring with consumer groups.
RING_GROUPS = "ring_groups"
#: What the fragments written once per consumer group are named after (ring_groups.sql).
EACH_GROUP = "_each_"


@cache
def _blocks(dialect: str, file: str) -> dict[str, tuple[str, ...]]:
    path = resources.files(__package__).joinpath(dialect, f"{file}.sql")
    if file == COMMON and not path.is_file():
        return {}
    text = path.read_text("utf-8")
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            current = blocks.setdefault(header.group(1), [])
        elif current is not None and line.strip() and not line.lstrip().startswith("--"):
            current.append(line.rstrip())
    return {name: _split("\n".join(lines)) for name, lines in blocks.items()}


def _split(body: str) -> tuple[str, ...]:
    """The statements of a block: split at ``;`` ending a line, except inside a
    dollar-quoted ``$$`` body (a ``DO`` block's own statements)."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for line in body.splitlines():
        quoted ^= line.count("$$") % 2 == 1
        if not quoted and re.search(r";\s*$", line):
            current.append(re.sub(r";\s*$", "", line))
            parts.append("\n".join(current))
            current = []
        else:
            current.append(line)
    parts.append("\n".join(current))
    return tuple(p.strip() for p in parts if p.strip())


def payload_arrays(dialect: Dialect, fields: Sequence[Field]) -> list[str]:
    """One typed array parameter per payload field (``c0``, ``c1``...), for batch pushes."""
    return [
        f"{dialect.array_param(f'c{i}')}::{dialect.array_type(f.kind)}"
        for i, f in enumerate(fields)
    ]


def split_context(spec: QueueSpec, dialect: Dialect) -> dict[str, str]:
    """The identifier fragments the split-layout statements are written with, and the meta
    table's states by name (``{state_ready}``: dbqueue.message.State)."""
    q = dialect.quote
    fields = spec.fields
    params = [dialect.payload_param(f"p{i}", f) for i, f in enumerate(fields)]
    keys = f"{dialect.array_param('keys')}::text[]"
    if not dialect.supports_array_params:
        unnest_source = keyed_source = ""
    elif fields:
        arrays = ", ".join(payload_arrays(dialect, fields))
        names = ", ".join(f"c{i}" for i in range(len(fields)))
        unnest_source = f"unnest({arrays}) WITH ORDINALITY AS r({names}, ord)"
        keyed_source = f"unnest({arrays}, {keys}) WITH ORDINALITY AS r({names}, key, ord)"
    else:
        unnest_source = f"generate_series(1, {dialect.param('count')}) WITH ORDINALITY AS r(x, ord)"
        keyed_source = f"unnest({keys}) WITH ORDINALITY AS r(key, ord)"
    data, meta = q(spec.table), q(spec.meta_table)
    # The tables compaction looks after (dbqueue.upkeep.compaction): the meta table (every
    # group's, for the queue of them all) and the data table.
    metas = (
        zip(spec.group_meta_tables, spec.group_head_tables, strict=True)
        if spec.fans_out
        else [(spec.meta_table, spec.head_table)]
    )
    tables = [*(t for pair in metas for t in pair), spec.table]
    return {
        **{f"state_{state.name.lower()}": str(int(state)) for state in State},
        "data": data,
        "meta": meta,
        "heads": q(spec.head_table),
        **relations_context(tables, dialect),
        "insert_columns": ", ".join([*(q(f.name) for f in fields), "enqueued_at"]),
        "payload_params": "".join(f"{p}, " for p in params),
        "d_payload": "".join(f", {dialect.payload_select('d', f)}" for f in fields),
        "m_payload": "".join(
            f", (SELECT {dialect.payload_select('d', f)} FROM {data} AS d WHERE d.id = {meta}.id)"
            for f in fields
        ),
        "r_payload": "".join(f"r.c{i}, " for i in range(len(fields))),
        "unnest_source": unnest_source,
        # unnest_source with the rows' unique keys as column `key` (dbqueue.unique).
        "keyed_source": keyed_source,
        **unique_context(spec, dialect),
        **group_context(spec, dialect),
    }


def relations_context(tables: Sequence[str], dialect: Dialect) -> dict[str, str]:
    """The tables a layout's compaction statements name (``{tables}``, for VACUUM) and their
    relations as values (``{table_oids}``, for the catalog)."""
    q = dialect.quote
    return {
        "tables": ", ".join(q(t) for t in tables),
        "table_oids": ", ".join(f"'{q(t)}'::regclass" for t in tables),
    }


def group_context(spec: QueueSpec, dialect: Dialect) -> dict[str, str]:
    """The fragments of consumer groups (``split_groups.sql``), neutral for a queue without:

    - ``fan_out``: a push's meta row written in every group's table (PostgreSQL: one CTE per
      group, from the push's row ``r``; SQLite: one statement per group, of ``:ids``);
    - ``data_unheld``: of a data row ``d`` whose item this group has just removed, that no other
      group holds it (``true`` without groups: the item is gone);
    - where a delivery's last error lives: the group's meta row, since the data row is shared
      (``error``, the column a pop returns; ``m_error``, that column in a meta CTE's RETURNING;
      ``set_error``/``set_error_tok``, what fail and rescue write into the meta row;
      ``shared_errors``, whether they write the data row's instead; SQLite's ``error_table``).
    """
    q = dialect.quote
    meta, data = q(spec.meta_table), q(spec.table)
    others = [t for t in spec.group_meta_tables if t != spec.meta_table]
    grouped = spec.group is not None
    pg = dialect.supports_writable_cte
    shared_error = (
        "d.last_error" if pg else f"(SELECT d.last_error FROM {data} AS d WHERE d.id = {meta}.id)"
    )
    if pg:
        fan_out = "".join(
            f", g{i} AS (\n    INSERT INTO {q(t)} (id, state, priority, run_at, attempts)\n"
            f"    SELECT id, state, priority, run_at, 0 FROM r\n)"
            for i, t in enumerate(spec.group_meta_tables)
        )
    else:
        fan_out = ";\n".join(
            f"INSERT INTO {q(t)} (id, state, priority, run_at, attempts)\n"
            f"SELECT value, {int(State.READY)}, :priority, :run_at, 0 FROM json_each(:ids)"
            for t in spec.group_meta_tables
        )
    return {
        "fan_out": fan_out,
        "data_unheld": " AND ".join(
            f"NOT EXISTS (SELECT 1 FROM {q(t)} AS h WHERE h.id = d.id)" for t in others
        )
        or "true",
        "error": ("m.last_error" if pg else "last_error") if grouped else shared_error,
        "m_error": ", m.last_error" if grouped else "",
        "set_error": ", last_error = %(error)s" if grouped else "",
        "set_error_tok": ", last_error = tok.error" if grouped else "",
        "shared_errors": "false" if grouped else "true",
        "error_table": meta if grouped else data,
    }


def unique_context(spec: QueueSpec, dialect: Dialect) -> dict[str, str]:
    """The fragments of unique items (:mod:`dbqueue.unique`): the key a push stores (with its
    period's start, if the queue has one), the condition of an item holding its key, the
    condition of a retried item's key being free, and what a lease does to the key (a queue
    whose scope is "queued" drops it). For a queue that is not unique, neutral text for the
    two that statements of every queue use."""
    options = spec.options
    if not options.is_unique:  # render() leaves the unique statements out
        return {"release_key": "", "unique_free": "true"}
    meta = dialect.quote(spec.meta_table)
    scope = options.unique_scope_mode
    held = index_predicate(scope)
    suffix = (
        f" || '@' || {dialect.period_start('unique_period')}"
        if options.unique_period is not None
        else ""
    )
    return {
        "release_key": ", unique_key = NULL" if scope is UniqueScope.QUEUED else "",
        "unique_free": (
            f"({meta}.unique_key IS NULL OR NOT EXISTS (SELECT 1 FROM {meta} AS o "
            f"WHERE o.unique_key = {meta}.unique_key AND o.id <> {meta}.id AND {held}))"
        ),
        "unique_held": held,
        "unique_value": f"{dialect.param('unique_key')}{suffix}",
        "unique_value_r": f"r.key{suffix}",
        # The data table's name as text, for pg_get_serial_sequence().
        "data_name": f"'{dialect.quote(spec.table)}'",
        # SQLite: the id the data table's next row takes (AUTOINCREMENT: one more than the
        # largest it ever handed out, which sqlite_sequence keeps).
        "next_data_id": (
            "(SELECT COALESCE(MAX(seq), 0) + 1 FROM sqlite_sequence WHERE name = :table)"
        ),
    }


def ring_context(spec: QueueSpec, dialect: Dialect) -> dict[str, str]:
    """The identifier fragments the ring-layout statements are written with, and the named
    values they share with the Python side (``{slot_ready}``: dbqueue.ring.states)."""
    # Here, not at the top: the ring package imports this module (through dbqueue.layout).
    from dbqueue.ring.states import sql_constants

    q = dialect.quote
    fields = spec.fields
    names = [q(f.name) for f in fields]
    # Each array a sub-select: see ring.sql's header (the planner must not see its length).
    arrays = (
        "".join(f", (SELECT {a})" for a in payload_arrays(dialect, fields))
        if dialect.supports_array_params
        else ""
    )
    constants = sql_constants()
    # The tables compaction looks after (dbqueue.upkeep.compaction): the slots (a group's
    # state rows, and the slot table holding their payloads), the side table.
    grouped = spec.group is not None
    tables = [spec.state_table, spec.failed_table, *([spec.table] if grouped else [])]
    return {
        **constants,
        **relations_context(tables, dialect),
        # A consumer group's statements run on its state table (its row of every slot), and
        # read the payload from the slot table (see ring_group_context).
        "ring": q(spec.state_table),
        "slots": q(spec.table),
        "failed": q(spec.failed_table),
        # Sequence names as text for nextval() (PostgreSQL) and as relations to read.
        "push_seq": f"'{q(spec.push_seq)}'",
        "pop_seq": f"'{q(spec.pop_seq)}'",
        "push_seq_rel": q(spec.push_seq),
        "pop_seq_rel": q(spec.pop_seq),
        "columns": "".join(f", {n}" for n in names),
        "set_params": "".join(
            f", {n} = {dialect.payload_param(f'p{i}', f)}"
            for i, (n, f) in enumerate(zip(names, fields, strict=True))
        ),
        # One message's values, in column order (SQLite's ring_spill).
        "value_params": "".join(
            f", {dialect.payload_param(f'p{i}', f)}" for i, f in enumerate(fields)
        ),
        "set_r": "".join(f", {n} = r.c{i}" for i, n in enumerate(names)),
        # One push's values as the columns of a one-row `r` (cast: a select list has no target
        # column to infer their types from).
        "r_params": "".join(
            f", {dialect.payload_param(f'p{i}', f)}::{dialect.array_type(f.kind)[:-2]} AS c{i}"
            for i, f in enumerate(fields)
        )
        if dialect.supports_array_params
        else "",
        "set_m": "".join(f", {n} = m.{n}" for n in names),
        "payload_arrays": arrays,
        "r_names": "".join(f", c{i}" for i in range(len(fields))),
        "r_columns": "".join(f", r.c{i}" for i in range(len(fields))),
        "t_columns": "".join(f", t.{n}" for n in names),
        "v_columns": "".join(f", v.{n}" for n in names),
        "s_columns": "".join(f", s.{n}" for n in names),
        "f_columns": "".join(f", f.{n}" for n in names),
        "m_columns": "".join(f", m.{n}" for n in names),
        "k_columns": "".join(f", k.{n}" for n in names),
        "d_columns": "".join(f", d.{n}" for n in names),
        "u_payload": "".join(f", u.{n}" for n in names),
        "null_payload": ", NULL" * len(names),
        # What a slot a message leaves sets its payload to (ring.sql's _emptied): NULL, but in
        # a consumer group's state table, which has no payload.
        "clear_payload": "" if spec.group is not None else "".join(f", {n} = NULL" for n in names),
        "t_payload": "".join(f", {dialect.payload_select('t', f)}" for f in fields),
        # RETURNING on SQLite cannot see a table alias: the table's own name.
        "ring_payload": "".join(f", {dialect.payload_select(q(spec.table), f)}" for f in fields),
        **ring_group_context(spec, dialect),
    }


def ring_group_context(spec: QueueSpec, dialect: Dialect) -> dict[str, str]:
    """Where a ring statement reads a message's payload: in the slot row ``t`` itself, or for
    a consumer group, whose statements run on its state table (``{ring}``), in the slot table
    ``d`` joined by slot and number (a group's row holds a message only while the slot holds
    its payload: a push writes both, and writes the slot again only once every group has
    settled it).

    The number matters on PostgreSQL: a statement that waited for a group's row re-checks its
    conditions on the row's new version, but joins it with the slot table's row as its
    snapshot saw it. A pusher that moved the slot's message aside and wrote its own there
    leaves a row the waiting pop can take (its popper holding both numbers); joined by slot
    alone, the pop took the new message with the old one's payload, and the new payload was
    lost for that group (tests/core/test_ring_groups.py). Joined by number too, the re-check
    fails and the popper takes the message at its next pop.

    - ``from_slots``/``and_slots``: the join of a pop's UPDATE (PostgreSQL);
    - ``join_slots``: the join of a SELECT of rows ``t``, and ``d_payload`` the payload it adds
      next to ``t.*`` (PostgreSQL), or ``slot_columns`` the payload it selects (SQLite);
    - ``t_payload``: the payload a pop returns (PostgreSQL), ``popped_payload`` (SQLite, whose
      RETURNING sees only the table it updates: a sub-select per column)."""
    q = dialect.quote
    fields = spec.fields
    ring, slots = q(spec.state_table), q(spec.table)
    if spec.group is None or spec.options.capacity is None:
        return {
            "group_count": str(len(spec.options.groups)),
            "from_slots": "",
            "and_slots": "",
            # A removing pop clears the slot's payload: it reads it from the slot as found.
            "from_kept": f" FROM {ring} AS o",
            "and_kept": " AND o.slot = t.slot AND o.seq = t.seq",
            "kept_payload": "".join(f", {dialect.payload_select('o', f)}" for f in fields),
            "join_slots": "",
            "d_payload": "",
            "slot_columns": "".join(f", t.{q(f.name)}" for f in fields),
            "popped_payload": "".join(f", {dialect.payload_select(ring, f)}" for f in fields),
        }
    return {
        "group_count": str(len(spec.options.groups)),
        "from_slots": f" FROM {slots} AS d",
        "and_slots": " AND d.slot = t.slot AND d.seq = t.seq",
        "from_kept": f" FROM {slots} AS d",
        "and_kept": " AND d.slot = t.slot AND d.seq = t.seq",
        "kept_payload": "".join(f", {dialect.payload_select('d', f)}" for f in fields),
        "join_slots": f" JOIN {slots} AS d ON d.slot = t.slot AND d.seq = t.seq",
        "d_payload": "".join(f", d.{q(f.name)}" for f in fields),
        "slot_columns": "".join(f", d.{q(f.name)}" for f in fields),
        "t_payload": "".join(f", {dialect.payload_select('d', f)}" for f in fields),
        "popped_payload": "".join(
            f", (SELECT {dialect.payload_select('d', f)} FROM {slots} AS d "
            f"WHERE d.slot = {ring}.slot)"
            for f in fields
        ),
    }


def each_group(
    spec: QueueSpec,
    dialect: Dialect,
    text: str,
    context: Mapping[str, str],
    *,
    locked: bool = False,
) -> str:
    """A fragment written once per consumer group of the queue (``_each_*`` blocks of
    ring_groups.sql), each time with that group's identifiers (``{g}``, ``{g_side}``...,
    listed in postgresql/ring_groups.sql's header); ``locked``: with SKIP LOCKED where the
    fragment locks rows (``{skip}``)."""
    from dbqueue.ring.states import SlotState

    q = dialect.quote
    written = []
    for i, group in enumerate(spec.group_specs):
        first = i == 0
        # A return goes to the group whose side table it comes from, or from the queue's
        # own (messages spilled before any group got them) to every group.
        receives = spec.group in (None, group.group)
        written.append(
            text.format(
                **context,
                i=i,
                g_name=f"'{group.group}'",
                g=q(group.state_table),
                g_head=q(group.head_table),
                g_side=q(group.failed_table),
                g_pop_rel=q(group.pop_seq),
                g_return=int(SlotState.READY if receives else SlotState.EMPTY),
                g_union="" if first else "UNION ALL",
                g_intersect="" if first else "INTERSECT",
                g_plus="" if first else "+",
                skip=" SKIP LOCKED" if locked else "",
            )
        )
    # A fragment that is statements (SQLite's, which has no data-modifying CTEs) is written as
    # one statement per group, `;` at a line's end between them (where a block splits).
    statements = text.lstrip().startswith(("INSERT", "UPDATE", "DELETE"))
    return (";\n" if statements else "\n").join(written)


def render(
    spec: QueueSpec, dialect: Dialect, file: str, extra: Mapping[str, str] | None = None
) -> dict[str, Statement]:
    """Every statement of ``sql/<dialect>/<file>.sql`` for this queue on this dialect, ready
    to execute. Files other than ``split`` see the ring's identifiers too (the Spark and
    archive statements serve both layouts); ``extra`` adds identifier fragments of their own."""
    context = split_context(spec, dialect)
    if file != "split":
        context.update(ring_context(spec, dialect))
    context.update(extra or {})
    raw = fragments(dialect.name, file)
    statements = load(dialect.name, file)
    overlay = {"split": GROUPS, "ring": RING_GROUPS}.get(file)
    if overlay and spec.options.groups:
        # A queue with consumer groups: the overlay's statements replace the layout's.
        raw.update(fragments(dialect.name, overlay))
        statements.update(load(dialect.name, overlay))
    for name, text in {**fragments(dialect.name, COMMON), **raw}.items():
        if name.startswith(EACH_GROUP):
            context[name] = each_group(spec, dialect, text, context)
            context[f"{name}_locked"] = each_group(spec, dialect, text, context, locked=True)
        else:
            context[name] = text.format(**context)
    unique = spec.options.is_unique
    return {
        # Split again once rendered: a fragment (SQLite's fan_out) may hold several statements.
        name: Statement(name, tuple(p for part in parts for p in _split(part.format(**context))))
        for name, parts in statements.items()
        # A queue without unique items has no unique_key column for those to name.
        if unique or UNIQUE_STATEMENT not in name
    }
