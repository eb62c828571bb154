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
-- Compaction's first statement (see dbqueue.upkeep.compaction), outside any transaction: its
-- advisory lock, tried, never awaited (one compactor per queue at a time), held by the session
-- until _compact_done; and the session's lock timeout (what VACUUM FULL waits for each table's
-- lock), the one it had coming back to be restored by _compact_done.
WITH old AS MATERIALIZED (
    SELECT current_setting('lock_timeout') AS lock_timeout
)
SELECT pg_try_advisory_lock(%(compact_key)s) AS got, old.lock_timeout,
       set_config('lock_timeout', %(lock_timeout)s, false) AS now
FROM old

-- _compact_done --
-- Compaction's last statement, whatever happened: the claim given up if it was taken
-- (%(got)s), the lock timeout restored (%(lock_timeout)s: the one _compact_claim returned).
SELECT CASE WHEN %(got)s THEN pg_advisory_unlock(%(compact_key)s) END,
       set_config('lock_timeout', %(lock_timeout)s, false)
