-- The ring layout on SQLite: the protocol of postgresql/ring.sql for a database with one writer
-- and no sequences. The counters are one-row tables ({push_seq_rel}, {pop_seq_rel}) changed in the
-- same transaction as the slots, so a number is consumed only by a push that lands or a pop
-- that takes its message: there are no holes, strands or pending claims here. Multi-statement
-- blocks run in one transaction; after a statement that returns rows, :ids is the JSON array
-- of their first column. Times are bound from Python (:now etc.) as UTC text. States are
-- written as {slot_*} and {side_*} (see postgresql/ring.sql).
-- SQLite has no data-modifying CTEs: an operation on the slots and on the side table is two
-- statements the core runs in one transaction (ring_ack and ring_ack_side, ring_fail and
-- ring_fail_side, ring_extend and ring_extend_side).

-- ring_push --
UPDATE {ring}
SET seq = (SELECT value FROM {push_seq_rel}), state = {slot_ready}, attempts = 0,
    pushed_at = :now, lease_until = NULL, last_error = NULL{set_params}
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity AND state = {slot_empty}
  AND seq = (SELECT value FROM {push_seq_rel}) - :capacity
RETURNING seq AS number;
UPDATE {push_seq_rel} SET value = value + json_array_length(:ids);

-- ring_push_blocked --
-- The next slot was not free: if a consumer holds it (a leased message), the message is moved
-- to the side table with its token (its consumer's ack finds it there) and the slot emptied;
-- the core then pushes again. A slot holding a ready message means the ring is full.
INSERT INTO {failed} (id, state, attempts, pushed_at, failed_at, run_at, lease_until,
                      last_error{columns})
SELECT seq, {side_leased}, attempts, pushed_at, :now, NULL, lease_until, last_error{columns}
FROM {ring}
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity AND state = {slot_leased}
RETURNING id AS number;
UPDATE {ring} SET state = {slot_empty}, lease_until = NULL
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity
  AND seq IN (SELECT value FROM json_each(:ids));

-- ring_spill --
-- when_full "spill" (see postgresql/ring.sql): one message that found the ring full, written
-- into the side table as spilled, due now. A number is taken only by a message that lands
-- here (the counter is transactional, and a number not written would leave its slot behind
-- for good), so a spilled message waits under a placeholder id below every number: negative,
-- one above the last spilled one's, in the order they spilled. It gets its number when
-- ring_return_one pushes it into the ring.
INSERT INTO {failed} (id, state, attempts, pushed_at, failed_at, run_at, lease_until,
                      last_error{columns})
VALUES ((SELECT coalesce(max(id) + 1, -4611686018427387904) FROM {failed} WHERE id < 0),
        {side_spilled}, 0, :now, :now, :now, NULL, NULL{value_params})
RETURNING id AS number;

-- ring_next_slot --
-- Diagnosis when a push found no free slot: the next number and its slot's seq (NULL, or a
-- number of another slot: the table does not have the declared capacity).
SELECT n.value AS number, (SELECT seq FROM {ring} WHERE slot = n.value % :capacity) AS slot_seq
FROM {push_seq_rel} AS n;

