-- The split layout on PostgreSQL. Every operation is ONE statement (one round trip, prepared
-- once per connection): data-modifying CTEs keep the meta and data tables consistent without a
-- foreign key, which in other queues has caused deadlocks under batch dequeue.
-- Times come from statement_timestamp(), not now(): now() is the start of the caller's
-- transaction, and a lease or a due check inside a long transaction must use the present.
-- Placeholders in braces are identifiers from a validated QueueSpec, quoted by the dialect.
-- Pops join the data rows with LEFT JOIN: a meta row whose data row was deleted outside dbqueue
-- comes back with NULLs, and dbqueue.split removes it (an inner join would lease it unseen).
-- Every statement that joins a table with a CTE by id (`FROM picked WHERE m.id = picked.id`,
-- `m LEFT JOIN data AS d ON d.id = m.id`) also says `m.id = ANY(ARRAY(SELECT id FROM picked))`,
-- so its rows are found by key whatever the planner believes: its statistics count live rows,
-- and a queue's table holds a few, so it may read the whole primary key and join that to the
-- CTE instead (once for each row, when it is the inner side of a nested loop). While a long
-- transaction holds the horizon that key keeps an entry for every version since: a pop of 10
-- read 74,000 pages, took 30 to 130 ms, and the queue served 130 msg/s for 15 s at a time
-- (auto_explain, a 150-s snapshot at 1,000 msg/s).

-- _data_row --
-- A fragment of the single pushes: the data row, its id as `d`.
d AS (
    INSERT INTO {data} ({insert_columns})
    VALUES ({payload_params}statement_timestamp())
    RETURNING id
)

-- _data_rows --
-- A fragment of the batch pushes: the data rows, one array per column unnested in input
-- order, their ids as `d`. Identity values are taken in that order, so ids sorted ascending
-- are the input order.
d AS (
    INSERT INTO {data} ({insert_columns})
    SELECT {r_payload}statement_timestamp()
    FROM {unnest_source}
    ORDER BY r.ord
    RETURNING id
)

-- _pushed_head --
-- A fragment of the pushes: what a push does to the head table ({heads}; see
-- dbqueue.upkeep.heads). A priority other than 0 gets its row, read from its start (a pop
-- reaches a priority only through its row; 0 from its start without one). An explicit run_at
-- in the past lowers its head (rows locked, so that an advance running meanwhile, which may
-- already have passed that time, gives up): a default run_at is never behind a head.
band AS (
    INSERT INTO {heads} (priority, run_at)
    SELECT %(priority)s::smallint, '-infinity'::timestamptz
    WHERE %(priority)s::smallint <> 0 OR %(run_at)s::timestamptz < {_clock}
    ON CONFLICT (priority) DO NOTHING
), lowered AS (
    UPDATE {heads} AS h SET run_at = LEAST(h.run_at, %(run_at)s::timestamptz)
    WHERE h.priority = %(priority)s::smallint AND %(run_at)s::timestamptz < {_clock}
)

-- split_push --
WITH {_data_row}, {_pushed_head}
INSERT INTO {meta} (id, state, priority, run_at, attempts)
SELECT d.id, {state_ready}, %(priority)s,
       COALESCE(%(run_at)s::timestamptz, {_clock} + %(delay)s::interval), 0
FROM d
RETURNING id;

-- split_push_many --
-- One statement per batch (see _data_rows).
WITH {_data_rows}, {_pushed_head}, m AS (
    INSERT INTO {meta} (id, state, priority, run_at, attempts)
    SELECT d.id, {state_ready}, %(priority)s,
           COALESCE(%(run_at)s::timestamptz, {_clock} + %(delay)s::interval), 0
    FROM d
)
SELECT id FROM d ORDER BY id;

