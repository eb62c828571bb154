-- The statements of the Spark data source (dbqueue.spark), for split and ring queues.
-- Placeholders in braces are identifiers from a validated QueueSpec, quoted by the dialect;
-- {read_d}, {read_t}, {read_f} list the payload columns as Spark reads them (JSON and uuid as
-- text), {stage} is the queue's stage table (<table>_stage).

-- spark_tables --
-- Which of the given table names exist (on the search path).
SELECT name FROM unnest(%(names)s::text[]) AS name
WHERE to_regclass(quote_ident(name)) IS NOT NULL;

-- spark_group_tables --
-- The tables whose names start with %(prefix)s (a queue's consumer groups' tables are
-- <table>_meta_<group>, or a ring's <table>_ring_<group> and <table>_side_<group>), on the
-- search path.
SELECT c.relname FROM pg_class AS c
WHERE c.relkind IN ('r', 'p') AND pg_table_is_visible(c.oid) AND starts_with(c.relname, %(prefix)s);

-- spark_columns --
-- A table's columns in order: name, type as PostgreSQL spells it, NOT NULL.
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute AS a
WHERE a.attrelid = to_regclass(quote_ident(%(table)s)) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;

-- spark_capacity --
-- A ring's capacity: its slot count (slots are numbered 0 .. capacity - 1).
SELECT coalesce(max(slot) + 1, 0) FROM {ring};

-- spark_id_sequence --
-- The sequence behind the data table's identity column, which a publish draws ids from.
SELECT pg_get_serial_sequence(%(table)s, 'id');

-- spark_stage_expire --
-- Stage rows of writes whose driver died before it published or aborted them.
DELETE FROM {stage} WHERE staged_at < statement_timestamp() - %(keep)s::interval;

-- spark_stage_open --
-- A task, first in its staging transaction: wait while the driver is closing the write (a
-- shared lock, held until the task's transaction ends, that the driver's close waits for).
SELECT pg_advisory_xact_lock_shared(hashtextextended(%(write_id)s, 0));

-- spark_stage_closed --
-- Then, in a statement of its own (a statement's snapshot is taken before it waits for a
-- lock, so a check in the locking statement would miss a close committed during the wait):
-- was the write closed? A task that lost the race to an abort, or a late speculative
-- attempt, must not leave rows behind.
SELECT EXISTS (SELECT 1 FROM {stage} WHERE write_id = %(write_id)s AND part = -1);

-- spark_stage_close --
-- The driver, before it publishes or aborts: wait for the tasks staging now, and mark the
-- write closed (a row with part -1, deleted with the stage's expired rows).
WITH locked AS (
    SELECT pg_advisory_xact_lock(hashtextextended(%(write_id)s, 0))
)
INSERT INTO {stage} (write_id, part, attempt, ord)
SELECT %(write_id)s::uuid, -1, -1, -1 FROM locked;

-- spark_stage_abort --
DELETE FROM {stage} WHERE write_id = %(write_id)s AND part >= 0;

-- _staged --
-- A fragment (a condition on the stage): the rows staged by the task attempts that succeeded
-- (a failed attempt may have committed rows of its own before it failed: never published).
write_id = %(write_id)s
  AND (part, attempt) IN (SELECT * FROM unnest(%(parts)s::integer[], %(attempts)s::integer[]))

-- spark_publish_split --
-- Publish a whole write into a split queue in ONE statement: ids drawn in staging order
-- (partition, then row), data and meta rows inserted, the write's stage rows deleted (those of
-- failed attempts too). Rows without a priority or run_at column get 0 and now; each priority
-- published gets its row in the head table, its head lowered to a run_at in the past
-- (split.sql's _lowered).
WITH s AS MATERIALIZED (
    SELECT nextval(%(id_seq)s::regclass) AS id, st.*
    FROM (SELECT * FROM {stage} WHERE {_staged} ORDER BY part, ord) AS st
), d AS (
    INSERT INTO {data} (id{columns}, enqueued_at)
    SELECT s.id{s_columns}, statement_timestamp() FROM s ORDER BY s.id
), m AS (
    INSERT INTO {meta} (id, state, priority, run_at, attempts)
    SELECT s.id, {state_ready}, coalesce(s.priority, 0), coalesce(s.run_at, {_clock}), 0
    FROM s ORDER BY s.id
), low AS (
    SELECT coalesce(s.priority, 0) AS priority, min(coalesce(s.run_at, 'infinity')) AS run_at
    FROM s GROUP BY 1
), {_lowered}, gone AS (
    DELETE FROM {stage} WHERE write_id = %(write_id)s AND part >= 0
)
SELECT count(*), min(id), max(id) FROM s;

-- spark_analyze_split --
-- After a large publish, in its transaction: fresh statistics for the queue's tables. A
-- worker's prepared pop keeps the generic plan it made, and one made while the tables were
-- empty (vacuumed after a drain) is nested loops over sequential scans: on the published
-- million rows one pop took minutes. New statistics invalidate every session's cached plans
-- at this commit, which is also when the workers are woken. ANALYZE counts the transaction's
-- own new rows; SKIP_LOCKED: a concurrent (auto)vacuum or analyze is refreshing them anyway.
ANALYZE (SKIP_LOCKED) {data}, {meta};

-- spark_take_staged --
-- A ring publish's next chunk: up to n staged rows in staging order, taken out of the stage
-- in the transaction that pushes them into the ring.
WITH taken AS (
    DELETE FROM {stage}
    WHERE ctid IN (SELECT ctid FROM {stage} WHERE {_staged} ORDER BY part, ord LIMIT %(n)s)
    RETURNING part, ord{columns}
)
SELECT * FROM taken ORDER BY part, ord;

-- _split_columns --
-- A fragment: the read schema's columns of a split queue's item (meta, then data).
m.id, m.state, m.priority, m.attempts, d.enqueued_at, m.run_at, m.lease_until,
       d.last_error{read_d}

-- _ring_columns --
-- A fragment: the read schema's columns of a message in a ring's slot.
t.seq, t.state, 0, t.attempts, t.pushed_at, t.pushed_at, t.lease_until, t.last_error{read_t}

-- _side_columns --
-- A fragment: the read schema's columns of a message in a ring's side table: its run_at is when
-- it is due again (waiting for a retry) or when it failed (or was moved aside).
f.id, f.state, 0, f.attempts, f.pushed_at,
       CASE WHEN f.state = {side_ready} THEN f.run_at ELSE f.failed_at END, f.lease_until,
       f.last_error{read_f}

-- spark_bounds_split --
-- The id range and count of a split queue's items in the given states (finished before a
-- time, when given: run_at of done and failed items is when they finished).
SELECT min(id), max(id), count(*) FROM {meta}
WHERE state = ANY(%(states)s::smallint[])
  AND (%(before)s::timestamptz IS NULL OR run_at < %(before)s::timestamptz);

-- spark_read_split --
SELECT {_split_columns}
FROM {meta} AS m JOIN {data} AS d ON d.id = m.id
WHERE m.id >= %(lo)s AND m.id < %(hi)s AND m.state = ANY(%(states)s::smallint[])
  AND (%(before)s::timestamptz IS NULL OR m.run_at < %(before)s::timestamptz)
ORDER BY m.id;

-- spark_bounds_ring --
SELECT min(seq), max(seq), count(*) FROM {ring} WHERE state = ANY(%(states)s::smallint[]);

-- spark_read_ring --
-- A ring's messages by number (seq).
SELECT {_ring_columns}
FROM {ring} AS t
WHERE t.seq >= %(lo)s AND t.seq < %(hi)s AND t.state = ANY(%(states)s::smallint[])
ORDER BY t.seq;

-- spark_bounds_failed --
-- The id range and count of a ring's side table rows in the given states (dbqueue.message.State).
SELECT min(id), max(id), count(*) FROM {failed}
WHERE state = ANY(%(states)s::smallint[])
  AND (%(before)s::timestamptz IS NULL OR failed_at < %(before)s::timestamptz);

-- spark_read_failed --
SELECT {_side_columns}
FROM {failed} AS f
WHERE f.id >= %(lo)s AND f.id < %(hi)s AND f.state = ANY(%(states)s::smallint[])
  AND (%(before)s::timestamptz IS NULL OR f.failed_at < %(before)s::timestamptz)
ORDER BY f.id;

-- spark_lock_split --
-- A stream batch's read runs in REPEATABLE READ: the first statement takes the tables' lock
-- before the snapshot. No compaction changes what a snapshot sees (dbqueue.upkeep); the lock
-- keeps one from rewriting the tables while the batch reads them (a rewrite skips a locked
-- table).
LOCK TABLE {meta}, {data} IN ACCESS SHARE MODE;

-- spark_lock_ring --
LOCK TABLE {ring}, {failed} IN ACCESS SHARE MODE;

-- spark_items_split --
-- A stream batch's items by id, whatever their state now (a replayed batch reads the same).
SELECT {_split_columns}
FROM unnest(%(ids)b::bigint[]) AS k(id)
JOIN {meta} AS m ON m.id = k.id
JOIN {data} AS d ON d.id = k.id
ORDER BY m.id;

-- spark_items_ring --
-- Like spark_read_ring, by id: a stream batch's items in their slots (spark_items_failed reads
-- those a pusher moved to the side table, and those waiting for a retry since).
SELECT {_ring_columns}
FROM unnest(%(ids)b::bigint[]) AS k(id)
JOIN {ring} AS t ON t.slot = mod(k.id, %(capacity)s::bigint) AND t.seq = k.id
ORDER BY t.seq;

