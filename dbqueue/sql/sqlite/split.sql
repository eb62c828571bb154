-- The split layout on SQLite (>= 3.35 for RETURNING). SQLite has no data-modifying CTEs, so an
-- operation that changes both tables is a short block of statements that the core runs in one
-- transaction (BEGIN IMMEDIATE, or a savepoint inside the caller's). SQLite runs in-process:
-- a statement costs a function call, not a round trip. SQLite has one writer at a time, so
-- there is nothing to SKIP LOCKED. Blocks start with a write, so a deferred transaction takes
-- the write lock at once instead of failing to upgrade a read lock later.
-- In a block, after the statement that returns rows, :ids is bound to the JSON array of the
-- first column of those rows. Times are bound from Python (:now etc.) as UTC text.

-- split_push --
INSERT INTO {data} ({insert_columns})
VALUES ({payload_params}:now);
INSERT INTO {meta} (id, state, priority, run_at, attempts)
VALUES (last_insert_rowid(), {state_ready}, :priority, :run_at, 0)
RETURNING id;

-- split_push_many --
-- No array parameters: the core runs this block once per row inside one transaction.
INSERT INTO {data} ({insert_columns})
VALUES ({payload_params}:now);
INSERT INTO {meta} (id, state, priority, run_at, attempts)
VALUES (last_insert_rowid(), {state_ready}, :priority, :run_at, 0)
RETURNING id;

-- split_push_unique --
-- See postgresql/split.sql. The first INSERT makes this connection SQLite's one writer. The
-- meta row first, unless an item holds the key (INSERT OR IGNORE), with the next id of the
-- data table's AUTOINCREMENT (sqlite_sequence, the largest id it ever handed out); the data row
-- only if the meta row was written (changes()). One row: the id (NULL for a duplicate), the
-- key as stored, and the holder of a duplicate's key.
INSERT OR IGNORE INTO {meta} (id, state, priority, run_at, attempts, unique_key)
VALUES ({next_data_id}, {state_ready}, :priority, :run_at, 0, {unique_value});
INSERT INTO {data} (id, {insert_columns})
SELECT {next_data_id}, {payload_params}:now WHERE changes() = 1;
SELECT CASE WHEN changes() = 1 THEN (SELECT seq FROM sqlite_sequence WHERE name = :table) END AS id,
       {unique_value} AS key,
       (SELECT h.id FROM {meta} AS h WHERE h.unique_key = {unique_value} AND {unique_held}) AS holder;

-- split_unique_holders --
SELECT id, unique_key FROM {meta}
WHERE unique_key IN (SELECT value FROM json_each(:keys)) AND {unique_held};

-- _picked --
-- A fragment of every pop: the due items in delivery order (SQLite has one writer: nothing to
-- skip).
SELECT id FROM {meta}
WHERE state = {state_ready} AND run_at <= :now
ORDER BY priority DESC, run_at, id
LIMIT :n

-- split_pop_leased --
-- Correlated subqueries in RETURNING read the payload by primary key in the same statement
-- (RETURNING cannot see a table alias, hence the table's own name in them).
UPDATE {meta}
SET state = {state_leased}, attempts = attempts + 1, lease_until = :lease_until{release_key}
WHERE id IN ({_picked})
RETURNING id, attempts, priority, run_at, lease_until,
          (SELECT d.enqueued_at FROM {data} AS d WHERE d.id = {meta}.id),
          {error}{m_payload};

-- split_pop_remove --
DELETE FROM {meta}
WHERE id IN ({_picked})
RETURNING id, attempts + 1, priority, run_at, NULL,
          (SELECT d.enqueued_at FROM {data} AS d WHERE d.id = {meta}.id),
          {error}{m_payload};
DELETE FROM {data} AS d WHERE d.id IN (SELECT value FROM json_each(:ids)) AND {data_unheld};

-- split_pop_done --
-- split_pop_remove for a queue with keep_done: the picked rows are marked done, their attempt
-- counted, their data rows kept. RETURNING reports the updated row, so run_at (the due time
-- the message carries and is ordered by) is overwritten with the finish time by a second
-- statement of the block.
UPDATE {meta}
SET state = {state_done}, attempts = attempts + 1, lease_until = NULL
WHERE id IN ({_picked})
RETURNING id, attempts, priority, run_at, NULL,
          (SELECT d.enqueued_at FROM {data} AS d WHERE d.id = {meta}.id),
          {error}{m_payload};
UPDATE {meta} SET run_at = :now WHERE id IN (SELECT value FROM json_each(:ids));

-- _held_tokens --
-- A fragment of ack and fail: the rows of `tok` still leased under their token (cancelling
-- ones too); `allowed` is all of them, or none when strict and any is missing.
mine AS (
    SELECT m.id FROM {meta} AS m JOIN tok ON tok.id = m.id
    WHERE m.state IN ({state_leased}, {state_cancelling})
      AND m.attempts = COALESCE(tok.attempts, m.attempts)
), allowed AS (
    SELECT id FROM mine WHERE NOT :strict OR (SELECT count(*) FROM mine) = :count
)

-- _ack_held --
-- A fragment of every ack: the tokens (id, attempts) and the rows still held under them.
tok AS (
    SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempts
    FROM json_each(:tokens)
), {_held_tokens}

-- split_ack --
-- The leased rows of the tokens; the cancelling ones are left to split_ack_cancelling, which
-- the core runs only when an ack took fewer rows than it was given (see postgresql/split.sql).
WITH {_ack_held}
DELETE FROM {meta}
WHERE id IN (SELECT id FROM allowed) AND state = {state_leased}
RETURNING id;
DELETE FROM {data} AS d WHERE d.id IN (SELECT value FROM json_each(:ids)) AND {data_unheld};

-- split_ack_cancelling --
-- The rest of an ack that took fewer rows than it was given: the held cancelling rows of the
-- tokens kept, cancelled, with run_at = when they finished (as a failed row).
WITH {_ack_held}
UPDATE {meta}
SET state = {state_cancelled}, run_at = :now, lease_until = NULL
WHERE id IN (SELECT id FROM allowed) AND state = {state_cancelling}
RETURNING id;

-- split_ack_done --
-- split_ack for a queue with keep_done: marked done (state 2), run_at = when it finished; the
-- data row and attempts stay for the archive job. A cancelling row is cancelled.
WITH {_ack_held}
UPDATE {meta}
SET state = CASE WHEN state = {state_cancelling} THEN {state_cancelled} ELSE {state_done} END,
    run_at = :now, lease_until = NULL
WHERE id IN (SELECT id FROM allowed)
RETURNING id;

-- split_fail --
WITH tok AS (
    SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempts,
           json_extract(value, '$[2]') AS run_at
    FROM json_each(:tokens)
), {_held_tokens}
UPDATE {meta} AS m
SET state = CASE WHEN state = {state_cancelling} THEN {state_cancelled}
                 WHEN attempts >= :max_attempts THEN {state_failed}
                 ELSE {state_ready} END,
    run_at = CASE WHEN state = {state_cancelling} OR attempts >= :max_attempts THEN :now
                  ELSE (SELECT tok.run_at FROM tok WHERE tok.id = m.id) END,
    lease_until = NULL
WHERE id IN (SELECT id FROM allowed)
RETURNING id, state;
UPDATE {error_table}
SET last_error = (SELECT json_extract(t.value, '$[3]') FROM json_each(:tokens) AS t
                  WHERE json_extract(t.value, '$[0]') = {error_table}.id)
WHERE id IN (SELECT value FROM json_each(:ids));

-- split_extend --
UPDATE {meta} AS m
SET lease_until = :lease_until
WHERE state IN ({state_leased}, {state_cancelling}) AND EXISTS (
    SELECT 1 FROM json_each(:tokens) AS t
    WHERE json_extract(t.value, '$[0]') = m.id
      AND COALESCE(json_extract(t.value, '$[1]'), m.attempts) = m.attempts
)
RETURNING id;

-- split_release --
-- See postgresql/split.sql.
UPDATE {meta} AS m
SET state = CASE WHEN state = {state_cancelling} THEN {state_cancelled} ELSE {state_ready} END,
    run_at = CASE WHEN state = {state_cancelling} THEN :now ELSE run_at END,
    lease_until = NULL, attempts = m.attempts - 1
WHERE state IN ({state_leased}, {state_cancelling}) AND EXISTS (
    SELECT 1 FROM json_each(:tokens) AS t
    WHERE json_extract(t.value, '$[0]') = m.id
      AND COALESCE(json_extract(t.value, '$[1]'), m.attempts) = m.attempts
)
RETURNING id;

-- split_not_leased --
SELECT json_extract(t.value, '$[0]')
FROM json_each(:tokens) AS t
WHERE NOT EXISTS (
    SELECT 1 FROM {meta} AS m
    WHERE m.id = json_extract(t.value, '$[0]') AND m.state IN ({state_leased}, {state_cancelling})
      AND m.attempts = COALESCE(json_extract(t.value, '$[1]'), m.attempts)
);

-- split_retry --
UPDATE {meta}
SET state = {state_ready}, attempts = 0, run_at = :now, lease_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = {state_failed} AND {unique_free}
RETURNING id;

-- split_set_priority --
UPDATE {meta} SET priority = :priority
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id;

-- split_rescue --
-- SQLite serialises writers, so two rescuers simply run one after the other. An expired
-- cancelling lease is left as it is (see postgresql/split.sql).
UPDATE {meta}
SET state = CASE WHEN attempts >= :max_attempts THEN {state_failed} ELSE {state_ready} END,
    run_at = :now, lease_until = NULL
WHERE id IN (
    SELECT id FROM {meta}
    WHERE state = {state_leased} AND lease_until < :now
    ORDER BY lease_until
    LIMIT :n
)
RETURNING id, state;
UPDATE {error_table} SET last_error = :error WHERE id IN (SELECT value FROM json_each(:ids));

-- split_next_due --
-- See postgresql/split.sql (SQLite's two-argument min() is NULL if either is).
SELECT CASE WHEN l IS NULL OR r < l THEN r ELSE l END AS due
FROM (SELECT (SELECT min(run_at) FROM {meta} WHERE state = {state_ready}) AS r,
             (SELECT min(lease_until) FROM {meta} WHERE state = {state_leased}) AS l);

-- split_stats --
-- The columns of dbqueue.rows.StatsRow: slots, in_slots and spilled are a ring's, NULL here.
SELECT coalesce(sum(state = {state_ready} AND run_at <= :now), 0),
       coalesce(sum(state = {state_ready} AND run_at > :now), 0),
       coalesce(sum(state = {state_leased}
                    OR state = {state_cancelling} AND lease_until >= :now), 0),
       coalesce(sum(state = {state_leased} AND lease_until < :now), 0),
       coalesce(sum(state = {state_done}), 0),
       coalesce(sum(state = {state_failed}), 0),
       min(CASE WHEN state = {state_ready} AND run_at <= :now THEN run_at END),
       :now, NULL AS slots, NULL AS in_slots, NULL AS spilled,
       coalesce(sum(state = {state_cancelled}
                    OR state = {state_cancelling} AND lease_until < :now), 0)
FROM {meta};

-- split_pushed --
-- See postgresql/split.sql: AUTOINCREMENT keeps the largest id ever used in sqlite_sequence
-- (no row before the first push).
SELECT (SELECT seq FROM sqlite_sequence WHERE name = :table) AS value;

-- _purged --
-- See postgresql/split.sql (a meta row's columns by their bare names here: the table is not
-- aliased, and the data row's sub-select names it).
(:state IS NULL OR state = :state
 OR state = {state_cancelling}
    AND :state = CASE WHEN lease_until < :now THEN {state_cancelled} ELSE {state_leased} END)
AND (:due IS NULL OR (run_at <= :now) = :due)
AND (:before IS NULL
     OR CASE WHEN state IN ({state_done}, {state_failed}, {state_cancelled}) THEN run_at
             ELSE (SELECT d.enqueued_at FROM {data} AS d WHERE d.id = {meta}.id) END < :before)

-- split_purge --
DELETE FROM {meta}
WHERE {_purged}
RETURNING id;
DELETE FROM {data} AS d WHERE d.id IN (SELECT value FROM json_each(:ids)) AND {data_unheld};

-- split_count --
SELECT count(*) AS value FROM {meta} WHERE {_purged};

-- split_cancel --
-- See postgresql/split.sql (one writer: nothing to lock). Only the rows it changed come back:
-- the core reads the others' states with split_states in the same transaction.
UPDATE {meta}
SET state = CASE WHEN state = {state_ready} THEN {state_cancelled} ELSE {state_cancelling} END,
    run_at = CASE WHEN state = {state_ready} THEN :now ELSE run_at END
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ({state_ready}, {state_leased})
RETURNING id, state, 1 AS changed;

-- split_states --
-- The state of items by id (the rows of split_cancel that it left as they were).
SELECT id, state, 0 AS changed FROM {meta} WHERE id IN (SELECT value FROM json_each(:ids));

-- split_cancel_requested --
SELECT state IN ({state_cancelling}, {state_cancelled}) AS value FROM {meta} WHERE id = :id;

-- split_delete --
DELETE FROM {meta} WHERE id IN (SELECT value FROM json_each(:ids)) RETURNING id;
DELETE FROM {data} AS d WHERE d.id IN (SELECT value FROM json_each(:ids)) AND {data_unheld};

-- split_notify --
-- SQLite has no LISTEN/NOTIFY: workers poll. Defined so that every dialect has the same
-- statements; the core never runs it (Dialect.supports_listen_notify is False).
SELECT :channel WHERE 0;