-- split_push_unique --
-- A push into a unique queue (dbqueue.unique): the meta row first, its id taken from the data
-- table's identity sequence (%(id_seq)s, which dbqueue.split reads once: looking it up in every
-- push, pg_get_serial_sequence() cost a single push 12 %), and skipped (ON CONFLICT DO
-- NOTHING) when an item holds the key: the unique index makes a concurrent pusher of the same
-- key wait for this transaction, then skip. The data row follows only a meta row written. One
-- row: the id written (NULL for a duplicate), the key as stored, and the holder if this
-- statement's snapshot sees it (the usual duplicate, of an item pushed before; NULL for one
-- whose pusher committed while this statement waited, which dbqueue.split then reads).
WITH k AS (
    SELECT {unique_value} AS key
), {_pushed_head}, m AS (
    INSERT INTO {meta} (id, state, priority, run_at, attempts, unique_key)
    SELECT nextval(%(id_seq)s::regclass), {state_ready}, %(priority)s,
           COALESCE(%(run_at)s::timestamptz, {_clock} + %(delay)s::interval), 0, k.key
    FROM k
    ON CONFLICT DO NOTHING
    RETURNING id
), d AS (
    INSERT INTO {data} (id, {insert_columns})
    SELECT m.id, {payload_params}statement_timestamp() FROM m
    RETURNING id
)
SELECT d.id, k.key,
       (SELECT h.id FROM {meta} AS h WHERE h.unique_key = k.key AND {unique_held}) AS holder
FROM k LEFT JOIN d ON true;

-- split_unique_id_sequence --
-- The data table's identity sequence, for the unique pushes' ids (one look per queue and
-- database, see split_push_unique).
SELECT pg_get_serial_sequence({data_name}, 'id') AS value;

