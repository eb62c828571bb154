-- The statements of a ring with consumer groups (QueueOptions.groups) that differ from
-- ring.sql's, which they replace for such a queue (dbqueue.sql.render); see dbqueue.ring's
-- "Consumer groups". The slot table {slots} holds the payload of message p in slot
-- mod(p, C), written by pushers only. Each group has a state table of its own, a narrow row per
-- slot (seq, state, attempts, lease, last error: ring.sql's slot protocol without the
-- payload), its side table and its pop counter. A group's statements are ring.sql's, run on
-- its state table ({ring} there), reading the payload from the slot table.
--
-- A push marks the message ready in every group's row of its slot, in the statement that
-- writes the payload, and only where every group has settled the slot's previous lap (its row
-- empty and holding p - C): the slot is free only once every group is done with it. The
-- group rows are locked before anything is written, and nothing is written unless all of them
-- are free, so a push lands in every group or in none.
--
-- Blocks named _each_* are written once per group, their {g...} placeholders filled in with
-- that group's: {i} its position, {g_name} its name (an identifier, as a literal), {g} its
-- state table, {g_side} its side table, {g_pop_rel} its pop counter, {g_return} the state
-- ring_return leaves its row in, and {g_union}, {g_intersect}, {g_plus} the operator that joins
-- it to the group before it (nothing for the first group). A block that ends in _locked is
-- its namesake with SKIP LOCKED where that locks ({skip}).

-- _each_free --
-- A fragment of the pushes: group {i}'s rows of the slots of the messages `r` that are free
-- (empty and holding p - C), locked ({skip}: SKIP LOCKED inside a caller's transaction, see
-- ring.sql's _locked).
, k{i} AS (
    SELECT r.p FROM {g} AS t JOIN r ON t.slot = mod(r.p, %(capacity)s::bigint)
    WHERE t.slot = ANY(ARRAY(SELECT mod(p, %(capacity)s::bigint) FROM r))
      AND t.state = {slot_empty} AND t.seq = r.p - %(capacity)s::bigint
    FOR UPDATE OF t{skip}
)

-- _each_in_all --
-- A fragment of the pushes: the numbers whose slot is free in every group.
{g_intersect} SELECT p FROM k{i}

-- _each_mark --
-- A fragment of the pushes: each landing message marked ready in group {i}'s row of its slot.
, w{i} AS (
    UPDATE {g} AS t
    SET seq = o.p, state = {slot_ready}, attempts = 0, pushed_at = statement_timestamp(),
        lease_until = NULL, last_error = NULL
    FROM ok AS o
    WHERE t.slot = ANY(ARRAY(SELECT mod(p, %(capacity)s::bigint) FROM ok))
      AND t.slot = mod(o.p, %(capacity)s::bigint) AND t.seq = o.p - %(capacity)s::bigint
      AND t.state = {slot_empty}
)

-- _fan_out_rest --
-- A fragment of _fan_out, after the locks.
, ok AS MATERIALIZED (
    {_each_in_all}
){_each_mark}, u AS (
    UPDATE {slots} AS t SET {_pushed} FROM r
    WHERE t.slot = ANY(ARRAY(SELECT mod(p, %(capacity)s::bigint) FROM ok))
      AND t.slot = mod(r.p, %(capacity)s::bigint) AND r.p = ANY(ARRAY(SELECT p FROM ok))
    RETURNING t.seq
)

-- _fan_out --
-- The pushes of the messages `r`: locked in every group ({_each_free}), the numbers free in
-- all ({_each_in_all}), marked in every group ({_each_mark}), and the payload written.
{_each_free}{_fan_out_rest}

-- _fan_out_locked --
{_each_free_locked}{_fan_out_rest}

-- ring_push --
WITH {_one}{_fan_out}
{_landed};

-- ring_push_locked --
WITH {_one}{_fan_out_locked}
{_landed};

-- ring_push_many --
WITH {_batch}{_fan_out}
{_landed};

-- ring_push_many_locked --
WITH {_batch}{_fan_out_locked}
{_landed};

-- _each_outcome --
-- A fragment of ring_push_blocked: what group {i}'s row of the slot says of number p (the
-- cases of ring.sql's ring_push_blocked, for that group: {push_wait} when the group has not
-- claimed the message it holds: it is `behind` numbers behind p).
{g_union} SELECT {i} AS i, {g_name} AS grp, t.slot, t.seq, t.state, CASE
        WHEN t.seq >= r.p THEN {push_renew}
        WHEN t.state = {slot_empty} THEN {push_write}
        WHEN t.state = {slot_ready} AND t.seq >= (
            SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {g_pop_rel})
            THEN {push_wait}
        WHEN t.state = {slot_ready}
             AND t.pushed_at > statement_timestamp() - %(hole_timeout)s::interval
            THEN {push_renew}
        WHEN %(evict)s THEN {push_evict}
        ELSE {push_renew}
    END AS outcome,
    r.p - (
        SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {g_pop_rel})
        AS behind
    FROM {g} AS t, r
    WHERE t.slot = mod(r.p, %(capacity)s::bigint)

-- _each_take --
-- A fragment of ring_push_blocked: group {i}'s row, locked if the push goes ahead and it is
-- still as decided.
, k{i} AS (
    SELECT t.*, s.outcome FROM {g} AS t, s
    WHERE s.i = {i} AND t.slot = s.slot AND t.seq = s.seq AND t.state = s.state
      AND (SELECT go FROM o)
    FOR UPDATE OF t SKIP LOCKED
)

