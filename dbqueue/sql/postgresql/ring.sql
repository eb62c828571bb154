-- The ring layout on PostgreSQL: `capacity` preallocated slots that are only ever UPDATEd (the
-- LMAX Disruptor in SQL, see dbqueue/ring/__init__.py). Message number n lives in slot
-- mod(n, capacity); a slot's `seq` is the number it last held (or was marked for), so a pusher
-- of p may write slot mod(p, C) only while it is empty and holds p - C, and a popper of q may
-- take it only while it is ready and holds q. Every statement is conditional on those columns,
-- which makes a late, duplicated or crashed participant harmless: its UPDATE matches no row.
--
-- States are written as {slot_*} (a slot: dbqueue.ring.states.SlotState) and {side_*} (a row of
-- the side table `{failed}`: dbqueue.message.State), filled in from those enums. The side table
-- holds the messages that are out of the ring: waiting out a retry's back-off or put aside to
-- be pushed again at the tail (ready, due at run_at), leases a pusher moved out of its way
-- (leased, until lease_until, with their token), and failed ones. A slot is never held hostage
-- by a consumer: a failed attempt leaves its slot at once, and a pusher that meets a leased or a
-- stranded message moves it to the side table and writes its own.
--
-- No statement changes `slot`, the only indexed column, so every update can be HOT. No hot
-- statement waits for a row lock in practice: a slot is written only by the holder of its
-- number, and the rare statements that meet someone else's slot (ring_push_blocked, the
-- sweeper) lock it SKIP LOCKED. Sequence numbers are not transactional: a rolled-back or
-- crashed pusher leaves a hole, a popper that dies or rolls back strands a message; both are
-- repaired (ring_mark_holes, ring_sweep_holes, ring_push_blocked, ring_sweep).
--
-- Arrays bound as parameters are read through sub-selects, `unnest((SELECT %(ids)b...))`, and
-- slots are found with `slot = ANY(ARRAY(SELECT ...))`: the planner then costs them alike
-- whether it plans for the actual values or generically, reaches the slots by primary key, and
-- keeps the prepared statement's generic plan (a re-plan at every call cost more than the run).

-- _push_next --
(SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {push_seq_rel})

-- _pop_next --
(SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {pop_seq_rel})

-- _pushed --
-- The SET list of a push: the message `r` (number p, payload c0..) written into its slot.
seq = r.p, state = {slot_ready}, attempts = 0, pushed_at = statement_timestamp(),
        lease_until = NULL, last_error = NULL{set_r}

-- _free --
-- A fragment of the pushes: the slot of each message `r` is empty and holds p - C.
t.slot = ANY(ARRAY(SELECT mod(p, %(capacity)s::bigint) FROM r))
      AND t.slot = mod(r.p, %(capacity)s::bigint) AND t.state = {slot_empty}
      AND t.seq = r.p - %(capacity)s::bigint

-- _locked --
-- A fragment of the pushes inside a caller's transaction: the free slots of `r`, locked first
-- and SKIP LOCKED. A plain UPDATE that meets a slot someone else is writing waits for them,
-- and if its condition fails on the new version it keeps that row locked until the caller's
-- transaction ends (PostgreSQL locks the newest version before it rechecks): a popper or the
-- next pusher of that slot would then wait for the caller. So a push in a transaction never
-- waits for a row (measured: about 8% more per push); an autocommit push releases whatever it
-- locked at once, and takes the plain path.
k AS (
    SELECT t.slot FROM {ring} AS t, r
    WHERE {_free}
    FOR UPDATE OF t SKIP LOCKED
)

-- _landed --
-- A fragment of the pushes: one row per message, in input order: its number, and whether it
-- landed (a push that did not goes on with ring_push_blocked for that number).
SELECT r.p AS number, u.seq IS NOT NULL AS landed
FROM r LEFT JOIN u ON u.seq = r.p
ORDER BY r.ord

-- _one --
-- A fragment: the message of a single push (a new number, or under backpressure the same
-- number again, %(p)s).
r AS (
    SELECT COALESCE(%(p)s::bigint, nextval({push_seq})) AS p, 1 AS ord{r_params}
)

-- _batch --
-- A fragment: the messages of a batch push, numbers taken in input order (NULL in %(ps)s = a
-- new number).
r AS MATERIALIZED (
    SELECT COALESCE(r.p, nextval({push_seq})) AS p, r.ord{r_columns}
    FROM unnest((SELECT %(ps)b::bigint[]){payload_arrays}) WITH ORDINALITY AS r(p{r_names}, ord)
    ORDER BY r.ord
)

-- ring_push --
-- The hot path: a number written into its slot if the slot is empty and holds p - C.
WITH {_one}, u AS (
    UPDATE {ring} AS t SET {_pushed} FROM r WHERE {_free} RETURNING t.seq
)
{_landed};

-- ring_push_locked --
-- ring_push inside a caller's transaction (see _locked).
WITH {_one}, {_locked}, u AS (
    UPDATE {ring} AS t SET {_pushed} FROM r
    WHERE {_free} AND t.slot = ANY(ARRAY(SELECT slot FROM k))
    RETURNING t.seq
)
{_landed};

-- ring_push_many --
-- The hot path of a batch: each message written where its slot is free for it.
WITH {_batch}, u AS (
    UPDATE {ring} AS t SET {_pushed} FROM r WHERE {_free} RETURNING t.seq
)
{_landed};