-- split_push_many_unique --
-- split_push_unique for a batch: one array per column and one of keys, in input order; a row
-- whose key an item holds, or an earlier row of the batch took, is skipped. One row per input
-- row, in input order: its id (NULL when skipped) and key. No join between the CTEs: the
-- planner's guess of a join's rows multiplies, and at its guess of millions PostgreSQL's JIT
-- compiled the statement for a second per batch of 1,000 (IN keeps every guess at the batch's).
WITH r AS (
    SELECT s.*, nextval(%(id_seq)s::regclass) AS id
    FROM (
        SELECT r.*, {unique_value_r} AS stored_key FROM {keyed_source} ORDER BY r.ord
    ) AS s
), {_pushed_head}, m AS (
    INSERT INTO {meta} (id, state, priority, run_at, attempts, unique_key)
    SELECT r.id, {state_ready}, %(priority)s,
           COALESCE(%(run_at)s::timestamptz, {_clock} + %(delay)s::interval), 0,
           r.stored_key
    FROM r ORDER BY r.ord
    ON CONFLICT DO NOTHING
    RETURNING id
), d AS (
    INSERT INTO {data} (id, {insert_columns})
    SELECT r.id, {r_payload}statement_timestamp() FROM r WHERE r.id IN (SELECT id FROM m)
    ORDER BY r.ord
    RETURNING id
)
SELECT CASE WHEN r.id IN (SELECT id FROM d) THEN r.id END, r.stored_key FROM r ORDER BY r.ord;

-- split_unique_holders --
-- The items that hold these keys now (a duplicate push returns them).
SELECT id, unique_key FROM {meta}
WHERE unique_key = ANY(%(keys)s::text[]) AND {unique_held};

-- _picked --
-- A fragment of every pop: the due items in delivery order, locked, skipping rows other
-- poppers hold. Priority by priority, highest first, each read from its head (_bands), in a
-- nested loop that stops at the n-th row: a lower priority is read only when the higher ones
-- had fewer than n. LIMIT ... FOR UPDATE SKIP LOCKED sits in the lateral sub-select: inside
-- IN (...) the planner may run a subquery again and lock more rows than asked for. run_at is
-- the due time split_pop_done returns and orders by (it overwrites the column).
picked AS (
    SELECT p.id, p.run_at FROM {_bands} AS b
    CROSS JOIN LATERAL (
        SELECT m.id, m.run_at FROM {meta} AS m
        WHERE m.state = {state_ready} AND m.priority = b.priority
          AND m.run_at >= b.run_at AND m.run_at <= statement_timestamp()
        ORDER BY m.run_at, m.id
        LIMIT %(n)s
        FOR UPDATE OF m SKIP LOCKED
    ) AS p
    ORDER BY b.priority DESC
    LIMIT %(n)s
)

-- _leased --
-- A fragment of both leasing pops: the picked rows leased, one more attempt counted.
m AS (
    UPDATE {meta} AS m
    SET state = {state_leased}, attempts = m.attempts + 1,
        lease_until = statement_timestamp() + %(lease)s::interval{release_key}
    FROM picked
    WHERE m.id = picked.id AND m.id = ANY(ARRAY(SELECT id FROM picked)) AND {_relaxed}
    RETURNING m.id, m.attempts, m.priority, m.run_at, m.lease_until{m_error}
)

-- split_pop_leased --
WITH {_picked}, {_leased}
SELECT m.id, m.attempts, m.priority, m.run_at, m.lease_until, d.enqueued_at, {error}{d_payload}
FROM m LEFT JOIN {data} AS d ON d.id = m.id AND d.id = ANY(ARRAY(SELECT id FROM m))
ORDER BY m.priority DESC, m.run_at, m.id;

-- split_pop_remove --
-- at_most_once (autocommit) and transactional (inside the caller's transaction) share this:
-- the difference is only who commits.
WITH {_picked}, m AS (
    DELETE FROM {meta} AS m USING picked
    WHERE m.id = picked.id AND m.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING m.id, m.attempts, m.priority, m.run_at
), d AS (
    DELETE FROM {data} AS d USING m
    WHERE d.id = m.id AND d.id = ANY(ARRAY(SELECT id FROM m))
    RETURNING d.*
)
SELECT m.id, m.attempts + 1, m.priority, m.run_at, NULL::timestamptz, d.enqueued_at, d.last_error{d_payload}
FROM m LEFT JOIN d ON d.id = m.id
ORDER BY m.priority DESC, m.run_at, m.id;

-- split_pop_done --
-- split_pop_remove for a queue with keep_done: the picked rows are marked done (state 2) in
-- the same statement, their attempt counted, their data rows kept for the archive job. As for
-- a failed row, run_at records when the item left the queue; the message carries its due time.
WITH {_picked}, m AS (
    UPDATE {meta} AS m
    SET state = {state_done}, attempts = m.attempts + 1, run_at = statement_timestamp(),
        lease_until = NULL
    FROM picked
    WHERE m.id = picked.id AND m.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING m.id, m.attempts, m.priority, picked.run_at{m_error}
)
SELECT m.id, m.attempts, m.priority, m.run_at, NULL::timestamptz, d.enqueued_at, {error}{d_payload}
FROM m LEFT JOIN {data} AS d ON d.id = m.id AND d.id = ANY(ARRAY(SELECT id FROM m))
ORDER BY m.priority DESC, m.run_at, m.id;

-- _held_tokens --
-- A fragment of ack and fail (a block named with a leading underscore): the rows of `tok`
-- still leased under their token (id, attempts), so a worker whose lease expired cannot ack
-- or fail the redelivered copy. Locked in id order, so overlapping acks cannot deadlock.
-- `allowed` is all of them, or none when strict and any is missing. A cancelling row is
-- leased too; `state` tells the two apart (ack and fail record it cancelled). The rows are
-- found by key (`id = ANY`): with two states, which no partial index covers, the prepared plan
-- read the meta table whole, and an ack of one took twice as long.
mine AS (
    SELECT m.id, m.state FROM {meta} AS m JOIN tok ON tok.id = m.id
    WHERE m.id = ANY(ARRAY(SELECT id FROM tok)) AND m.state IN ({state_leased}, {state_cancelling})
      AND m.attempts = COALESCE(tok.attempts, m.attempts)
    ORDER BY m.id
    FOR UPDATE OF m
), allowed AS (
    SELECT id, state FROM mine
    WHERE NOT %(strict)s OR (SELECT count(*) FROM mine) = %(count)s
)

-- _ack_held --
-- A fragment of every ack: the tokens (id, attempts) and the rows still held under them.
tok AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(attempts)b::smallint[]) AS t(id, attempts)
), {_held_tokens}

-- _acked --
-- A fragment of ack and ack_pop: the leased rows of the tokens still held, deleted from both
-- tables. A held row whose cancellation was requested is left to split_ack_cancelling, which
-- the core runs only when an ack took fewer rows than it was given: the hot path stays these
-- two deletes (a third CTE here for the cancelling rows cost every ack a third of its time).
{_ack_held}, acked AS (
    DELETE FROM {meta} AS m USING allowed
    WHERE m.id = allowed.id AND m.id = ANY(ARRAY(SELECT id FROM allowed))
      AND allowed.state = {state_leased} AND {_relaxed}
    RETURNING m.id
), acked_d AS (
    DELETE FROM {data} AS d USING acked
    WHERE d.id = acked.id AND d.id = ANY(ARRAY(SELECT id FROM acked)) AND {data_unheld}
)

