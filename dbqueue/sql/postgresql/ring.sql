-- The ring layout on PostgreSQL: `capacity` preallocated slots that are only ever UPDATEd (the
-- LMAX Disruptor in SQL, see DESIGN.md "Ring queue protocol"). Message number n lives in slot
-- mod(n, capacity); a slot's `seq` is the number it last held (or was marked for), so a pusher
-- of p may write slot mod(p, C) only while it is empty and holds p - C, and a popper of q may
-- take it only while it is full and holds q. Every statement is conditional on those columns,
-- which makes a late, duplicated or crashed participant harmless: its UPDATE matches no row.
--
-- Slot states: 0 empty, 1 full, 2 leased (at-least-once pop), 3 waiting to be retried after a
-- failed attempt (its lease_until is the end of the back-off; the sweeper pushes it again).
-- No statement changes `slot`, the only indexed column, so every update can be HOT.
-- Sequence numbers are not transactional: a rolled-back or crashed pusher leaves a hole, a
-- popper that dies or rolls back strands a message; both are repaired (ring_mark_holes,
-- ring_sweep_holes, ring_sweep). `{push_next}` is the next number the push sequence hands out.
--
-- Arrays bound as parameters are read through sub-selects, `unnest((SELECT %(ids)b...))`:
-- the planner then costs them alike whether it plans for the actual values or generically.
-- Otherwise a re-plan with the values sees one-element arrays and looks cheaper than the
-- prepared statement's generic plan, and PostgreSQL plans the pops and acks again at every
-- call, which cost more than running them (0.8 ms a pop, against 0.37 ms now).

-- _push_next --
(SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {push_seq_rel})

-- _pop_next --
(SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {pop_seq_rel})

-- _written --
-- A fragment of both pushes: the rows of `r` (number p, payload c0..) written into their slots
-- where the slot is free for them: empty and holding p - C. Two rows of one batch never match
-- the same slot: only the lower number can find the slot holding its number minus C.
-- A number in %(jumps)s (its pusher held it past hole_timeout; the caller passes at most one
-- per slot) may also be written over an empty slot laps behind it, unless a push still in
-- flight holds that slot: it is locked SKIP LOCKED first, never waited for.
j AS (
    SELECT t.slot FROM {ring} AS t
    WHERE t.slot = ANY(ARRAY(SELECT mod(r.p, %(capacity)s::bigint) FROM r
                             WHERE r.p = ANY(%(jumps)b::bigint[])))
      AND t.state = 0
    FOR UPDATE SKIP LOCKED
), u AS (
    UPDATE {ring} AS t
    SET seq = r.p, state = 1, attempts = 0, pushed_at = statement_timestamp(),
        lease_until = NULL, last_error = NULL{set_r}
    FROM r
    WHERE t.slot = mod(r.p, %(capacity)s::bigint) AND t.state = 0
      AND (t.seq = r.p - %(capacity)s::bigint
           OR (t.seq < r.p - %(capacity)s::bigint AND r.p = ANY(%(jumps)b::bigint[])
               AND t.slot = ANY(ARRAY(SELECT slot FROM j))))
    RETURNING t.seq
)

-- _push_outcome --
-- One row per pushed row, in input order: its number, whether it landed, and its slot as it
-- was, so the caller can tell a full ring (seq <= p - C: wait, retrying the same number) from a
-- number given up on (seq >= p: take another).
SELECT r.p, u.seq IS NOT NULL, s.seq, s.state
FROM r LEFT JOIN u ON u.seq = r.p LEFT JOIN {ring} AS s ON s.slot = mod(r.p, %(capacity)s::bigint)
ORDER BY r.ord

-- ring_push --
-- A new number, or under backpressure the same number again (%(p)s).
WITH r AS (
    SELECT COALESCE(%(p)s::bigint, nextval({push_seq})) AS p, 1 AS ord{r_params}
), {_written}
{_push_outcome};

-- ring_push_many --
-- One statement per batch: numbers taken in input order (NULL in %(ps)s = a new number).
WITH r AS (
    SELECT COALESCE(r.p, nextval({push_seq})) AS p, r.ord{r_columns}
    FROM unnest((SELECT %(ps)b::bigint[]){payload_arrays}) WITH ORDINALITY AS r(p{r_names}, ord)
), {_written}
{_push_outcome};

