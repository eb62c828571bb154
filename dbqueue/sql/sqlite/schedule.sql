-- The schedule table's statements on SQLite (see dbqueue.scheduler). {table} is the schedule
-- table, quoted. Times are bound from Python as UTC text, which compares in time order.

-- schedule_declare --
-- A worker's schedules, upserted as it starts. A changed expression or zone starts the
-- schedule afresh (``since``): ticks of the old one before now are not caught up.
INSERT INTO {table} AS s (name, queue, expression, timezone, since, next_tick)
VALUES (:name, :queue, :expression, :timezone, :now, :next_tick)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue,
    expression = excluded.expression,
    timezone = excluded.timezone,
    since = CASE WHEN s.expression = excluded.expression AND s.timezone = excluded.timezone
                 THEN s.since ELSE excluded.since END,
    next_tick = CASE WHEN s.expression = excluded.expression AND s.timezone = excluded.timezone
                     THEN s.next_tick ELSE excluded.next_tick END

-- schedule_claim --
-- The tick, taken by one worker only: SQLite has one writer at a time, and the claim is the
-- first statement of its transaction, so a second claimant sees the committed last_tick.
UPDATE {table}
SET last_tick = :tick, next_tick = :next_tick
WHERE name = :name AND since <= :tick AND (last_tick IS NULL OR last_tick < :tick)
RETURNING name

-- schedule_rows --
SELECT name, queue, expression, timezone, since, last_tick, next_tick
FROM {table}
ORDER BY name
