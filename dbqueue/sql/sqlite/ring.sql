-- The ring layout on SQLite: the protocol of postgresql/ring.sql for a database with one writer
-- and no sequences. The counters are one-row tables ({push_seq_rel}, {pop_seq_rel}) changed in the
-- same transaction as the slots, so a number is consumed only by a push that lands or a pop
-- that takes its message: there are no holes, strands or pending claims here. Multi-statement
-- blocks run in one transaction; after a statement that returns rows, :ids is the JSON array
-- of their first column. Times are bound from Python (:now etc.) as UTC text.

-- ring_push --
UPDATE {ring}
SET seq = (SELECT value FROM {push_seq_rel}), state = 1, attempts = 0, pushed_at = :now,
    lease_until = NULL, last_error = NULL{set_params}
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity AND state = 0
  AND seq = (SELECT value FROM {push_seq_rel}) - :capacity
RETURNING seq;
UPDATE {push_seq_rel} SET value = value + json_array_length(:ids);

-- ring_next_slot --
-- Diagnosis when a push found no free slot: the next number and its slot's seq (NULL, or a
-- number of another slot: the table does not have the declared capacity).
SELECT n.value, (SELECT seq FROM {ring} WHERE slot = n.value % :capacity)
FROM {push_seq_rel} AS n;

