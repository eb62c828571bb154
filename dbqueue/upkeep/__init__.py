"""Upkeep: keeping a queue's tables fast and small when a long transaction holds PostgreSQL's
xmin horizon, without ever changing what a snapshot sees.

A transaction left open anywhere in the database (a REPEATABLE READ report, a ``pg_dump``, a
session idle in transaction after a write, a replica's ``hot_standby_feedback``, a logical
slot) keeps every row version that died after it began: VACUUM may not remove them, page
pruning may not either. A queue kills versions at every message, so while the horizon is held
its tables grow by what MVCC forces, and after it ends they must be given back. What dbqueue
may do about it is bounded by the promise that makes a queue in the application's database
worth having: a backup, a replica or a report sees the queue as it was at its snapshot. So
nothing here truncates a table that holds live rows or gives live rows new versions; space is
given back only where PostgreSQL's own VACUUM could remove it.

- :mod:`~dbqueue.upkeep.compaction`: ``VACUUM (FULL)`` once the horizon has moved on. It
  copies every version some snapshot may still see, with its transaction ids, so it changes
  nothing any snapshot sees; it runs only when a plain VACUUM has just shown that the copy
  is small.
"""
