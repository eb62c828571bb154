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

-- _compact_claim --
-- Compaction's first statement (see dbqueue.compaction): the lock timeout of its transaction,
-- and its advisory lock, tried, never awaited: one compactor per queue at a time.
SELECT set_config('lock_timeout', %(lock_timeout)s, true) AS lock_timeout,
       pg_try_advisory_xact_lock(%(compact_key)s) AS got
