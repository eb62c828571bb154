-- The schedule table's statements on PostgreSQL (see dbqueue.scheduler). {table} is the
-- schedule table, quoted.

-- schedule_declare --
-- A worker's schedules, upserted as it starts. A changed expression or zone starts the
-- schedule afresh (``since``): ticks of the old one before now are not caught up.
INSERT INTO {table} AS s (name, queue, expression, timezone, since, next_tick)
VALUES (%(name)s, %(queue)s, %(expression)s, %(timezone)s, %(now)s, %(next_tick)s)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue,
    expression = excluded.expression,
    timezone = excluded.timezone,
    since = CASE WHEN s.expression = excluded.expression AND s.timezone = excluded.timezone
                 THEN s.since ELSE excluded.since END,
    next_tick = CASE WHEN s.expression = excluded.expression AND s.timezone = excluded.timezone
                     THEN s.next_tick ELSE excluded.next_tick END

-- schedule_claim --
-- The tick, taken by one worker only: the row lock makes a concurrent claim wait, and
-- PostgreSQL re-checks its condition against the row the first one committed (READ COMMITTED),
-- where last_tick is the tick already. Run in one transaction with the tick's push.
UPDATE {table}
SET last_tick = %(tick)s, next_tick = %(next_tick)s
WHERE name = %(name)s AND since <= %(tick)s AND (last_tick IS NULL OR last_tick < %(tick)s)
RETURNING name

-- schedule_rows --
SELECT name, queue, expression, timezone, since, last_tick, next_tick
FROM {table}
ORDER BY name