-- _unpopped --
-- A fragment of the pops: the first :n full slots from the pop counter on, in number order
-- (the seq index makes this a range scan; numbers freed by an admin's delete are skipped).
SELECT slot FROM {ring}
WHERE state = 1 AND seq >= (SELECT value FROM {pop_seq_rel})
ORDER BY seq
LIMIT :n

-- _advance_pop --
UPDATE {pop_seq_rel}
SET value = max(value, coalesce((SELECT max(value) + 1 FROM json_each(:ids)), value))

-- ring_pop_leased --
UPDATE {ring}
SET state = 2, attempts = attempts + 1, lease_until = :lease_until
WHERE slot IN ({_unpopped})
RETURNING seq, attempts, pushed_at, lease_until, last_error{ring_payload};
{_advance_pop};

-- ring_pop_remove --
UPDATE {ring}
SET state = 0, lease_until = NULL
WHERE slot IN ({_unpopped})
RETURNING seq, attempts + 1, pushed_at, NULL, last_error{ring_payload};
{_advance_pop};

-- _tokens --
-- A fragment of ack and fail: the slots still leased under their token; `allowed` is all of
-- them, or none when strict and any is missing.
tok AS (
    SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempts,
           json_extract(value, '$[2]') AS until, json_extract(value, '$[3]') AS error
    FROM json_each(:tokens)
), mine AS (
    SELECT t.slot FROM {ring} AS t JOIN tok ON t.slot = tok.id % :capacity
    WHERE t.seq = tok.id AND t.state = 2 AND t.attempts = COALESCE(tok.attempts, t.attempts)
), allowed AS (
    SELECT slot FROM mine WHERE NOT :strict OR (SELECT count(*) FROM mine) = :count
)

-- ring_ack --
WITH {_tokens}
UPDATE {ring} SET state = 0, lease_until = NULL
WHERE slot IN (SELECT slot FROM allowed)
RETURNING seq;

-- ring_fail --
-- The failed table first (the messages that used their last attempt), then the slots: those
-- emptied, the others waiting (state 3) until the back-off ends.
WITH {_tokens}
INSERT INTO {failed} (id, attempts, pushed_at, failed_at, last_error{columns})
SELECT t.seq, t.attempts, t.pushed_at, :now, tok.error{t_columns}
FROM {ring} AS t JOIN tok ON t.slot = tok.id % :capacity
WHERE t.slot IN (SELECT slot FROM allowed) AND t.attempts >= :max_attempts;
WITH {_tokens}
UPDATE {ring} AS r
SET state = CASE WHEN attempts >= :max_attempts THEN 0 ELSE 3 END,
    lease_until = CASE WHEN attempts >= :max_attempts THEN NULL
                       ELSE (SELECT tok.until FROM tok WHERE tok.id = r.seq) END,
    last_error = (SELECT tok.error FROM tok WHERE tok.id = r.seq)
WHERE slot IN (SELECT slot FROM allowed)
RETURNING seq, CASE WHEN state = 0 THEN 3 ELSE 0 END;

-- ring_extend --
UPDATE {ring} AS t
SET lease_until = :lease_until
WHERE state = 2
  AND slot IN (SELECT json_extract(value, '$[0]') % :capacity FROM json_each(:tokens))
  AND EXISTS (
    SELECT 1 FROM json_each(:tokens) AS k
    WHERE json_extract(k.value, '$[0]') = t.seq
      AND COALESCE(json_extract(k.value, '$[1]'), t.attempts) = t.attempts
)
RETURNING seq;

-- ring_not_leased --
SELECT json_extract(k.value, '$[0]')
FROM json_each(:tokens) AS k
WHERE NOT EXISTS (
    SELECT 1 FROM {ring} AS t
    WHERE t.slot = json_extract(k.value, '$[0]') % :capacity
      AND t.seq = json_extract(k.value, '$[0]') AND t.state = 2
      AND t.attempts = COALESCE(json_extract(k.value, '$[1]'), t.attempts)
);

-- ring_victims --
-- The sweeper's work (SQLite has no strands or holes): expired leases and ended back-offs.
SELECT slot, state = 2 AND attempts >= :max_attempts FROM {ring}
WHERE state IN (2, 3) AND lease_until < :now
ORDER BY seq
LIMIT :n;

-- ring_move --
-- One victim (:src) pushed again under the next number, into that number's slot if it is
-- free, or in place if the number is the next lap of the victim's own slot (a full ring).
UPDATE {ring}
SET (seq, state, attempts, pushed_at, lease_until, last_error{columns}) = (
    SELECT n.value, 1, s.attempts, :now, NULL,
           CASE WHEN s.state = 2 THEN :error ELSE s.last_error END{s_columns}
    FROM {ring} AS s, {push_seq_rel} AS n WHERE s.slot = :src)
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity AND (state = 0 OR slot = :src)
  AND seq = (SELECT value FROM {push_seq_rel}) - :capacity
RETURNING seq;
UPDATE {ring} SET state = 0, lease_until = NULL
WHERE slot = :src AND json_array_length(:ids) > 0
  AND slot <> (SELECT value FROM {push_seq_rel}) % :capacity;
UPDATE {push_seq_rel} SET value = value + json_array_length(:ids);

-- ring_bury --
-- One victim (:src) that used its last attempt, to the failed table.
INSERT INTO {failed} (id, attempts, pushed_at, failed_at, last_error{columns})
SELECT seq, attempts, pushed_at, :now, :error{columns} FROM {ring} WHERE slot = :src
RETURNING id;
UPDATE {ring} SET state = 0, lease_until = NULL WHERE slot = :src;

-- ring_retry_one --
-- One failed message (:id) pushed again under the next number, attempts reset, if its slot
-- is free; otherwise it stays in the failed table.
UPDATE {ring}
SET (seq, state, attempts, pushed_at, lease_until, last_error{columns}) = (
    SELECT n.value, 1, 0, :now, NULL, f.last_error{f_columns}
    FROM {failed} AS f, {push_seq_rel} AS n WHERE f.id = :id)
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity AND state = 0
  AND seq = (SELECT value FROM {push_seq_rel}) - :capacity
  AND EXISTS (SELECT 1 FROM {failed} WHERE id = :id)
RETURNING seq;
DELETE FROM {failed} WHERE id = :id AND json_array_length(:ids) > 0;
UPDATE {push_seq_rel} SET value = value + json_array_length(:ids);

-- ring_delete --
-- (seq determines the slot, so the slot filter only makes this a primary-key lookup.)
UPDATE {ring} SET state = 0, lease_until = NULL
WHERE state <> 0 AND seq IN (SELECT value FROM json_each(:ids))
  AND slot IN (SELECT value % :capacity FROM json_each(:ids))
RETURNING seq;

-- ring_delete_failed --
DELETE FROM {failed} WHERE id IN (SELECT value FROM json_each(:ids)) RETURNING id;

-- ring_purge --
UPDATE {ring} SET state = 0, lease_until = NULL
WHERE state <> 0 AND (:slot_state IS NULL OR state = :slot_state)
RETURNING seq;

-- ring_purge_failed --
DELETE FROM {failed} RETURNING id;

-- ring_stats --
SELECT coalesce(sum(state = 1), 0),
       coalesce(sum(state = 3), 0),
       coalesce(sum(state = 2), 0),
       coalesce(sum(state = 2 AND lease_until < :now), 0),
       0,
       (SELECT count(*) FROM {failed}),
       min(CASE WHEN state = 1 THEN pushed_at END),
       :now,
       count(*),
       (SELECT value FROM {push_seq_rel}),
       (SELECT value FROM {pop_seq_rel})
FROM {ring};

-- ring_notify --
-- SQLite has no LISTEN/NOTIFY (see split_notify); never run.
SELECT :channel WHERE 0;