-- split_ack_cancelling --
-- The rest of an ack that took fewer rows than it was given (dbqueue.split.SplitQueue): the
-- held rows whose cancellation was requested, kept and cancelled, with run_at = when they
-- finished (as a failed row). Strict like the ack: every token held, or none taken.
WITH {_ack_held}
UPDATE {meta} AS m
SET state = {state_cancelled}, run_at = statement_timestamp(), lease_until = NULL
FROM allowed
WHERE m.id = allowed.id AND m.id = ANY(ARRAY(SELECT id FROM allowed))
  AND allowed.state = {state_cancelling} AND {_relaxed}
RETURNING m.id;

-- _acked_done --
-- _acked for a queue with keep_done: the rows of the tokens still held, marked done (state 2)
-- with run_at = when they finished; their data rows and attempts stay for the archive job.
{_ack_held}, acked AS (
    UPDATE {meta} AS m
    SET state = CASE WHEN allowed.state = {state_cancelling} THEN {state_cancelled}
                     ELSE {state_done} END,
        run_at = statement_timestamp(), lease_until = NULL
    FROM allowed
    WHERE m.id = allowed.id AND m.id = ANY(ARRAY(SELECT id FROM allowed)) AND {_relaxed}
    RETURNING m.id
)

-- _ack_then_lease --
-- The rest of ack_pop after its ack (`acked`): lease the next batch. The ack's rows are leased
-- (state 1), the pick reads ready rows (state 0). The first row carries the number acked; with
-- nothing to pop it is the only row, its other columns NULL.
-- The pick waits for the ack to finish (`acked_first`): a pick that meets, through a stale
-- index entry, a row another consumer has just leased locks that row's new version before it
-- finds it no longer ready, and keeps the lock to the end of the statement. Were the ack and
-- the pick interleaved, two consumers' acks could each wait for a row the other's pick holds:
-- a deadlock (seen under four pairs in the bench). Acked first, an ack never waits for a
-- consumer that is itself waiting.
acked_first AS (
    SELECT count(*) AS n FROM acked
), picked AS (
    SELECT p.id, p.run_at FROM {_bands} AS b
    CROSS JOIN LATERAL (
        SELECT m.id, m.run_at FROM {meta} AS m
        WHERE m.state = {state_ready} AND m.priority = b.priority
          AND m.run_at >= b.run_at AND m.run_at <= statement_timestamp()
          AND (SELECT n FROM acked_first) >= 0
        ORDER BY m.run_at, m.id
        LIMIT %(n)s
        FOR UPDATE OF m SKIP LOCKED
    ) AS p
    ORDER BY b.priority DESC
    LIMIT %(n)s
), {_leased}, popped AS (
    SELECT m.id, m.attempts, m.priority, m.run_at, m.lease_until, d.enqueued_at, {error}{d_payload}
    FROM m LEFT JOIN {data} AS d ON d.id = m.id AND d.id = ANY(ARRAY(SELECT id FROM m))
)
SELECT (SELECT count(*) FROM acked), popped.*
FROM (SELECT 1) AS one LEFT JOIN popped ON true
ORDER BY popped.priority DESC, popped.run_at, popped.id

-- split_ack --
WITH {_acked}
SELECT id FROM acked;

-- split_ack_done --
WITH {_acked_done}
SELECT id FROM acked;

-- split_ack_pop --
-- A worker's loop in one statement, one commit: ack the batch just handled (what is still
-- leased under its token) and lease the next.
WITH {_acked}, {_ack_then_lease};

-- split_ack_pop_done --
-- split_ack_pop for a queue with keep_done.
WITH {_acked_done}, {_ack_then_lease};

