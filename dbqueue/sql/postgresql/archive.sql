-- The statements of the archive job (dbqueue.spark.archive), for split and ring queues.
-- Placeholders in braces are identifiers from a validated QueueSpec, quoted by the dialect.
-- The archivable set of a run with cut-off c, X(c), is: split, the meta rows in state done (2)
-- or failed (3) with run_at < c that have their data row; ring, the side table's failed rows
-- with failed_at < c. Every statement that counts or deletes says so with the same predicate.

-- archive_lock --
-- One archive run per queue at a time: a session-level advisory lock, held by the run's
-- connection until it ends (or dies: the server releases it with the session). Tried, never
-- awaited: a second run is refused rather than queued behind the first.
SELECT pg_try_advisory_lock(%(key)s);

-- archive_unlock --
SELECT pg_advisory_unlock(%(key)s);

-- archive_cutoff --
-- The cut-off on the database's clock, the clock that wrote every run_at and failed_at.
SELECT statement_timestamp() - %(older_than)s::interval;

-- _archivable_split --
-- A fragment: X(c) of a split queue's meta row m (done or failed, finished before c).
m.state IN ({state_done}, {state_failed}) AND m.run_at < %(cutoff)s::timestamptz

-- archive_split_count --
SELECT count(*) FROM {meta} AS m JOIN {data} AS d ON d.id = m.id
WHERE {_archivable_split};

-- _archivable_ring --
-- A fragment: X(c) of a ring's side table row (failed, and before c).
state = {side_failed} AND failed_at < %(cutoff)s::timestamptz

-- archive_ring_count --
SELECT count(*) FROM {failed} WHERE {_archivable_ring};

-- archive_split_delete --
-- One batch of archived ids, fenced to the rows still in X(c): a row retried (back to ready)
-- since it was archived no longer matches and stays. A concurrent retry of the same row waits
-- for this statement or makes it skip the row (PostgreSQL re-checks the condition on the
-- row's newest version), so the two never both win. Meta and data rows go in one statement.
WITH m AS (
    DELETE FROM {meta} AS m
    WHERE m.id = ANY(%(ids)b::bigint[]) AND {_archivable_split}
    RETURNING m.id
), d AS (
    DELETE FROM {data} AS d USING m WHERE d.id = m.id
)
SELECT count(*) FROM m;

-- archive_ring_delete --
-- A ring's retry makes a failed row ready again (and pushes it back into the ring under a new
-- number): it no longer matches, and the batch skips it.
WITH f AS (
    DELETE FROM {failed}
    WHERE id = ANY(%(ids)b::bigint[]) AND {_archivable_ring}
    RETURNING id
)
SELECT count(*) FROM f;
