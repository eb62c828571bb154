-- Fragments every layout's statements on PostgreSQL may use (see dbqueue.sql.render).

-- _relaxed --
-- A condition of the statements that lease or settle at least once: always true, and with
-- %(commit)s = 'off' the statement's transaction commits without waiting for its WAL flush (see
-- QueueOptions.durable_acks; dbqueue passes 'off' only when the statement is its own
-- transaction, NULL leaves the setting alone). Being a sub-select that reads no row it is a
-- one-time filter, run once before the rows are looked at; had a plan skipped it, the commit
-- would only be synchronous.
(SELECT CASE WHEN %(commit)s::text IS NULL THEN 'kept'
             ELSE set_config('synchronous_commit', %(commit)s::text, true) END) IS NOT NULL

-- _clock --
-- When a row that becomes ready is due (a push's run_at, a retry's, a rescue's, the start of a
-- back-off): the clock as the statement runs, read once (an init plan) after the statement
-- has taken its table locks; not statement_timestamp(), read when the statement arrived,
-- before it may have waited for a lock. A split queue's heads rely on it
-- (dbqueue.upkeep.heads): a row made ready by a writer that took its lock after an advance
-- began is due no earlier than that advance's cap.
(SELECT clock_timestamp())

-- _bands --
-- A fragment of a split queue's pops: the priorities that may have ready items, each with its
-- head, where its items due now begin in the ready index (dbqueue.upkeep.heads). A long
-- transaction elsewhere in the database keeps every index entry of the items taken since it
-- began, dead to every pop and yet to be skipped by each: read from the start, the pops of a
-- five-minute hold at 1,000 msg/s walked up to 300,000 of them (p99 1.8 s). Each row of the
-- head table, and priority 0 (the default, whose pushes do not write the head table) from its
-- start if it has none.
(SELECT priority, run_at FROM {heads}
 UNION ALL
 SELECT 0, '-infinity' WHERE NOT EXISTS (SELECT 1 FROM {heads} WHERE priority = 0))

-- _lowered --
-- A fragment of the statements that make items ready again with the due time they had
-- (`low`: each priority, and the earliest such due time): those priorities' rows in the head
-- table, and their heads lowered to that time where it is past. Always written (LEAST may
-- change nothing): the row is then locked, and an advance running meanwhile, which may
-- already have passed that time, gives up (dbqueue.upkeep.heads).
band AS (
    INSERT INTO {heads} (priority, run_at)
    SELECT priority, '-infinity'::timestamptz FROM low
    ON CONFLICT (priority) DO NOTHING
), lowered AS (
    UPDATE {heads} AS h SET run_at = LEAST(h.run_at, low.run_at)
    FROM low
    WHERE h.priority = low.priority AND low.run_at < {_clock}
)