-- split_fail --
-- Back to ready after the back-off delay computed by the caller, or failed (state 3) once
-- attempts reached max_attempts; the error text goes to the data table. For a failed row,
-- run_at records when it failed. A cancelling row is cancelled, never retried (run_at: when).
WITH tok AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(attempts)b::smallint[], %(delays)b::interval[],
                         %(errors)b::text[]) AS t(id, attempts, delay, error)
), {_held_tokens}, m AS (
    UPDATE {meta} AS m
    SET state = CASE WHEN allowed.state = {state_cancelling} THEN {state_cancelled}
                     WHEN m.attempts >= %(max_attempts)s THEN {state_failed}
                     ELSE {state_ready} END,
        run_at = CASE WHEN allowed.state = {state_cancelling} OR m.attempts >= %(max_attempts)s
                      THEN statement_timestamp()
                      ELSE {_clock} + tok.delay END,
        lease_until = NULL{set_error_tok}
    FROM allowed JOIN tok ON tok.id = allowed.id
    WHERE m.id = allowed.id AND m.id = ANY(ARRAY(SELECT id FROM allowed))
    RETURNING m.id, m.state
), d AS (
    UPDATE {data} AS d SET last_error = tok.error
    FROM m JOIN tok ON tok.id = m.id
    WHERE d.id = m.id AND d.id = ANY(ARRAY(SELECT id FROM m)) AND {shared_errors}
)
SELECT id, state FROM m;

-- _held_in_order --
-- A fragment of extend and release: the rows of `tok` still leased under their token, locked
-- in id order as ack and fail lock them (_held_tokens). A batch is popped in priority order,
-- not id order: locked in batch order, a worker's lease thread extending it and its handler
-- thread acking it could deadlock, and the losing ack's item was delivered again. A
-- cancelling row is leased too.
mine AS (
    SELECT m.id FROM {meta} AS m JOIN tok ON tok.id = m.id
    WHERE m.id = ANY(ARRAY(SELECT id FROM tok)) AND m.state IN ({state_leased}, {state_cancelling})
      AND m.attempts = COALESCE(tok.attempts, m.attempts)
    ORDER BY m.id
    FOR UPDATE OF m
)

-- split_extend --
-- Heartbeat: a worker still busy with its batch pushes the leases it holds further out (a
-- cancelling row stays cancelling).
WITH tok AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(attempts)b::smallint[]) AS t(id, attempts)
), {_held_in_order}
UPDATE {meta} AS m
SET lease_until = statement_timestamp() + %(lease)s::interval
FROM mine
WHERE m.id = mine.id AND m.id = ANY(ARRAY(SELECT id FROM mine))
  AND m.state IN ({state_leased}, {state_cancelling})
RETURNING m.id;

-- split_release --
-- Leased items handed back unstarted (a worker stopping): ready again at once and first in
-- line as before (run_at unchanged, so their priorities' heads are lowered to it), the attempt
-- their pop counted taken back. A cancelling one is cancelled instead (run_at: when).
WITH tok AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(attempts)b::smallint[]) AS t(id, attempts)
), {_held_in_order}, released AS (
    UPDATE {meta} AS m
    SET state = CASE WHEN m.state = {state_cancelling} THEN {state_cancelled} ELSE {state_ready} END,
        run_at = CASE WHEN m.state = {state_cancelling} THEN statement_timestamp() ELSE m.run_at END,
        lease_until = NULL, attempts = m.attempts - 1
    FROM mine
    WHERE m.id = mine.id AND m.id = ANY(ARRAY(SELECT id FROM mine))
      AND m.state IN ({state_leased}, {state_cancelling})
    RETURNING m.id, m.state, m.priority, m.run_at
), low AS (
    SELECT priority, min(run_at) AS run_at FROM released WHERE state = {state_ready}
    GROUP BY priority
), {_lowered}
SELECT id FROM released;

-- split_not_leased --
-- Diagnosis for NotLeased errors only (never on the hot path).
SELECT t.id
FROM unnest(%(ids)b::bigint[], %(attempts)b::smallint[]) AS t(id, attempts)
LEFT JOIN {meta} AS m
  ON m.id = t.id AND m.state IN ({state_leased}, {state_cancelling})
  AND m.attempts = COALESCE(t.attempts, m.attempts)
WHERE m.id IS NULL;

-- split_retry --
-- In a unique queue, an item whose key another item holds now stays failed ({unique_free}):
-- a retry must not make a second item of one key.
UPDATE {meta}
SET state = {state_ready}, attempts = 0, run_at = {_clock}, lease_until = NULL
WHERE id = ANY(%(ids)b::bigint[]) AND state = {state_failed} AND {unique_free}
RETURNING id;