-- spark_items_failed --
SELECT {_side_columns}
FROM unnest(%(ids)b::bigint[]) AS k(id)
JOIN {failed} AS f ON f.id = k.id
ORDER BY f.id;

-- spark_lease_split --
-- A stream's micro-batch: up to %(n)s due items leased (NULL: all of them), one more attempt
-- counted, in delivery order (each priority read from its head, as split.sql's _picked); only
-- their tokens come back (the executors read the payloads).
-- An available-now query passes the bounds it fixed at its start, %(until)s (the newest id
-- then ready) and %(due_by)s (its start): items pushed, retried or given back since wait for
-- its next run. NULL bounds: none.
WITH picked AS (
    SELECT p.id FROM {_bands} AS b
    CROSS JOIN LATERAL (
        SELECT m.id FROM {meta} AS m
        WHERE m.state = {state_ready} AND m.priority = b.priority AND m.run_at >= b.run_at
          AND m.run_at <= least(statement_timestamp(), %(due_by)s::timestamptz)
          AND m.id <= coalesce(%(until)s::bigint, m.id)
        ORDER BY m.run_at, m.id
        LIMIT %(n)s
        FOR UPDATE OF m SKIP LOCKED
    ) AS p
    ORDER BY b.priority DESC
    LIMIT %(n)s
)
UPDATE {meta} AS m
SET state = {state_leased}, attempts = m.attempts + 1,
    lease_until = statement_timestamp() + %(lease)s::interval
FROM picked
WHERE m.id = picked.id AND m.id = ANY(ARRAY(SELECT id FROM picked))  -- by key: see split.sql
RETURNING m.id, m.attempts;

-- spark_target_split --
-- Where an available-now query over a split queue stops: the newest item due now, and now.
SELECT max(id), statement_timestamp() FROM {meta}
WHERE state = {state_ready} AND run_at <= statement_timestamp();

-- spark_numbers_ring --
-- A ring's next push number and next pop number (as ring.sql's _push_next and _pop_next):
-- an available-now query stops at the last number handed out at its start.
SELECT (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {push_seq_rel}),
       (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {pop_seq_rel});
