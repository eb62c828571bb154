-- The statements of a split queue with consumer groups (QueueOptions.groups) that differ from
-- split.sql's, which they replace for such a queue (dbqueue.sql.render). The payload is stored
-- once, in the data table; each group has a meta table of its own, {meta} in a group's
-- statements, which also keeps the group's last error ({error}, {set_error}...).
-- An item's data row goes with the last of its groups' meta rows: whoever removes a meta row
-- deletes the data row if no other group's meta table holds the item ({data_unheld}). Two
-- groups removing their rows of one item at once would each see the other's row, still there
-- in their snapshots, and leave the data row behind; so a removal locks the data rows first,
-- in id order, and decides in a later statement, whose snapshot sees every group that removed
-- its row before it got the lock.

-- _each_pushed_head --
-- A fragment of the pushes, written once per group (see ring_groups.sql's header): what a push
-- does to group {i}'s head table {g_head} (split.sql's _pushed_head).
, band{i} AS (
    INSERT INTO {g_head} (priority, run_at)
    SELECT %(priority)s::smallint, '-infinity'::timestamptz
    WHERE %(priority)s::smallint <> 0 OR %(run_at)s::timestamptz < {_clock}
    ON CONFLICT (priority) DO NOTHING
), lowered{i} AS (
    UPDATE {g_head} AS h SET run_at = LEAST(h.run_at, %(run_at)s::timestamptz)
    WHERE h.priority = %(priority)s::smallint AND %(run_at)s::timestamptz < {_clock}
)

-- _fanned_out --
-- A fragment of the pushes: the meta row of each data row `d` as `r`, then written into every
-- group's table ({fan_out}: one insert per group, from `r`), and every group's head table.
r AS (
    SELECT d.id, {state_ready} AS state, %(priority)s AS priority,
           COALESCE(%(run_at)s::timestamptz, {_clock} + %(delay)s::interval) AS run_at
    FROM d
){fan_out}{_each_pushed_head}

-- split_push --
-- A push: the data row, and a meta row in every group's table, in one statement.
WITH {_data_row}, {_fanned_out}
SELECT id FROM d;

-- split_push_many --
-- split_push for a batch (see split.sql's split_push_many).
WITH {_data_rows}, {_fanned_out}
SELECT id FROM d ORDER BY id;

-- _lock_data --
-- The first statement of a removal by id: the data rows of the items %(ids)b names, locked in
-- id order. No row comes back.
WITH locked AS (
    SELECT d.id FROM {data} AS d
    WHERE d.id = ANY(%(ids)b::bigint[])
    ORDER BY d.id
    FOR UPDATE OF d
)
SELECT n FROM (SELECT count(*) AS n FROM locked) AS c WHERE n < 0

-- _reap --
-- The last statement of a removal whose first one returned the removed ids (%(ids)s): their
-- data rows, unless another group still holds them.
DELETE FROM {data} AS d WHERE d.id = ANY(%(ids)s::bigint[]) AND {data_unheld}

-- split_ack --
{_lock_data};
WITH {_acked}
SELECT id FROM acked;

-- split_ack_pop --
{_lock_data};
WITH {_acked}, {_ack_then_lease};

-- split_delete --
{_lock_data};
{_deleted};

-- split_pop_remove --
-- The picked rows removed from the group's table, their data rows read and locked; the data
-- rows no other group holds are deleted by the second statement.
WITH {_picked}, m AS (
    DELETE FROM {meta} AS m USING picked
    WHERE m.id = picked.id AND m.id = ANY(ARRAY(SELECT id FROM picked))  -- by key: split.sql
    RETURNING m.id, m.attempts, m.priority, m.run_at, m.last_error
), d AS (
    SELECT d.* FROM {data} AS d
    WHERE d.id IN (SELECT id FROM m)
    ORDER BY d.id
    FOR UPDATE OF d
)
SELECT m.id, m.attempts + 1, m.priority, m.run_at, NULL::timestamptz, d.enqueued_at, m.last_error{d_payload}
FROM m LEFT JOIN d ON d.id = m.id
ORDER BY m.priority DESC, m.run_at, m.id;
{_reap};

-- split_purge --
WITH p AS (
    DELETE FROM {meta} AS m
    WHERE {_purged}
    RETURNING m.id
), locked AS (
    SELECT d.id FROM {data} AS d
    WHERE d.id IN (SELECT id FROM p)
    ORDER BY d.id
    FOR UPDATE OF d
)
SELECT p.id FROM p WHERE (SELECT count(*) FROM locked) >= 0;
{_reap};