-- split_set_priority --
-- Any state: a ready item moves in the delivery order (with its due time: the new priority's
-- head is lowered to it), a failed one keeps it for its retry.
WITH moved AS (
    UPDATE {meta} SET priority = %(priority)s
    WHERE id = ANY(%(ids)b::bigint[])
    RETURNING id, state, run_at
), low AS (
    SELECT %(priority)s::smallint AS priority, min(run_at) AS run_at FROM moved
    WHERE state = {state_ready}
    HAVING count(*) > 0
), {_lowered}
SELECT id FROM moved;

-- split_rescue --
-- One rescuer at a time per queue: a transaction-scoped advisory lock, tried not awaited.
-- Small batches (LIMIT) keep each run short; the caller loops. A cancelling row whose lease
-- expired is left as it is: it counts as cancelled from then on (see split_stats), and no
-- pop reads it. Rewriting it would need to find it, and no index reaches state 6 (queues
-- get no DDL for cancellation): a scan of the meta table on every rescue.
WITH lock AS (
    SELECT pg_try_advisory_xact_lock(%(lock_key)s) AS got
), expired AS (
    SELECT m.id FROM {meta} AS m
    WHERE m.state = {state_leased} AND m.lease_until < statement_timestamp() AND (SELECT got FROM lock)
    ORDER BY m.lease_until
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), m AS (
    UPDATE {meta} AS m
    SET state = CASE WHEN m.attempts >= %(max_attempts)s THEN {state_failed} ELSE {state_ready} END,
        run_at = {_clock}, lease_until = NULL{set_error}
    FROM expired
    WHERE m.id = expired.id AND m.id = ANY(ARRAY(SELECT id FROM expired))
    RETURNING m.id, m.state
), d AS (
    UPDATE {data} AS d SET last_error = %(error)s
    FROM m
    WHERE d.id = m.id AND d.id = ANY(ARRAY(SELECT id FROM m)) AND {shared_errors}
)
SELECT id, state FROM m;