-- _claims --
-- A fragment of the pops: the claims a popper still holds (%(held)s) and up to %(k)s new ones,
-- never more than the pushers have numbers for (idle poppers must not run ahead of pushers);
-- `pick` is the at most %(n)s of them whose message is in its slot, in number order.
fresh AS (
    SELECT nextval({pop_seq}) AS q
    FROM generate_series(1, GREATEST(0, LEAST(%(k)s::bigint, {_push_next} - {_pop_next})))
), claims AS (
    SELECT q FROM fresh
    UNION ALL
    SELECT unnest((SELECT %(held)b::bigint[]))
), pick AS (
    SELECT t.slot, t.seq FROM {ring} AS t
    WHERE t.slot = ANY(ARRAY(SELECT mod(q, %(capacity)s::bigint) FROM claims))
      AND t.seq = ANY(ARRAY(SELECT q FROM claims)) AND t.state = 1
    ORDER BY t.seq
    LIMIT %(n)s
    FOR UPDATE OF t SKIP LOCKED
)

-- _claim_rows --
-- A fragment of the pops: one row per claim, in number order: the claim, the slot as it was
-- (for the claims not taken: keep waiting, or drop) and the message if it was taken.
SELECT c.q, s.seq AS slot_seq, s.state AS slot_state, p.*
FROM claims AS c
LEFT JOIN popped AS p ON p.seq = c.q
LEFT JOIN LATERAL (
    SELECT s.seq, s.state FROM {ring} AS s WHERE s.slot = mod(c.q, %(capacity)s::bigint) LIMIT 1
) AS s ON true

-- _leased --
popped AS (
    UPDATE {ring} AS t
    SET state = 2, attempts = t.attempts + 1,
        lease_until = statement_timestamp() + %(lease)s::interval
    FROM pick
    WHERE t.slot = pick.slot
    RETURNING t.seq, t.attempts, t.pushed_at, t.lease_until, t.last_error{t_payload}
)

-- ring_pop_leased --
WITH {_claims}, {_leased}
{_claim_rows}
ORDER BY c.q;