-- _each_move --
-- A fragment of ring_push_blocked, once every group's row is locked: the copy a consumer of
-- group {i} holds moved to the group's side table (as ring.sql's ring_push_blocked moves it,
-- its payload read from the slot), and the row marked.
, moved{i} AS (
    INSERT INTO {g_side} {_evicted}{d_columns}
    FROM k{i} AS k JOIN {slots} AS d ON d.slot = k.slot
    WHERE k.outcome = {push_evict} AND (SELECT got FROM taken)
), w{i} AS (
    UPDATE {g} AS t
    SET seq = r.p, state = {slot_ready}, attempts = 0, pushed_at = statement_timestamp(),
        lease_until = NULL, last_error = NULL
    FROM k{i} AS k, r
    WHERE t.slot = k.slot AND (SELECT got FROM taken)
)

-- _each_locked --
{g_plus} (SELECT count(*) FROM k{i})

-- ring_push_blocked --
-- A number whose slot was not free in every group, decided per group as ring.sql's
-- ring_push_blocked decides for a slot ({_each_outcome}), then for the push: {push_renew} if
-- any group says so; else {push_wait} if any group has not claimed the message it holds in
-- the slot (the ring is full for that group: `lagging` names them, with how far behind they
-- are); else the push goes ahead, every group's row locked (SKIP LOCKED: any row being
-- written makes it {push_busy}), the copies consumers hold moved aside, and written.
WITH r AS (
    SELECT %(p)s::bigint AS p{r_params}
), s AS (
    {_each_outcome}
), o AS (
    SELECT CASE WHEN bool_or(outcome = {push_renew}) THEN {push_renew}
                WHEN bool_or(outcome = {push_wait}) THEN {push_wait}
                WHEN bool_or(outcome = {push_evict}) THEN {push_evict}
                ELSE {push_write} END AS outcome,
           NOT bool_or(outcome IN ({push_renew}, {push_wait})) AS go,
           string_agg(grp || ' (' || behind || ' behind)', ', ' ORDER BY i)
               FILTER (WHERE outcome = {push_wait}) AS lagging
    FROM s
){_each_take}, taken AS MATERIALIZED (
    SELECT {_each_locked} = {group_count} AS got
){_each_move}, u AS (
    UPDATE {slots} AS t
    SET {_pushed}
    FROM r
    WHERE t.slot = mod(r.p, %(capacity)s::bigint) AND (SELECT got FROM taken)
)
SELECT r.p AS number,
       CASE WHEN o.go AND NOT (SELECT got FROM taken) THEN {push_busy} ELSE o.outcome END
           AS outcome,
       (SELECT seq FROM {slots} WHERE slot = mod(r.p, %(capacity)s::bigint)) AS slot_seq,
       o.lagging
FROM r, o;

-- _each_return_free --
-- A fragment of ring_return: group {i}'s rows of the slots of the returning messages `m` that
-- are free for them (empty, holding the number minus C or lapping behind it), locked, SKIP
-- LOCKED (ring.sql's ring_return: a slot a push in flight holds is skipped).
, free{i} AS (
    SELECT t.slot FROM {g} AS t JOIN m ON t.slot = mod(m.p, %(capacity)s::bigint)
    WHERE t.slot = ANY(ARRAY(SELECT mod(p, %(capacity)s::bigint) FROM m))
      AND t.state = {slot_empty} AND t.seq <= m.p - %(capacity)s::bigint
    FOR UPDATE OF t SKIP LOCKED
)

-- _each_return_in_all --
{g_union} SELECT slot FROM free{i}

-- _each_return_mark --
-- A fragment of ring_return: the returned messages in group {i}'s rows: ready where the
-- message goes to this group ({g_return} = {slot_ready}, attempts kept), else settled (a hole
-- for the group's poppers, who drop the claim).
, w{i} AS (
    UPDATE {g} AS t
    SET seq = m.p, state = {g_return}, attempts = m.attempts,
        pushed_at = statement_timestamp(), lease_until = NULL, last_error = m.last_error
    FROM m
    WHERE t.slot = ANY(ARRAY(SELECT slot FROM run)) AND t.slot = mod(m.p, %(capacity)s::bigint)
)

-- ring_return --
-- ring.sql's ring_return for a ring with consumer groups: the due messages of {failed} pushed
-- again at the tail where their slot is free in every group, written into the slot table and
-- into the groups' rows. A group's side table returns its messages to that group only; the
-- queue's own (messages that spilled before any group got them) to every group.
WITH {_due_aside}{_each_return_free}, free AS (
    {_each_return_in_all}
), run AS MATERIALIZED (
    SELECT o.slot FROM (
        SELECT a.slot, bool_and(a.slot IS NOT NULL) OVER (ORDER BY m.p) AS unbroken
        FROM m LEFT JOIN (
            SELECT slot FROM free GROUP BY slot HAVING count(*) = {group_count}
        ) AS a ON a.slot = mod(m.p, %(capacity)s::bigint)
    ) AS o
    WHERE o.unbroken
){_each_return_mark}, placed AS (
    UPDATE {slots} AS t
    SET seq = m.p, state = {slot_ready}, attempts = 0, pushed_at = statement_timestamp(),
        lease_until = NULL, last_error = NULL{set_m}
    FROM m
    WHERE t.slot = ANY(ARRAY(SELECT slot FROM run)) AND t.slot = mod(m.p, %(capacity)s::bigint)
    RETURNING m.id
){_returned};