-- split_next_due --
-- When an idle worker next has work that no push will announce: the earliest run_at of a
-- ready item (a delay, a retry's back-off; each priority read from its head) or expiry of a
-- lease (NULL: neither). Each sub-select reads one partial index. A cancelling lease that expires gives no work (see
-- split_rescue).
SELECT least((SELECT min(p.run_at) FROM {_bands} AS b
              CROSS JOIN LATERAL (
                  SELECT m.run_at FROM {meta} AS m
                  WHERE m.state = {state_ready} AND m.priority = b.priority
                    AND m.run_at >= b.run_at
                  ORDER BY m.run_at LIMIT 1) AS p),
             (SELECT min(lease_until) FROM {meta} WHERE state = {state_leased})) AS due;

-- split_stats --
-- The columns of dbqueue.rows.StatsRow: slots, in_slots and spilled are a ring's, NULL here.
-- A cancelling row counts as leased while its lease lasts, then as cancelled (split_rescue).
SELECT count(*) FILTER (WHERE state = {state_ready} AND run_at <= statement_timestamp()),
       count(*) FILTER (WHERE state = {state_ready} AND run_at > statement_timestamp()),
       count(*) FILTER (WHERE state = {state_leased}
                           OR state = {state_cancelling} AND lease_until >= statement_timestamp()),
       count(*) FILTER (WHERE state = {state_leased} AND lease_until < statement_timestamp()),
       count(*) FILTER (WHERE state = {state_done}),
       count(*) FILTER (WHERE state = {state_failed}),
       min(run_at) FILTER (WHERE state = {state_ready} AND run_at <= statement_timestamp()),
       statement_timestamp(), NULL::bigint AS slots, NULL::bigint AS in_slots,
       NULL::bigint AS spilled,
       count(*) FILTER (WHERE state = {state_cancelled}
                           OR state = {state_cancelling} AND lease_until < statement_timestamp())
FROM {meta};

-- split_pushed --
-- How many items were ever pushed: the last value the id column's identity sequence handed out
-- (NULL before the first push; a rolled-back push uses its number too). A metrics scrape reads
-- it; pushes happen in processes that count nothing themselves.
SELECT pg_sequence_last_value(pg_get_serial_sequence(quote_ident(%(table)s::text), 'id')) AS value;

-- _purged --
-- A fragment of split_purge and split_count: whether meta row `m` is one of the items
-- purge(state, older_than) takes (dbqueue.message.StateSelector; a NULL parameter takes any).
-- %(due)s tells ready (due now) from scheduled (due later), as split_stats counts them. An item
-- is older than %(older_than)s by when it finished if done or failed (run_at), else by when
-- it was pushed (its data row's enqueued_at). The condition is on the row itself, so a row
-- that changed state while the purge waited for its lock is looked at again. A cancelling row
-- is leased while its lease lasts, then cancelled, as split_stats counts it.
(%(state)s::smallint IS NULL OR m.state = %(state)s::smallint
 OR m.state = {state_cancelling}
    AND %(state)s::smallint = CASE WHEN m.lease_until < statement_timestamp()
                                   THEN {state_cancelled} ELSE {state_leased} END)
AND (%(due)s::boolean IS NULL OR (m.run_at <= statement_timestamp()) = %(due)s::boolean)
AND (%(older_than)s::interval IS NULL
     OR CASE WHEN m.state IN ({state_done}, {state_failed}, {state_cancelled}) THEN m.run_at
             ELSE (SELECT d.enqueued_at FROM {data} AS d WHERE d.id = m.id) END
        < statement_timestamp() - %(older_than)s::interval)

-- split_purge --
WITH p AS (
    DELETE FROM {meta} AS m
    WHERE {_purged}
    RETURNING m.id
), d AS (
    DELETE FROM {data} AS d USING p
    WHERE d.id = p.id AND d.id = ANY(ARRAY(SELECT id FROM p)) AND {data_unheld}
)
SELECT id FROM p;

-- split_count --
-- How many items split_purge would take now.
SELECT count(*) AS value FROM {meta} AS m WHERE {_purged};

-- split_cancel --
-- Cancel items by id: a ready one (due now or scheduled) is cancelled at once (run_at: when),
-- a leased one becomes cancelling; the others are left as they are. Locked in id order as
-- acks lock them, and awaited, not skipped: a pop holding one decides first, and the row's
-- state is read again once its lock is granted. Each row found comes back with its state
-- now and whether this statement changed it.
WITH target AS (
    SELECT id, state FROM {meta}
    WHERE id = ANY(%(ids)b::bigint[])
    ORDER BY id
    FOR UPDATE
), m AS (
    UPDATE {meta} AS m
    SET state = CASE WHEN target.state = {state_ready} THEN {state_cancelled}
                     ELSE {state_cancelling} END,
        run_at = CASE WHEN target.state = {state_ready} THEN statement_timestamp()
                      ELSE m.run_at END
    FROM target
    WHERE m.id = target.id AND m.id = ANY(ARRAY(SELECT id FROM target))
      AND target.state IN ({state_ready}, {state_leased})
    RETURNING m.id, m.state
)
SELECT target.id, COALESCE(m.state, target.state) AS state, m.id IS NOT NULL AS changed
FROM target LEFT JOIN m ON m.id = target.id;

-- split_states --
-- The state of items by id (what the core reads where split_cancel cannot return them all).
SELECT id, state, false AS changed FROM {meta} WHERE id = ANY(%(ids)b::bigint[]);

-- split_cancel_requested --
-- Whether an item's cancellation was requested (or it is cancelled): one primary-key lookup.
SELECT state IN ({state_cancelling}, {state_cancelled}) AS value FROM {meta} WHERE id = %(id)s;

-- _deleted --
-- The items %(ids)b names deleted, whatever their state (the data rows another consumer group
-- holds kept).
WITH m AS (
    DELETE FROM {meta}
    WHERE id = ANY(%(ids)b::bigint[])
    RETURNING id
), d AS (
    DELETE FROM {data} AS d
    WHERE d.id = ANY(%(ids)b::bigint[]) AND {data_unheld}
)
SELECT id FROM m

-- split_delete --
{_deleted};

-- split_notify --
-- Wakes the workers LISTENing on the queue's channel. Run in the pusher's transaction, so it is
-- delivered at commit (never for a rolled-back push); the core rate-limits it per process (see
-- QueueOptions.notify_interval): NOTIFY serialises committing transactions on a database-wide
-- lock, which must not happen for every message under load.
SELECT pg_notify(%(channel)s, '');

-- split_head_writers --
-- The first step of an advance of the heads (dbqueue.upkeep.heads): the clock now (%(cap)s of
-- the advance), then the transactions that hold a lock to write the meta table (a push, a pop,
-- anything that may make a row ready with a due time before the cap and not be visible yet).
-- pg_locks: readable by every role, fast-path locks included.
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS cap
)
SELECT clock.cap, ARRAY(
    SELECT DISTINCT l.virtualtransaction::text FROM pg_locks AS l
    WHERE l.locktype = 'relation' AND l.granted AND l.mode = 'RowExclusiveLock'
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.relation = '{meta}'::regclass
) AS writers
FROM clock;

-- split_head_writing --
-- How many of the transactions split_head_writers listed still hold their lock: the advance
-- waits for none.
SELECT count(*) FROM pg_locks AS l
WHERE l.locktype = 'relation' AND l.granted AND l.mode = 'RowExclusiveLock'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.relation = '{meta}'::regclass
  AND l.virtualtransaction::text = ANY(%(writers)s::text[]);

-- split_head_advance --
-- The advance itself (dbqueue.upkeep.heads), once every writer split_head_writers listed has
-- ended: each priority's head moved up to its first ready item, no further than %(cap)s (every
-- writer since then dates what it makes ready from after it, see _clock). A head a lowering
-- wrote since this statement read it (its xmin changed) is left for the next advance: this
-- statement's reading of the meta table may predate what the lowering made ready. Priority 0
-- gets its row here (its pushes do not write one).
WITH b AS (
    SELECT priority, run_at, xmin FROM {heads}
), n AS (
    SELECT b.priority, b.xmin, LEAST(%(cap)s::timestamptz, COALESCE((
        SELECT m.run_at FROM {meta} AS m
        WHERE m.state = {state_ready} AND m.priority = b.priority AND m.run_at >= b.run_at
        ORDER BY m.run_at LIMIT 1), %(cap)s::timestamptz)) AS run_at
    FROM b
), band AS (
    INSERT INTO {heads} (priority, run_at) VALUES (0, '-infinity') ON CONFLICT DO NOTHING
)
UPDATE {heads} AS h SET run_at = n.run_at
FROM n
WHERE h.priority = n.priority AND h.xmin = n.xmin AND n.run_at > h.run_at
RETURNING h.priority;