-- ring_push_many_locked --
-- ring_push_many inside a caller's transaction (see _locked).
WITH {_batch}, {_locked}, u AS (
    UPDATE {ring} AS t SET {_pushed} FROM r
    WHERE {_free} AND t.slot = ANY(ARRAY(SELECT slot FROM k))
    RETURNING t.seq
)
{_landed};

-- _evicted --
-- A fragment of ring_push_blocked: the columns of a side row, and their values for a message
-- a consumer held in slot `k` (a lease, moved with its token; a claimed message, ready now),
-- before the payload's.
(id, state, attempts, pushed_at, failed_at, run_at, lease_until, last_error{columns})
    SELECT k.seq,
           CASE WHEN k.state = {slot_leased} THEN {side_leased} ELSE {side_ready} END,
           k.attempts, k.pushed_at, statement_timestamp(),
           CASE WHEN k.state = {slot_leased} THEN NULL ELSE statement_timestamp() END,
           CASE WHEN k.state = {slot_leased} THEN k.lease_until END, k.last_error

-- ring_push_blocked --
-- A number whose slot was not free for it, decided on the slot as it is now:
--   {push_renew}: the slot is past the number (a popper marked it a hole, or a pusher wrote
--       over the gap): take a new number. Also when %(evict)s is false (the push runs in a
--       caller's transaction, which would hold the moved message's row until it ends) and a
--       consumer holds the slot: the stuck slot stays for the next pusher or the sweeper. And
--       for a ready message pushed less than hole_timeout ago whose number a popper claimed:
--       that popper found it not landed yet and takes it at its next pop (moved aside, it
--       would wait for the sweeper); the pusher goes on with another slot meanwhile.
--   {push_write}: the slot is empty and laps behind (the numbers in between were handed to
--       pushers that died, rolled back or took new ones): written over the gap at once.
--   {push_evict}: a consumer holds the slot: a leased message (moved aside with its token,
--       leased until the same time, so its consumer's ack finds it) or a ready message whose
--       number a popper already claimed (stranded by a popper that died or rolled back, or
--       about to be taken: put aside ready, pushed again at the tail by the sweeper). Then
--       the push is written.
--   {push_wait}: the slot holds a ready message no popper has claimed yet: the ring really
--       holds `capacity` undelivered messages. Backpressure: try the same number again later.
--   {push_busy}: the slot changed, or someone is writing it (locked): never waited for.
-- The slot is locked (SKIP LOCKED) only to write it: a lock taken to decide would be kept to
-- the end of the caller's transaction, and the popper of the message in that slot would wait
-- for it while this push waits for that popper.
WITH r AS (
    SELECT %(p)s::bigint AS p{r_params}
), s AS (
    SELECT t.slot, t.seq, t.state, CASE
        WHEN t.seq >= r.p THEN {push_renew}
        WHEN t.state = {slot_empty} THEN {push_write}
        WHEN t.state = {slot_ready} AND t.seq >= {_pop_next} THEN {push_wait}
        WHEN t.state = {slot_ready}
             AND t.pushed_at > statement_timestamp() - %(hole_timeout)s::interval
            THEN {push_renew}
        WHEN %(evict)s THEN {push_evict}
        ELSE {push_renew}
    END AS outcome
    FROM {ring} AS t, r
    WHERE t.slot = mod(r.p, %(capacity)s::bigint)
), k AS (
    SELECT t.*, s.outcome FROM {ring} AS t, s
    WHERE t.slot = s.slot AND s.outcome IN ({push_write}, {push_evict})
      AND t.seq = s.seq AND t.state = s.state
    FOR UPDATE OF t SKIP LOCKED
), moved AS (
    INSERT INTO {failed} {_evicted}{k_columns}
    FROM k WHERE k.outcome = {push_evict}
), u AS (
    UPDATE {ring} AS t
    SET {_pushed}
    FROM k, r
    WHERE t.slot = k.slot
)
SELECT r.p AS number,
       CASE WHEN s.outcome IN ({push_write}, {push_evict}) AND NOT EXISTS (SELECT 1 FROM k)
            THEN {push_busy} ELSE s.outcome END AS outcome,
       s.seq AS slot_seq
FROM r LEFT JOIN s ON true;

-- ring_spill --
-- when_full "spill": the messages of a push that found the ring full (ring_push_blocked said
-- {push_wait}, or a whole lap of numbers found every slot held), written into the side table
-- as spilled under their numbers (%(ps)s, NULL = a new one), due now. The slots are not
-- touched: ring_return pushes the spilled messages into the ring at the tail, in the order
-- they spilled, as slots free up. Their numbers in the ring become holes (see claims.py).
WITH {_batch}, i AS (
    INSERT INTO {failed} (id, state, attempts, pushed_at, failed_at, run_at, lease_until,
                          last_error{columns})
    SELECT r.p, {side_spilled}, 0, statement_timestamp(), statement_timestamp(),
           statement_timestamp(), NULL, NULL{r_columns}
    FROM r
)
SELECT r.p AS number FROM r ORDER BY r.ord;

-- _fresh --
-- A fragment of the pops: up to %(k)s new pop numbers, never more than the pushers have handed
-- out (idle poppers must not run ahead of pushers and hoard claims).
SELECT nextval({pop_seq}) AS q
FROM generate_series(1, GREATEST(0, LEAST(%(k)s::bigint, {_push_next} - {_pop_next})))

-- _claims --
-- A fragment of the hot pops: new claims only, at most n of them.
c AS MATERIALIZED (
    {_fresh}
)

-- _claims_held --
-- A fragment of the pops of a popper that holds claims from earlier pops (%(held)s): those
-- and new ones.
c AS MATERIALIZED (
    {_fresh}
    UNION ALL
    SELECT unnest((SELECT %(held)b::bigint[]))
)

-- _claimed --
-- A fragment of the hot pops: the slots of the claims `c` that hold their message.
t.slot = ANY(ARRAY(SELECT mod(q, %(capacity)s::bigint) FROM c))
      AND t.seq = ANY(ARRAY(SELECT q FROM c)) AND t.state = {slot_ready}

-- _claimed_first --
-- _claimed when the claims can be more than n (held ones and new ones): the first n of the
-- slots that hold their message, lowest number first.
t.slot = ANY(ARRAY(
        SELECT s.slot FROM {ring} AS s
        WHERE s.slot = ANY(ARRAY(SELECT mod(q, %(capacity)s::bigint) FROM c))
          AND s.seq = ANY(ARRAY(SELECT q FROM c)) AND s.state = {slot_ready}
        ORDER BY s.seq
        LIMIT %(n)s))
      AND t.seq = ANY(ARRAY(SELECT q FROM c)) AND t.state = {slot_ready}

-- _popped --
-- A fragment of the pops: what RETURNING gives of a message taken.
t.seq, t.attempts, t.pushed_at, t.lease_until, t.last_error{t_payload}

-- _popped_kept --
-- _popped for the removing pops, whose UPDATE clears the payload (_emptied): RETURNING gives
-- the new row, so the payload is read from the row as the statement found it, joined by slot
-- and number ({from_kept}, {and_kept}; a consumer group's from the slot table, as always).
t.seq, t.attempts, t.pushed_at, t.lease_until, t.last_error{kept_payload}

-- _taken --
-- A fragment of the pops: one row per message taken (`u`)...
SELECT u.seq AS number, true AS taken, NULL::bigint AS slot_seq, NULL::smallint AS slot_state,
       u.attempts, u.pushed_at, u.lease_until, u.last_error{u_payload}
FROM u
UNION ALL

-- _missed --
-- ... then one per claim not taken: its number only (the hot path; the popper keeps the claim
-- and looks at its slot at its next pop)... (An anti-join: `<> ALL(ARRAY(...))` compared each
-- claim with every number taken, n * n for a pop of n, 6 ms at 2,000.)
SELECT c.q, false, NULL, NULL, NULL, NULL, NULL, NULL{null_payload}
FROM c WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.seq = c.q)

-- _missed_slots --
-- ... or with its slot as it is now: the popper keeps waiting for the message, or drops the
-- claim (see dbqueue.ring.claims).
SELECT c.q, false, s.seq, s.state, NULL, NULL, NULL, NULL{null_payload}
FROM c JOIN {ring} AS s ON s.slot = mod(c.q, %(capacity)s::bigint)
WHERE s.slot = ANY(ARRAY(SELECT mod(q, %(capacity)s::bigint) FROM c))
  AND c.q <> ALL(ARRAY(SELECT seq FROM u))

-- _lease --
-- A fragment of the leasing pops: the SET list of a leased slot.
state = {slot_leased}, attempts = t.attempts + 1,
        lease_until = statement_timestamp() + %(lease)s::interval

-- _emptied --
-- The SET list of a slot a message leaves (acked, removed, failed or released aside, swept,
-- deleted, purged): empty, its payload cleared ({clear_payload}). An UPDATE writes a whole new
-- version of the row; while a long transaction holds the xmin horizon no version may be
-- removed, and this one, narrow, is one of the three each message leaves behind (push,
-- lease, this): with a 200-byte payload the three came to 924 bytes a message, this one's
-- share about a third. A compaction (VACUUM FULL) also packs the empty slots the ring holds
-- most of the time as tightly as the ring made them. (A consumer group's state rows hold
-- no payload: nothing to clear.)
state = {slot_empty}, lease_until = NULL{clear_payload}

-- _remove --
-- A fragment of the removing pops (at_most_once, autocommit; transactional, in the caller's
-- transaction): the slot is emptied at once. The message counts its attempt.
{_emptied}, attempts = t.attempts + 1

-- ring_pop_leased --
WITH {_claims}, u AS (
    UPDATE {ring} AS t SET {_lease}{from_slots} WHERE {_claimed}
      AND {_relaxed}{and_slots}
    RETURNING {_popped}
)
{_taken}
{_missed};

-- ring_pop_leased_held --
WITH {_claims_held}, u AS (
    UPDATE {ring} AS t SET {_lease}{from_slots} WHERE {_claimed_first}
      AND {_relaxed}{and_slots}
    RETURNING {_popped}
)
{_taken}
{_missed_slots};

-- ring_pop_remove --
WITH {_claims}, u AS (
    UPDATE {ring} AS t SET {_remove}{from_kept} WHERE {_claimed}{and_kept} RETURNING {_popped_kept}
)
{_taken}
{_missed};

-- ring_pop_remove_held --
WITH {_claims_held}, u AS (
    UPDATE {ring} AS t SET {_remove}{from_kept} WHERE {_claimed_first}{and_kept} RETURNING {_popped_kept}
)
{_taken}
{_missed_slots};

-- _tokens --
-- A fragment of ack, ack_pop and extend: the tokens (number, attempts; NULL attempts = any).
tok AS (
    SELECT * FROM unnest((SELECT %(ids)b::bigint[]), (SELECT %(attempts)b::smallint[]))
        AS k(id, attempts)
)

-- _in_slot --
-- A fragment: slot `t` holds the leased message of token `tok`. Only the join condition leads
-- to the slot: each token finds its slot by primary key (a nested loop over the tokens). With a
-- `t.slot = ANY(...)` beside it, the planner took the slots by that list and compared every
-- token with every slot, O(batch^2): 70 ms for an ack of 1,000 against 2 ms.
t.slot = mod(tok.id, %(capacity)s::bigint) AND t.seq = tok.id
      AND t.state = {slot_leased} AND t.attempts = COALESCE(tok.attempts, t.attempts)

-- _in_side --
-- A fragment: side row `f` holds the leased message of token `tok` (a pusher moved it there).
f.id = tok.id AND f.state = {side_leased} AND f.attempts = COALESCE(tok.attempts, f.attempts)

-- _acked --
-- A fragment of ack and ack_pop: the slots of the tokens still leased under them, emptied. A
-- token whose message a pusher moved to the side table is acked there (ring_ack_side).
a AS (
    UPDATE {ring} AS t SET {_emptied}
    FROM tok
    WHERE {_in_slot} AND {_relaxed}
    RETURNING t.seq
)

-- ring_ack --
-- What a worker acks (strict = false): what is still leased under its token. The caller acks
-- the tokens not found here in the side table, by a second statement (whose snapshot sees a
-- move committed while this one waited for the slot).
WITH {_tokens}, {_acked}
SELECT seq AS number FROM a;

-- ring_ack_side --
WITH {_tokens}
DELETE FROM {failed} AS f USING tok
WHERE {_in_side} AND {_relaxed}
RETURNING f.id AS number;

-- ring_ack_strict --
-- Every token still leased under it (in its slot or in the side table), or none: the rows are
-- locked first, then changed only if all of them were found.
WITH {_tokens}, mine AS (
    SELECT t.slot FROM {ring} AS t JOIN tok ON true
    WHERE {_in_slot}
    ORDER BY t.slot
    FOR UPDATE OF t
), aside AS (
    SELECT f.id FROM {failed} AS f JOIN tok ON true
    WHERE {_in_side}
    ORDER BY f.id
    FOR UPDATE OF f
), ok AS (
    SELECT (SELECT count(*) FROM mine) + (SELECT count(*) FROM aside) = %(count)s AS ok
), a AS (
    UPDATE {ring} AS t SET {_emptied}
    WHERE t.slot = ANY(ARRAY(SELECT slot FROM mine)) AND (SELECT ok FROM ok) AND {_relaxed}
    RETURNING t.seq
), d AS (
    DELETE FROM {failed} AS f
    WHERE f.id = ANY(ARRAY(SELECT id FROM aside)) AND (SELECT ok FROM ok)
    RETURNING f.id
)
SELECT seq AS number FROM a UNION ALL SELECT id FROM d;

-- _then_lease --
-- A fragment of ack_pop: the rows of the pop, after the first columns that tell the ack's
-- outcome (with nothing popped there is one row, its other columns NULL). The acked numbers
-- go on one row only (the lowest number's): on every row, a batch of n sent n * n numbers,
-- 8 MB for n = 1,000, and the worker's loop ran 6x slower at 1,000 than at 100 a batch.
SELECT (SELECT count(*) FROM a) AS acked,
       CASE WHEN rows.number IS NOT DISTINCT FROM (SELECT min(number) FROM rows)
            THEN (SELECT array_agg(seq) FROM a) END AS acked_ids,
       rows.*
FROM (SELECT 1) AS one LEFT JOIN rows ON true

-- ring_ack_pop --
-- A worker's loop in one statement: free the slots of the batch just handled (what is still
-- leased under its token; the caller acks the rest in the side table), lease the next. The
-- ack touches leased slots, the pop ready ones: never the same row.
WITH {_tokens}, {_acked}, {_claims}, u AS (
    UPDATE {ring} AS t SET {_lease}{from_slots} WHERE {_claimed}{and_slots} RETURNING {_popped}
), rows AS (
    {_taken}
    {_missed}
)
{_then_lease};

-- ring_ack_pop_held --
WITH {_tokens}, {_acked}, {_claims_held}, u AS (
    UPDATE {ring} AS t SET {_lease}{from_slots} WHERE {_claimed_first}{and_slots} RETURNING {_popped}
), rows AS (
    {_taken}
    {_missed_slots}
)
{_then_lease};

-- ring_fail --
-- A failed attempt leaves the ring at once, so that no slot waits out a back-off: to the side
-- table, ready again at now + its delay (pushed again at the tail by the sweeper once due), or
-- failed for good once attempts >= max_attempts. A message a pusher moved to the side table
-- changes state there. Strict: every token still leased, or nothing changes.
WITH tok AS (
    SELECT * FROM unnest((SELECT %(ids)b::bigint[]), (SELECT %(attempts)b::smallint[]),
                         (SELECT %(delays)b::interval[]), (SELECT %(errors)b::text[]))
        AS k(id, attempts, delay, error)
), mine AS (
    SELECT t.*{d_payload}, tok.delay, tok.error AS new_error
    FROM {ring} AS t{join_slots} JOIN tok ON true
    WHERE {_in_slot}
    ORDER BY t.slot
    FOR UPDATE OF t
), aside AS (
    SELECT f.id, tok.delay, tok.error FROM {failed} AS f JOIN tok ON true
    WHERE {_in_side}
    ORDER BY f.id
    FOR UPDATE OF f
), ok AS (
    SELECT NOT %(strict)s
           OR (SELECT count(*) FROM mine) + (SELECT count(*) FROM aside) = %(count)s AS ok
), moved AS (
    INSERT INTO {failed} (id, state, attempts, pushed_at, failed_at, run_at, lease_until,
                          last_error{columns})
    SELECT m.seq,
           CASE WHEN m.attempts >= %(max_attempts)s THEN {side_failed} ELSE {side_ready} END,
           m.attempts, m.pushed_at, statement_timestamp(),
           CASE WHEN m.attempts < %(max_attempts)s THEN statement_timestamp() + m.delay END,
           NULL, m.new_error{m_columns}
    FROM mine AS m WHERE (SELECT ok FROM ok)
    RETURNING id, state
), freed AS (
    UPDATE {ring} AS t SET {_emptied}
    WHERE t.slot = ANY(ARRAY(SELECT slot FROM mine)) AND (SELECT ok FROM ok)
), side AS (
    UPDATE {failed} AS f
    SET state = CASE WHEN f.attempts >= %(max_attempts)s THEN {side_failed} ELSE {side_ready} END,
        run_at = CASE WHEN f.attempts < %(max_attempts)s THEN statement_timestamp() + a.delay END,
        lease_until = NULL, failed_at = statement_timestamp(), last_error = a.error
    FROM aside AS a
    WHERE f.id = a.id AND (SELECT ok FROM ok)
    RETURNING f.id, f.state
)
SELECT id AS number, state FROM moved UNION ALL SELECT id, state FROM side;

-- ring_release --
-- Leased messages handed back unstarted (a worker stopping), the attempt their pop counted
-- taken back. The pop sequence has passed their slots, so they go where a message waits to be
-- pushed again at the tail: the side table, ready and due now (the caller then returns them).
-- A message a pusher had moved aside is made ready there.
WITH {_tokens}, mine AS (
    SELECT t.*{d_payload} FROM {ring} AS t{join_slots} JOIN tok ON true
    WHERE {_in_slot}
    ORDER BY t.slot
    FOR UPDATE OF t
), moved AS (
    INSERT INTO {failed} (id, state, attempts, pushed_at, failed_at, run_at, lease_until,
                          last_error{columns})
    SELECT m.seq, {side_ready}, m.attempts - 1, m.pushed_at, statement_timestamp(),
           statement_timestamp(), NULL, m.last_error{m_columns}
    FROM mine AS m
    RETURNING id
), freed AS (
    UPDATE {ring} AS t SET {_emptied}
    WHERE t.slot = ANY(ARRAY(SELECT slot FROM mine))
), side AS (
    UPDATE {failed} AS f
    SET state = {side_ready}, run_at = statement_timestamp(), lease_until = NULL,
        attempts = f.attempts - 1
    FROM tok
    WHERE {_in_side}
    RETURNING f.id
)
SELECT id AS number FROM moved UNION ALL SELECT id FROM side;

-- ring_extend --
-- Heartbeat: the leases still held under their token pushed further out (ring_extend_side
-- for those a pusher moved to the side table).
WITH {_tokens}
UPDATE {ring} AS t SET lease_until = statement_timestamp() + %(lease)s::interval
FROM tok
WHERE {_in_slot}
RETURNING t.seq AS number;

-- ring_extend_side --
WITH {_tokens}
UPDATE {failed} AS f SET lease_until = statement_timestamp() + %(lease)s::interval
FROM tok
WHERE {_in_side}
RETURNING f.id AS number;

-- ring_not_leased --
-- Diagnosis for NotLeased errors only (never on the hot path).
WITH {_tokens}
SELECT tok.id AS number FROM tok
WHERE NOT EXISTS (SELECT 1 FROM {ring} AS t WHERE {_in_slot})
  AND NOT EXISTS (SELECT 1 FROM {failed} AS f WHERE {_in_side});

-- ring_mark_holes --
-- A popper's claims that stayed unfilled past hole_timeout although the pushers handed their
-- numbers out: the pusher rolled back or died. Mark the slot as holding the number, so a late
-- pusher fails its condition and takes a new number. A slot locked by a push still in flight
-- (a long transaction) is skipped, never waited for. A slot laps behind the claim is marked
-- too: the numbers in between were handed out before the claim's, so they are older holes.
WITH c AS (
    SELECT unnest((SELECT %(held)b::bigint[])) AS q
), holes AS (
    SELECT t.slot, c.q FROM {ring} AS t JOIN c ON t.slot = mod(c.q, %(capacity)s::bigint)
    WHERE t.slot = ANY(ARRAY(SELECT mod(q, %(capacity)s::bigint) FROM c))
      AND t.state = {slot_empty} AND t.seq <= c.q - %(capacity)s::bigint AND c.q < {_push_next}
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE {ring} AS t
SET seq = holes.q, pushed_at = NULL
FROM holes
WHERE t.slot = holes.slot AND t.state = {slot_empty} AND t.seq <= holes.q - %(capacity)s::bigint
RETURNING t.seq AS number;

-- _sweep_lock --
-- One sweeper per queue at a time: a transaction-scoped advisory lock, tried, never awaited.
lock AS (
    SELECT pg_try_advisory_xact_lock(%(lock_key)s) AS got
)

-- ring_sweep --
-- The sweeper's first step, in small batches: messages consumers left in their slots are put
-- aside, freeing the slots. Expired leases (the popper died or overran): ready again (with the
-- rescue's error) or, after their last attempt, failed. Stranded messages, whose number a
-- popper claimed long ago but never took (it died, or rolled a transactional pop back): ready.
-- ring_return then pushes the ready ones again at the tail.
WITH {_sweep_lock}, v AS (
    SELECT t.*{d_payload} FROM {ring} AS t{join_slots}
    WHERE (SELECT got FROM lock) AND (
        (t.state = {slot_leased} AND t.lease_until < statement_timestamp())
        OR (t.state = {slot_ready} AND t.seq < {_pop_next}
            AND t.pushed_at < statement_timestamp() - %(stranded_after)s::interval))
    ORDER BY t.seq
    LIMIT %(n)s
    FOR UPDATE OF t SKIP LOCKED
), moved AS (
    INSERT INTO {failed} (id, state, attempts, pushed_at, failed_at, run_at, lease_until,
                          last_error{columns})
    SELECT v.seq,
           CASE WHEN v.state = {slot_leased} AND v.attempts >= %(max_attempts)s
                THEN {side_failed} ELSE {side_ready} END,
           v.attempts, v.pushed_at, statement_timestamp(),
           CASE WHEN NOT (v.state = {slot_leased} AND v.attempts >= %(max_attempts)s)
                THEN statement_timestamp() END,
           NULL,
           CASE WHEN v.state = {slot_leased} THEN %(error)s ELSE v.last_error END{v_columns}
    FROM v
    RETURNING id, state
), freed AS (
    UPDATE {ring} AS t SET {_emptied}
    WHERE t.slot = ANY(ARRAY(SELECT slot FROM v))
)
SELECT (SELECT count(*) FROM moved WHERE state = {side_ready}) AS ready,
       (SELECT count(*) FROM moved WHERE state = {side_failed}) AS failed,
       (SELECT count(*) FROM v) AS victims;

-- ring_sweep_side --
-- Leases a pusher moved aside that expired: ready again, or failed after their last attempt.
WITH {_sweep_lock}, v AS (
    SELECT id FROM {failed}
    WHERE (SELECT got FROM lock) AND state = {side_leased} AND lease_until < statement_timestamp()
    ORDER BY id
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), u AS (
    UPDATE {failed} AS f
    SET state = CASE WHEN f.attempts >= %(max_attempts)s THEN {side_failed} ELSE {side_ready} END,
        run_at = CASE WHEN f.attempts < %(max_attempts)s THEN statement_timestamp() END,
        lease_until = NULL, failed_at = statement_timestamp(), last_error = %(error)s
    FROM v
    WHERE f.id = v.id
    RETURNING f.state
)
SELECT count(*) FILTER (WHERE state = {side_ready}) AS ready,
       count(*) FILTER (WHERE state = {side_failed}) AS failed,
       count(*) AS victims
FROM u;

-- _due_aside --
-- A fragment of ring_return: the queue's sweeper lock, the due messages of the side table
-- (`f`, locked) and each with a new number (`m`), oldest due first.
{_sweep_lock}, f AS (
    SELECT * FROM {failed}
    WHERE (SELECT got FROM lock) AND state IN ({side_ready}, {side_spilled})
      AND run_at <= statement_timestamp()
    ORDER BY run_at, id
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), m AS MATERIALIZED (
    SELECT nextval({push_seq}) AS p, f.* FROM (SELECT * FROM f ORDER BY run_at, id) AS f
)

-- _returned --
-- A fragment of ring_return: the due messages `m` put in the ring (`placed`, their numbers in
-- the side table) removed from the side table, and the statement's row.
, gone AS (
    DELETE FROM {failed} AS f USING placed WHERE f.id = placed.id
)
SELECT (SELECT count(*) FROM placed) AS placed, (SELECT count(*) FROM f) AS due,
       CASE WHEN (SELECT got FROM lock) THEN false ELSE EXISTS (
           SELECT 1 FROM {failed}
           WHERE state IN ({side_ready}, {side_spilled}) AND run_at <= statement_timestamp()
       ) END AS busy,
       {_push_next} > {_pop_next} AS ahead

-- ring_return --
-- Ready and spilled messages of the side table that are due, pushed again at the tail under
-- new numbers (attempts kept), oldest due first (a spilled message is due when it spilled),
-- while their slots are free (empty, holding the number minus C or laps behind it; a slot a
-- push in flight holds is skipped): from the first message that finds no free slot on, they
-- stay aside (a later one placed would overtake it) and their numbers become holes. `busy`: another
-- sweeper held the queue's lock while messages were due, so this run returned none of them.
-- `ahead`: pushers hold numbers no popper has claimed (messages may be in the ring: another
-- sweeper's return, or a push, committed after the caller's pop looked).
WITH {_due_aside}, free AS (
    SELECT t.slot FROM {ring} AS t JOIN m ON t.slot = mod(m.p, %(capacity)s::bigint)
    WHERE t.slot = ANY(ARRAY(SELECT mod(p, %(capacity)s::bigint) FROM m))
      AND t.state = {slot_empty} AND t.seq <= m.p - %(capacity)s::bigint
    FOR UPDATE OF t SKIP LOCKED
), run AS MATERIALIZED (
    SELECT o.slot FROM (
        SELECT free.slot, bool_and(free.slot IS NOT NULL) OVER (ORDER BY m.p) AS unbroken
        FROM m LEFT JOIN free ON free.slot = mod(m.p, %(capacity)s::bigint)
    ) AS o
    WHERE o.unbroken
), placed AS (
    UPDATE {ring} AS t
    SET seq = m.p, state = {slot_ready}, attempts = m.attempts,
        pushed_at = statement_timestamp(), lease_until = NULL, last_error = m.last_error{set_m}
    FROM m
    WHERE t.slot = ANY(ARRAY(SELECT slot FROM run)) AND t.slot = mod(m.p, %(capacity)s::bigint)
      AND t.state = {slot_empty} AND t.seq <= m.p - %(capacity)s::bigint
    RETURNING m.id
){_returned};

-- ring_sweep_holes --
-- Holes no popper marks (its popper died, or sits idle holding the claim). An empty slot is
-- advanced to the number it awaits when a later message landed more than hole_timeout ago (so
-- that number's pusher has held it at least that long), and in any case to the last lap
-- before the push sequence's current one: every number in between was handed to a pusher
-- more than a lap ago and never written. Marking is always safe: a pusher whose number was
-- marked fails its condition and takes a new one, and a slot locked by a push in flight is
-- skipped.
WITH {_sweep_lock}, nxt AS MATERIALIZED (
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
        WHERE (SELECT got FROM lock) AND t.state = {slot_empty}
    ) AS d
    WHERE q > seq
), holes AS (
    SELECT t.slot FROM {ring} AS t
    WHERE t.slot = ANY(ARRAY(SELECT slot FROM due)) AND t.state = {slot_empty}
    FOR UPDATE SKIP LOCKED
)
UPDATE {ring} AS t
SET seq = due.q, pushed_at = NULL
FROM due
WHERE t.slot = ANY(ARRAY(SELECT slot FROM holes)) AND t.slot = due.slot
  AND t.state = {slot_empty} AND due.q > t.seq
RETURNING t.seq AS number;

-- ring_next_due --
-- When an idle worker next has work that no push will announce: the earliest due time of a
-- message waiting in the side table (spilled ones included), or expiry of a lease, in a slot
-- or put aside (NULL: none). The slots are read whole: at most `capacity` rows, and only by an
-- idle worker.
SELECT least(
    (SELECT min(CASE WHEN state = {side_leased} THEN lease_until ELSE run_at END)
     FROM {failed} WHERE state IN ({side_ready}, {side_leased}, {side_spilled})),
    (SELECT min(lease_until) FROM {ring} WHERE state = {slot_leased})) AS due;

-- ring_retry --
-- Failed messages made ready again, attempts reset; ring_return pushes them at the tail.
UPDATE {failed}
SET state = {side_ready}, attempts = 0, run_at = statement_timestamp(), lease_until = NULL
WHERE id = ANY(%(ids)b::bigint[]) AND state = {side_failed}
RETURNING id AS number;

-- ring_delete --
-- Messages by number in their slots, whatever their state (ring_delete_side deletes them from
-- the side table; the core runs both in one transaction).
WITH k AS (
    SELECT unnest((SELECT %(ids)b::bigint[])) AS id
)
UPDATE {ring} AS t SET {_emptied}
FROM k
WHERE t.slot = ANY(ARRAY(SELECT mod(id, %(capacity)s::bigint) FROM k))
  AND t.slot = mod(k.id, %(capacity)s::bigint) AND t.seq = k.id AND t.state <> {slot_empty}
RETURNING t.seq AS number;

-- ring_delete_side --
DELETE FROM {failed} WHERE id = ANY(%(ids)b::bigint[])
RETURNING id AS number;

-- _purged_slots --
-- A fragment of ring_purge and ring_count: whether slot `t` holds a message purge(state,
-- older_than) takes (dbqueue.message.StateSelector): %(in_slots)s, whether the state is one
-- a slot holds at all; %(slot_state)s, a SlotState (NULL: any message); pushed longer ago
-- than %(older_than)s (NULL: any age).
%(in_slots)s::boolean AND t.state <> {slot_empty}
AND (%(slot_state)s::smallint IS NULL OR t.state = %(slot_state)s::smallint)
AND (%(older_than)s::interval IS NULL
     OR t.pushed_at < statement_timestamp() - %(older_than)s::interval)

-- _purged_side --
-- The same for a message `f` of the side table: %(state)s, a State (NULL: any; ready takes
-- the spilled ones too, which ring_stats counts as ready); %(due)s tells ready (due now) from
-- scheduled (waiting out a back-off), as ring_stats counts them; older by when it failed if
-- failed (failed_at), else by when it was pushed.
(%(state)s::smallint IS NULL OR f.state = %(state)s::smallint
 OR (%(state)s::smallint = {side_ready} AND f.state = {side_spilled}))
AND (%(due)s::boolean IS NULL OR (f.run_at <= statement_timestamp()) = %(due)s::boolean)
AND (%(older_than)s::interval IS NULL
     OR CASE WHEN f.state = {side_failed} THEN f.failed_at ELSE f.pushed_at END
        < statement_timestamp() - %(older_than)s::interval)

-- ring_purge --
-- The messages of a purge in the slots (emptied), and in the side table (ring_purge_side).
UPDATE {ring} AS t SET {_emptied}
WHERE {_purged_slots}
RETURNING t.seq AS number;

-- ring_purge_side --
DELETE FROM {failed} AS f
WHERE {_purged_side}
RETURNING f.id AS number;

-- ring_count --
-- How many messages ring_purge and ring_purge_side would take now.
SELECT (SELECT count(*) FROM {ring} AS t WHERE {_purged_slots})
       + (SELECT count(*) FROM {failed} AS f WHERE {_purged_side}) AS value;

-- ring_stats --
-- Counts per message state (ready: in a slot or due to be pushed again, spilled ones included;
-- scheduled: waiting out a back-off; leased: in a slot or put aside), the oldest ready
-- message's push time, the slot count (the ring's capacity in the database), the slots in use
-- and the spilled messages (the overflow of a full ring).
WITH r AS (
    SELECT count(*) FILTER (WHERE state = {slot_ready}) AS ready,
           count(*) FILTER (WHERE state = {slot_leased}) AS leased,
           count(*) FILTER (WHERE state = {slot_leased} AND lease_until < statement_timestamp())
               AS expired,
           min(pushed_at) FILTER (WHERE state = {slot_ready}) AS oldest,
           count(*) AS slots
    FROM {ring}
), f AS (
    SELECT count(*) FILTER (WHERE state IN ({side_ready}, {side_spilled})
                                  AND run_at <= statement_timestamp()) AS ready,
           count(*) FILTER (WHERE state = {side_ready} AND run_at > statement_timestamp())
               AS scheduled,
           count(*) FILTER (WHERE state = {side_leased}) AS leased,
           count(*) FILTER (WHERE state = {side_leased} AND lease_until < statement_timestamp())
               AS expired,
           count(*) FILTER (WHERE state = {side_failed}) AS failed,
           min(pushed_at) FILTER (WHERE state IN ({side_ready}, {side_spilled})
                                  AND run_at <= statement_timestamp()) AS oldest,
           count(*) FILTER (WHERE state = {side_spilled}) AS spilled
    FROM {failed}
)
SELECT r.ready + f.ready AS ready, f.scheduled, r.leased + f.leased AS leased,
       r.expired + f.expired AS expired, 0 AS done, f.failed,
       LEAST(r.oldest, f.oldest) AS oldest_ready, statement_timestamp() AS now, r.slots,
       r.ready + r.leased AS in_slots, f.spilled, 0 AS cancelled
FROM r, f;

-- ring_counters --
-- The next number of each counter (a capacity change numbers the new slots on from them). It
-- reads the sequences only: a migration runs it while the other tables may be older.
SELECT {_push_next} AS push_next, {_pop_next} AS pop_next;

-- ring_notify --
-- Wakes the workers LISTENing on the queue's channel (see split_notify).
SELECT pg_notify(%(channel)s, '');

-- _leaves --
-- A fragment: the relations that store the ring's rows: each table of {table_oids} (the slot
-- table or a group's state table, the side table, a group's slot table), each segment of one
-- that is partitioned (which has no storage of its own).
(SELECT c.oid AS relid FROM pg_class AS c
 WHERE c.oid = ANY(ARRAY[{table_oids}]) AND c.relkind <> 'p'
 UNION ALL
 SELECT t.relid FROM unnest(ARRAY[{table_oids}]) AS r, pg_partition_tree(r) AS t
 WHERE t.isleaf)

-- ring_size --
-- The bytes of the ring's tables with their indexes and TOAST: what compaction watches.
SELECT sum(pg_total_relation_size(l.relid)) FROM {_leaves} AS l;

-- ring_vacuum --
-- Compaction's first step (see split_vacuum): a partitioned slot table is vacuumed segment by
-- segment.
VACUUM (SKIP_LOCKED) {tables};

-- ring_kept --
-- Each table of the ring, each segment of a partitioned one, as the last VACUUM left it (see
-- split_kept).
SELECT c.oid::regclass::text AS relation, greatest(c.reltuples, 0)::bigint AS live,
       c.relpages AS pages, c.relallvisible AS visible, pg_relation_filenode(c.oid) AS filenode
FROM {_leaves} AS l JOIN pg_class AS c ON c.oid = l.relid
ORDER BY 1;

-- ring_compact --
-- Compaction's rewrite (see split_compact): a partitioned slot table segment by segment, each
-- in a transaction of its own holding only that segment's lock. Every slot keeps its number,
-- state, lease and payload, and every version some snapshot may still see is copied with it.
VACUUM (FULL, SKIP_LOCKED) {tables};
