-- The statements of a ring with consumer groups on SQLite that differ from ring.sql's (see
-- postgresql/ring_groups.sql for the layout): one writer and transactional counters, so a
-- push lands at the counter's slot in the slot table and in every group's row of it, or
-- (a group has not settled the slot's previous lap) nowhere. Blocks named _each_* are
-- written once per group (their placeholders: postgresql/ring_groups.sql's); one that is
-- statements is written as one statement per group, which the block that uses it ends.

-- _each_free --
-- A fragment of the pushes: group {i} has settled the slot's previous lap.
AND NOT EXISTS (
    SELECT 1 FROM {g} AS t WHERE t.slot = (SELECT value FROM {push_seq_rel}) % :capacity
      AND NOT (t.state = {slot_empty}
               AND t.seq <= (SELECT value FROM {push_seq_rel}) - :capacity))

-- _each_mark --
-- A fragment of ring_push: the message pushed (:ids) marked ready in group {i}'s row.
UPDATE {g}
SET seq = (SELECT value FROM {push_seq_rel}), state = {slot_ready}, attempts = 0,
    pushed_at = :now, lease_until = NULL, last_error = NULL
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity AND json_array_length(:ids) > 0;

-- ring_push --
UPDATE {slots}
SET seq = (SELECT value FROM {push_seq_rel}), state = {slot_ready}, attempts = 0,
    pushed_at = :now, lease_until = NULL, last_error = NULL{set_params}
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity {_each_free}
RETURNING seq AS number;
{_each_mark};
UPDATE {push_seq_rel} SET value = value + json_array_length(:ids);

-- _each_evict --
-- A fragment of ring_push_blocked: the copy a consumer of group {i} holds in the next slot
-- moved to the group's side table with its token, and the group's row emptied.
INSERT INTO {g_side} (id, state, attempts, pushed_at, failed_at, run_at, lease_until,
                      last_error{columns})
SELECT t.seq, {side_leased}, t.attempts, t.pushed_at, :now, NULL, t.lease_until,
       t.last_error{d_columns}
FROM {g} AS t JOIN {slots} AS d ON d.slot = t.slot
WHERE t.slot = (SELECT value FROM {push_seq_rel}) % :capacity AND t.state = {slot_leased}
RETURNING id AS number;
UPDATE {g} SET state = {slot_empty}, lease_until = NULL
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity AND state = {slot_leased};

-- ring_push_blocked --
-- The next slot was not free in every group: the copies consumers hold there are moved aside
-- (see ring.sql's ring_push_blocked), and the core pushes again. A group whose row holds a
-- ready message has the ring full (ring_lagging names it).
{_each_evict};

-- _each_lagging --
-- A fragment of ring_lagging: group {i}, if its row of the next slot holds a message it has
-- not taken, and how far behind the pushers it is.
{g_union} SELECT {i} AS i, {g_name} AS grp,
       (SELECT value FROM {push_seq_rel}) - (SELECT value FROM {g_pop_rel}) AS behind
FROM {g} AS t
WHERE t.slot = (SELECT value FROM {push_seq_rel}) % :capacity AND t.state = {slot_ready}

-- ring_lagging --
-- For a QueueFull: the groups that hold an untaken message in the next number's slot.
SELECT group_concat(grp || ' (' || behind || ' behind)', ', ') AS lagging
FROM ({_each_lagging} ORDER BY i);

-- _each_return --
-- A fragment of ring_return_one: the returned message (:ids) in group {i}'s row: ready where
-- it goes to this group ({g_return}), else settled (the group's poppers skip it).
UPDATE {g}
SET (seq, state, attempts, pushed_at, lease_until, last_error) = (
    SELECT n.value, {g_return}, f.attempts, :now, NULL, f.last_error
    FROM {failed} AS f, {push_seq_rel} AS n WHERE f.id = :id)
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity AND json_array_length(:ids) > 0;

-- ring_return_one --
-- ring.sql's ring_return_one for a ring with consumer groups: the message goes back at the
-- tail if its slot is free in every group; a group's side table returns it to that group
-- only, the queue's own (spilled before any group got it) to every group.
UPDATE {slots}
SET (seq, state, attempts, pushed_at, lease_until, last_error{columns}) = (
    SELECT n.value, {slot_ready}, 0, :now, NULL, NULL{f_columns}
    FROM {failed} AS f, {push_seq_rel} AS n WHERE f.id = :id)
WHERE slot = (SELECT value FROM {push_seq_rel}) % :capacity {_each_free}
  AND EXISTS (SELECT 1 FROM {failed} WHERE id = :id AND state IN ({side_ready}, {side_spilled}))
RETURNING seq AS number;
{_each_return};
DELETE FROM {failed} WHERE id = :id AND json_array_length(:ids) > 0;
UPDATE {push_seq_rel} SET value = value + json_array_length(:ids);