-- split_head_bands --
-- Every priority that has ready items gets its row in the head table, read from its start
-- (a safety net: a push writes its priority's row; one deleted by hand would hide its items).
-- The priorities found one after the other, each from the index, not by reading every row.
WITH RECURSIVE p AS (
    (SELECT priority FROM {meta} WHERE state = {state_ready} ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT m.priority FROM {meta} AS m
            WHERE m.state = {state_ready} AND m.priority < p.priority
            ORDER BY m.priority DESC LIMIT 1)
    FROM p WHERE p.priority IS NOT NULL
)
INSERT INTO {heads} (priority, run_at)
SELECT priority, '-infinity' FROM p WHERE priority IS NOT NULL
ON CONFLICT (priority) DO NOTHING
RETURNING priority;

-- split_size --
-- The bytes of the queue's tables ({table_oids}: the meta table or tables, the data table) with
-- their indexes and TOAST: what compaction watches.
SELECT sum(pg_total_relation_size(r)) FROM unnest(ARRAY[{table_oids}]) AS r;

-- split_vacuum --
-- Compaction's first step (dbqueue.upkeep.compaction): VACUUM removes from the queue's tables
-- what no snapshot may see any more, and leaves in pg_class what split_kept reads. SKIP_LOCKED: a
-- table that (auto)vacuum is working on is left to it, not waited for.
VACUUM (SKIP_LOCKED) {tables};

-- split_kept --
-- Each table of the queue as the last VACUUM left it (it writes pg_class as it ends): its live
-- rows, its pages, those all visible (every version on them visible to every snapshot), and
-- its file.
SELECT c.oid::regclass::text AS relation, greatest(c.reltuples, 0)::bigint AS live,
       c.relpages AS pages, c.relallvisible AS visible, pg_relation_filenode(c.oid) AS filenode
FROM pg_class AS c
WHERE c.oid = ANY(ARRAY[{table_oids}])
ORDER BY 1;

-- split_compact --
-- Compaction's rewrite (dbqueue.upkeep.compaction): each table copied with every version some
-- snapshot may still see, its indexes rebuilt, in a transaction per table (PostgreSQL's own)
-- under its ACCESS EXCLUSIVE lock, taken only if no other statement holds a lock on it
-- (SKIP_LOCKED: a table it cannot lock at once is skipped, with a warning, and tried again).
VACUUM (FULL, SKIP_LOCKED) {tables};