-- _unpopped --
-- A fragment of the pops: the first :n ready slots from the pop counter on, in number order
-- (the seq index makes this a range scan; numbers freed by an admin's delete are skipped).
SELECT slot FROM {ring}
WHERE state = {slot_ready} AND seq >= (SELECT value FROM {pop_seq_rel})
ORDER BY seq
LIMIT :n

-- _advance_pop --
UPDATE {pop_seq_rel}
SET value = max(value, coalesce((SELECT max(value) + 1 FROM json_each(:ids)), value))

-- ring_pop_leased --
UPDATE {ring}
SET state = {slot_leased}, attempts = attempts + 1, lease_until = :lease_until
WHERE slot IN ({_unpopped})
RETURNING seq AS number, 1 AS taken, NULL AS slot_seq, NULL AS slot_state, attempts, pushed_at,
          lease_until, last_error{popped_payload};
{_advance_pop};

-- ring_pop_remove --
UPDATE {ring}
SET state = {slot_empty}, attempts = attempts + 1, lease_until = NULL
WHERE slot IN ({_unpopped})
RETURNING seq AS number, 1 AS taken, NULL AS slot_seq, NULL AS slot_state, attempts, pushed_at,
          NULL AS lease_until, last_error{popped_payload};
{_advance_pop};

-- _tokens --
-- A fragment: the tokens [number, attempts, due, error] of the JSON array :tokens.
tok AS (
    SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempts,
           json_extract(value, '$[2]') AS until, json_extract(value, '$[3]') AS error
    FROM json_each(:tokens)
)

-- _in_slot --
-- A fragment: the slots holding the leased message of a token.
SELECT t.slot FROM {ring} AS t JOIN tok ON t.slot = tok.id % :capacity
WHERE t.seq = tok.id AND t.state = {slot_leased}
  AND t.attempts = COALESCE(tok.attempts, t.attempts)

-- _in_side --
-- A fragment: the side rows holding the leased message of a token (a pusher moved it there).
SELECT f.id FROM {failed} AS f JOIN tok ON f.id = tok.id
WHERE f.state = {side_leased} AND f.attempts = COALESCE(tok.attempts, f.attempts)

-- ring_ack --
WITH {_tokens}
UPDATE {ring} SET state = {slot_empty}, lease_until = NULL
WHERE slot IN ({_in_slot})
RETURNING seq AS number;

-- ring_ack_side --
WITH {_tokens}
DELETE FROM {failed} WHERE id IN ({_in_side})
RETURNING id AS number;

-- ring_fail --
-- The slots' share of a failed attempt: the messages leave the ring at once for the side
-- table (ready again at :tokens' due time, or failed for good once attempts >= max_attempts),
-- freeing their slots.
WITH {_tokens}
INSERT INTO {failed} (id, state, attempts, pushed_at, failed_at, run_at, lease_until,
                      last_error{columns})
SELECT t.seq,
       CASE WHEN t.attempts >= :max_attempts THEN {side_failed} ELSE {side_ready} END,
       t.attempts, t.pushed_at, :now,
       CASE WHEN t.attempts < :max_attempts THEN tok.until END, NULL, tok.error{slot_columns}
FROM {ring} AS t{join_slots} JOIN tok ON t.slot = tok.id % :capacity
WHERE t.slot IN ({_in_slot}) AND t.seq = tok.id
RETURNING id AS number, state;
UPDATE {ring} SET state = {slot_empty}, lease_until = NULL
WHERE seq IN (SELECT value FROM json_each(:ids))
  AND slot IN (SELECT value % :capacity FROM json_each(:ids));

-- ring_fail_side --
-- A failed attempt of a message a pusher had moved to the side table: it changes state there.
WITH {_tokens}
UPDATE {failed} AS f
SET state = CASE WHEN attempts >= :max_attempts THEN {side_failed} ELSE {side_ready} END,
    run_at = CASE WHEN attempts < :max_attempts
                  THEN (SELECT tok.until FROM tok WHERE tok.id = f.id) END,
    lease_until = NULL, failed_at = :now,
    last_error = (SELECT tok.error FROM tok WHERE tok.id = f.id)
WHERE id IN ({_in_side})
RETURNING id AS number, state;

-- ring_release --
-- See postgresql/ring.sql: the slots' share, then ring_release_side.
WITH {_tokens}
INSERT INTO {failed} (id, state, attempts, pushed_at, failed_at, run_at, lease_until,
                      last_error{columns})
SELECT t.seq, {side_ready}, t.attempts - 1, t.pushed_at, :now, :now, NULL,
       t.last_error{slot_columns}
FROM {ring} AS t{join_slots} JOIN tok ON t.slot = tok.id % :capacity
WHERE t.slot IN ({_in_slot}) AND t.seq = tok.id
RETURNING id AS number;
UPDATE {ring} SET state = {slot_empty}, lease_until = NULL
WHERE seq IN (SELECT value FROM json_each(:ids))
  AND slot IN (SELECT value % :capacity FROM json_each(:ids));

-- ring_release_side --
WITH {_tokens}
UPDATE {failed}
SET state = {side_ready}, run_at = :now, lease_until = NULL, attempts = attempts - 1
WHERE id IN ({_in_side})
RETURNING id AS number;

-- ring_extend --
WITH {_tokens}
UPDATE {ring} SET lease_until = :lease_until
WHERE slot IN ({_in_slot})
RETURNING seq AS number;

-- ring_extend_side --
WITH {_tokens}
UPDATE {failed} SET lease_until = :lease_until
WHERE id IN ({_in_side})
RETURNING id AS number;

-- ring_not_leased --
WITH {_tokens}
SELECT tok.id AS number FROM tok
WHERE tok.id NOT IN (SELECT seq FROM {ring} WHERE slot IN ({_in_slot}))
  AND tok.id NOT IN ({_in_side});

-- ring_sweep --
-- The sweeper's first step (SQLite has no strands or holes): expired leases leave their slots
-- for the side table, ready again (pushed again by ring_return_one) or failed after their last
-- attempt.
INSERT INTO {failed} (id, state, attempts, pushed_at, failed_at, run_at, lease_until,
                      last_error{columns})
SELECT t.seq, CASE WHEN t.attempts >= :max_attempts THEN {side_failed} ELSE {side_ready} END,
       t.attempts, t.pushed_at, :now, CASE WHEN t.attempts < :max_attempts THEN :now END, NULL,
       :error{slot_columns}
FROM {ring} AS t{join_slots}
WHERE t.state = {slot_leased} AND t.lease_until < :now
ORDER BY t.seq
LIMIT :n
RETURNING id AS number, state;
UPDATE {ring} SET state = {slot_empty}, lease_until = NULL
WHERE seq IN (SELECT value FROM json_each(:ids))
  AND slot IN (SELECT value % :capacity FROM json_each(:ids));

-- ring_sweep_side --
-- Leases a pusher moved aside that expired: ready again, or failed after their last attempt.
UPDATE {failed}
SET state = CASE WHEN attempts >= :max_attempts THEN {side_failed} ELSE {side_ready} END,
    run_at = CASE WHEN attempts < :max_attempts THEN :now END,
    lease_until = NULL, failed_at = :now, last_error = :error
WHERE id IN (
    SELECT id FROM {failed}
    WHERE state = {side_leased} AND lease_until < :now
    ORDER BY id
    LIMIT :n
)
RETURNING id AS number, state;

-- ring_due --
-- The ready and spilled messages of the side table that are due, oldest first:
-- ring_return_one pushes them again one by one, stopping at the first that finds no slot.
SELECT id AS number FROM {failed}
WHERE state IN ({side_ready}, {side_spilled}) AND run_at <= :now
ORDER BY run_at, id
LIMIT :n;

-- ring_return_one --
-- One due message (:id) pushed again at the tail under the next number, attempts kept, if its
-- slot is free; otherwise it stays aside (the ring is full).
UPDATE {ring}
SET (seq, state, attempts, pushed_at, lease_until, last_error{columns}) = (
    SELECT n.value, {slot_ready}, f.attempts, :now, NULL, f.last_error{f_columns}
    FROM {failed} AS f, {push_seq_rel} AS n WHERE f.id = :id)
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity AND state = {slot_empty}
  AND seq = (SELECT value FROM {push_seq_rel}) - :capacity
  AND EXISTS (SELECT 1 FROM {failed} WHERE id = :id AND state IN ({side_ready}, {side_spilled}))
RETURNING seq AS number;
DELETE FROM {failed} WHERE id = :id AND json_array_length(:ids) > 0;
UPDATE {push_seq_rel} SET value = value + json_array_length(:ids);

-- ring_next_due --
-- See postgresql/ring.sql (SQLite's two-argument min() is NULL if either is).
SELECT CASE WHEN l IS NULL OR s < l THEN s ELSE l END AS due
FROM (SELECT (SELECT min(CASE WHEN state = {side_leased} THEN lease_until ELSE run_at END)
              FROM {failed} WHERE state IN ({side_ready}, {side_leased}, {side_spilled})) AS s,
             (SELECT min(lease_until) FROM {ring} WHERE state = {slot_leased}) AS l);

-- ring_retry --
-- Failed messages made ready again, attempts reset; ring_return_one pushes them at the tail.
UPDATE {failed}
SET state = {side_ready}, attempts = 0, run_at = :now, lease_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = {side_failed}
RETURNING id AS number;

-- ring_delete --
-- Messages by number in their slots, whatever their state (ring_delete_side deletes them from
-- the side table; the core runs both in one transaction). seq determines the slot, so the slot
-- filter only makes this a primary-key lookup.
UPDATE {ring} SET state = {slot_empty}, lease_until = NULL
WHERE state <> {slot_empty} AND seq IN (SELECT value FROM json_each(:ids))
  AND slot IN (SELECT value % :capacity FROM json_each(:ids))
RETURNING seq AS number;

-- ring_delete_side --
DELETE FROM {failed} WHERE id IN (SELECT value FROM json_each(:ids)) RETURNING id AS number;

-- _purged_slots --
-- See postgresql/ring.sql (columns by their bare names: RETURNING cannot see an alias).
:in_slots AND state <> {slot_empty}
AND (:slot_state IS NULL OR state = :slot_state)
AND (:before IS NULL OR pushed_at < :before)

-- _purged_side --
(:state IS NULL OR state = :state OR (:state = {side_ready} AND state = {side_spilled}))
AND (:due IS NULL OR (run_at <= :now) = :due)
AND (:before IS NULL
     OR CASE WHEN state = {side_failed} THEN failed_at ELSE pushed_at END < :before)

-- ring_purge --
UPDATE {ring} SET state = {slot_empty}, lease_until = NULL
WHERE {_purged_slots}
RETURNING seq AS number;

-- ring_purge_side --
DELETE FROM {failed} WHERE {_purged_side} RETURNING id AS number;

-- ring_count --
SELECT (SELECT count(*) FROM {ring} WHERE {_purged_slots})
       + (SELECT count(*) FROM {failed} WHERE {_purged_side}) AS value;

-- ring_stats --
SELECT coalesce(sum(state = {slot_ready}), 0)
           + (SELECT count(*) FROM {failed}
              WHERE state IN ({side_ready}, {side_spilled}) AND run_at <= :now) AS ready,
       (SELECT count(*) FROM {failed} WHERE state = {side_ready} AND run_at > :now) AS scheduled,
       coalesce(sum(state = {slot_leased}), 0)
           + (SELECT count(*) FROM {failed} WHERE state = {side_leased}) AS leased,
       coalesce(sum(state = {slot_leased} AND lease_until < :now), 0)
           + (SELECT count(*) FROM {failed} WHERE state = {side_leased} AND lease_until < :now)
           AS expired,
       0 AS done,
       (SELECT count(*) FROM {failed} WHERE state = {side_failed}) AS failed,
       min(CASE WHEN state = {slot_ready} THEN pushed_at END) AS oldest_ready,
       :now AS now,
       count(*) AS slots,
       coalesce(sum(state <> {slot_empty}), 0) AS in_slots,
       (SELECT count(*) FROM {failed} WHERE state = {side_spilled}) AS spilled,
       0 AS cancelled
FROM {ring};

-- ring_counters --
SELECT (SELECT value FROM {push_seq_rel}) AS push_next, (SELECT value FROM {pop_seq_rel}) AS pop_next;

-- ring_notify --
-- SQLite has no LISTEN/NOTIFY (see split_notify); never run.
SELECT :channel WHERE 0;