-- ring_pop_remove --
-- at_most_once (autocommit) and transactional (in the caller's transaction): the slot is
-- emptied at once; the payload stays in it until the next lap overwrites it (no extra write).
WITH {_claims}, popped AS (
    UPDATE {ring} AS t
    SET state = 0, lease_until = NULL
    FROM pick
    WHERE t.slot = pick.slot
    RETURNING t.seq, t.attempts + 1, t.pushed_at, NULL::timestamptz, t.last_error{t_payload}
)
{_claim_rows}
ORDER BY c.q;

-- ring_mark_holes --
-- A popper's claims that stayed unfilled past hole_timeout although the pushers handed their
-- numbers out: the pusher rolled back or died. Mark the slot as holding the number, so a late
-- pusher fails its condition and takes a new number. A slot locked by a push still in flight
-- (a long transaction) is skipped, never waited for. A slot laps behind the claim is marked
-- too: the numbers in between were handed out before the claim's, so they are older holes.
WITH c AS (
    SELECT unnest(%(held)b::bigint[]) AS q
), holes AS (
    SELECT t.slot, c.q FROM {ring} AS t JOIN c ON t.slot = mod(c.q, %(capacity)s::bigint)
    WHERE t.state = 0 AND t.seq <= c.q - %(capacity)s::bigint AND c.q < {_push_next}
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE {ring} AS t
SET seq = holes.q, pushed_at = NULL
FROM holes
WHERE t.slot = holes.slot AND t.state = 0 AND t.seq <= holes.q - %(capacity)s::bigint
RETURNING t.seq;

-- _held --
-- A fragment of ack, fail and ack_pop: the slots of `tok` still leased under their token
-- (number, attempts), locked in slot order; `allowed` is all of them, or none when strict and
-- any is missing. A worker whose lease expired cannot touch the message's next delivery.
mine AS (
    SELECT t.slot FROM {ring} AS t JOIN tok ON t.slot = mod(tok.id, %(capacity)s::bigint)
    WHERE t.seq = tok.id AND t.state = 2 AND t.attempts = COALESCE(tok.attempts, t.attempts)
    ORDER BY t.slot
    FOR UPDATE OF t
), allowed AS (
    SELECT slot FROM mine
    WHERE NOT %(strict)s OR (SELECT count(*) FROM mine) = %(count)s
)

-- _tokens --
tok AS (
    SELECT * FROM unnest((SELECT %(ids)b::bigint[]), (SELECT %(attempts)b::smallint[])) AS t(id, attempts)
), {_held}

-- _acked --
acked AS (
    UPDATE {ring} AS t SET state = 0, lease_until = NULL
    FROM allowed
    WHERE t.slot = allowed.slot
    RETURNING t.seq
)

-- ring_ack --
WITH {_tokens}, {_acked}
SELECT seq FROM acked;

-- ring_ack_pop --
-- A worker's loop in one statement: free the slots of the batch just handled, lease the next.
-- The ack touches leased slots, the pop full ones: never the same row. The first column of
-- every row is the number acked; with no claims there is one row, its other columns NULL.
WITH {_tokens}, {_acked}, {_claims}, {_leased}, rows AS (
    {_claim_rows}
)
SELECT (SELECT count(*) FROM acked), rows.*
FROM (SELECT 1) AS one LEFT JOIN rows ON true
ORDER BY rows.q;

-- ring_fail --
-- attempts < max_attempts: the slot waits (state 3) until the back-off ends, then the sweeper
-- pushes the message again at the tail. Otherwise it moves to the failed table, freeing the slot.
WITH tok AS (
    SELECT * FROM unnest((SELECT %(ids)b::bigint[]), (SELECT %(attempts)b::smallint[]), (SELECT %(delays)b::interval[]),
                         (SELECT %(errors)b::text[])) AS t(id, attempts, delay, error)
), {_held}, moved AS (
    INSERT INTO {failed} (id, attempts, pushed_at, failed_at, last_error{columns})
    SELECT t.seq, t.attempts, t.pushed_at, statement_timestamp(), tok.error{t_columns}
    FROM {ring} AS t JOIN allowed USING (slot) JOIN tok ON tok.id = t.seq
    WHERE t.attempts >= %(max_attempts)s
), u AS (
    UPDATE {ring} AS t
    SET state = CASE WHEN t.attempts >= %(max_attempts)s THEN 0 ELSE 3 END,
        lease_until = CASE WHEN t.attempts >= %(max_attempts)s THEN NULL
                           ELSE statement_timestamp() + tok.delay END,
        last_error = tok.error
    FROM allowed JOIN tok ON mod(tok.id, %(capacity)s::bigint) = allowed.slot
    WHERE t.slot = allowed.slot
    RETURNING t.seq, t.state
)
SELECT seq, CASE WHEN state = 0 THEN 3 ELSE 0 END FROM u;

-- ring_extend --
WITH tok AS (
    SELECT * FROM unnest((SELECT %(ids)b::bigint[]), (SELECT %(attempts)b::smallint[])) AS t(id, attempts)
)
UPDATE {ring} AS t
SET lease_until = statement_timestamp() + %(lease)s::interval
FROM tok
WHERE t.slot = mod(tok.id, %(capacity)s::bigint) AND t.seq = tok.id AND t.state = 2
  AND t.attempts = COALESCE(tok.attempts, t.attempts)
RETURNING t.seq;

-- ring_not_leased --
-- Diagnosis for NotLeased errors only (never on the hot path).
SELECT tok.id
FROM unnest(%(ids)b::bigint[], %(attempts)b::smallint[]) AS tok(id, attempts)
LEFT JOIN {ring} AS t
  ON t.slot = mod(tok.id, %(capacity)s::bigint) AND t.seq = tok.id AND t.state = 2
 AND t.attempts = COALESCE(tok.attempts, t.attempts)
WHERE t.slot IS NULL;

-- ring_sweep --
-- One sweeper per queue at a time (a transaction-scoped advisory lock, tried not awaited), in
-- small batches. Victims: expired leases (the popper died or overran), slots whose back-off
-- after a failure ended, and stranded messages, whose number a popper claimed long ago but
-- never took (it died, or rolled a transactional pop back). Each is pushed again under a new
-- number (the old slot is emptied and keeps its seq) or, for an expired lease that used its
-- last attempt, moved to the failed table. A victim whose new slot is not free stays where it
-- is (the ring is full; its new number becomes a hole) and is tried again next time.
-- Victims are taken, and numbered, in slot order starting at the slot of the next push number:
-- within the lap before it that is number order (oldest first), and in a ring full of victims
-- it gives each victim a number of its own slot (renumbered in place), whatever numbers
-- failed pushes burned before. Taken in seq order instead, the victims' new numbers could
-- point at each other's slots lap after lap, and a full ring of strands stayed stuck.
WITH lock AS (
    SELECT pg_try_advisory_xact_lock(%(lock_key)s) AS got
), nxt AS MATERIALIZED (
    SELECT {_push_next} AS p
), victims AS (
    SELECT t.*, mod(mod(t.slot - (SELECT p FROM nxt), %(capacity)s::bigint)
                    + %(capacity)s::bigint, %(capacity)s::bigint) AS turn
    FROM {ring} AS t
    WHERE (SELECT got FROM lock) AND (
        (t.state IN (2, 3) AND t.lease_until < statement_timestamp())
        OR (t.state = 1 AND t.seq < {_pop_next}
            AND t.pushed_at < statement_timestamp() - %(stranded_after)s::interval))
    ORDER BY turn
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), dead AS (
    INSERT INTO {failed} (id, attempts, pushed_at, failed_at, last_error{columns})
    SELECT v.seq, v.attempts, v.pushed_at, statement_timestamp(), %(error)s{v_columns}
    FROM victims AS v
    WHERE v.state = 2 AND v.attempts >= %(max_attempts)s
    RETURNING id
), moves AS (
    SELECT nextval({push_seq}) AS p, v.*
    FROM (SELECT * FROM victims AS v
          WHERE NOT (v.state = 2 AND v.attempts >= %(max_attempts)s) ORDER BY v.turn) AS v
), placed AS (
    -- Into the new number's slot if it is free, or in place when the new number belongs to
    -- the victim's own slot (a later lap: the numbers of the laps in between were handed to
    -- pushers that found the slot full; any still trying finds it past their number and
    -- takes another, as when a hole is marked).
    UPDATE {ring} AS t
    SET seq = m.p, state = 1, attempts = m.attempts, pushed_at = statement_timestamp(),
        lease_until = NULL,
        last_error = CASE WHEN m.state = 2 THEN %(error)s ELSE m.last_error END{set_m}
    FROM moves AS m
    WHERE t.slot = mod(m.p, %(capacity)s::bigint)
      AND ((t.state = 0 AND t.seq = m.p - %(capacity)s::bigint)
           OR (t.slot = m.slot AND t.seq = m.seq))
    RETURNING m.slot AS src, t.slot AS dst
), freed AS (
    UPDATE {ring} AS t SET state = 0, lease_until = NULL
    WHERE t.slot = ANY(ARRAY(SELECT src FROM placed WHERE src <> dst
                             UNION ALL SELECT mod(id, %(capacity)s::bigint) FROM dead))
    RETURNING t.slot
)
SELECT (SELECT count(*) FROM placed), (SELECT count(*) FROM dead), (SELECT count(*) FROM victims),
       (SELECT count(*) FROM freed);

-- ring_sweep_holes --
-- Holes no popper marks (its popper died, or sits idle holding the claim). An empty slot is
-- advanced to the number it awaits when a later message landed more than hole_timeout ago (so
-- that number's pusher has held it at least that long), and in any case to the last lap
-- before the push sequence's current one: every number in between was handed to a pusher
-- more than a lap ago and never written. Marking is always safe: a pusher whose number was
-- marked fails its condition and takes a new one, and a slot locked by a push in flight is
-- skipped. Same lock as ring_sweep.
WITH lock AS (
    SELECT pg_try_advisory_xact_lock(%(lock_key)s) AS got
), nxt AS MATERIALIZED (
    SELECT {_push_next} - %(capacity)s::bigint - 1 AS last
), bound AS MATERIALIZED (
    SELECT max(seq) AS b FROM {ring}
    WHERE pushed_at < statement_timestamp() - %(hole_timeout)s::interval
), due AS MATERIALIZED (
    -- Only the slots that need it are locked and updated: locking every empty slot would
    -- write (and WAL-log) a lock on each of them every sweep.
    SELECT slot, q FROM (
        SELECT t.slot, t.seq, GREATEST(
            n.last - mod(mod(n.last - t.slot, %(capacity)s::bigint) + %(capacity)s::bigint,
                         %(capacity)s::bigint),
            CASE WHEN t.seq + %(capacity)s::bigint < (SELECT b FROM bound)
                 THEN t.seq + %(capacity)s::bigint END) AS q
        FROM {ring} AS t, nxt AS n
        WHERE (SELECT got FROM lock) AND t.state = 0
    ) AS d
    WHERE q > seq
), holes AS (
    SELECT t.slot FROM {ring} AS t
    WHERE t.slot = ANY(ARRAY(SELECT slot FROM due)) AND t.state = 0
    FOR UPDATE SKIP LOCKED
)
UPDATE {ring} AS t
SET seq = due.q, pushed_at = NULL
FROM due
WHERE t.slot = ANY(ARRAY(SELECT slot FROM holes)) AND t.slot = due.slot
  AND t.state = 0 AND due.q > t.seq
RETURNING t.seq;

-- ring_retry --
-- Failed messages pushed again under new numbers, attempts reset; those whose slot is not free
-- (a full ring) stay in the failed table.
WITH f AS (
    SELECT * FROM {failed} WHERE id = ANY(%(ids)b::bigint[]) ORDER BY id FOR UPDATE
), moves AS (
    SELECT nextval({push_seq}) AS p, f.* FROM f
), placed AS (
    UPDATE {ring} AS t
    SET seq = m.p, state = 1, attempts = 0, pushed_at = statement_timestamp(),
        lease_until = NULL, last_error = m.last_error{set_m}
    FROM moves AS m
    WHERE t.slot = mod(m.p, %(capacity)s::bigint) AND t.state = 0
      AND t.seq = m.p - %(capacity)s::bigint
    RETURNING m.id
)
DELETE FROM {failed} AS f USING placed WHERE f.id = placed.id
RETURNING f.id;

-- ring_delete --
-- Messages by number, in whatever slot state: their slots emptied (ring_delete_failed deletes
-- their rows in the failed table; the core runs both in one transaction).
UPDATE {ring} AS t SET state = 0, lease_until = NULL
FROM unnest(%(ids)b::bigint[]) AS i(id)
WHERE t.slot = mod(i.id, %(capacity)s::bigint) AND t.seq = i.id AND t.state <> 0
RETURNING t.seq;

-- ring_delete_failed --
DELETE FROM {failed} WHERE id = ANY(%(ids)b::bigint[])
RETURNING id;

-- ring_purge --
-- %(slot_state)s: the slot state to empty (1 ready, 2 leased), NULL for every message.
UPDATE {ring} AS t SET state = 0, lease_until = NULL
WHERE t.state <> 0 AND (%(slot_state)s::smallint IS NULL OR t.state = %(slot_state)s::smallint)
RETURNING t.seq;

-- ring_purge_failed --
DELETE FROM {failed}
RETURNING id;

-- ring_stats --
SELECT count(*) FILTER (WHERE state = 1),
       count(*) FILTER (WHERE state = 3),
       count(*) FILTER (WHERE state = 2),
       count(*) FILTER (WHERE state = 2 AND lease_until < statement_timestamp()),
       0,
       (SELECT count(*) FROM {failed}),
       min(pushed_at) FILTER (WHERE state = 1),
       statement_timestamp(),
       count(*),
       {_push_next},
       {_pop_next}
FROM {ring};

-- ring_notify --
-- Wakes the workers LISTENing on the queue's channel (see split_notify).
SELECT pg_notify(%(channel)s, '');
