"""The chaos run (``make chaos``, ``python -m bench.chaos``): producers and workers on a split
queue and a ring, on a throwaway PostgreSQL cluster, while the run kills workers (SIGKILL),
restarts the server (``pg_ctl restart -m immediate``), stops a worker past its lease
(SIGSTOP), holds a long transaction and makes REPEATABLE READ every new session's default
for a while; then a total-queue check over every push that
returned: nothing lost, nothing unexpected, duplicates within the leases that expired, none
through transactional pops.

Modules: :mod:`.cluster` (the server), :mod:`.actors` (the processes, run as
``python -m bench.chaos.actors``), :mod:`.check` (the check), :mod:`.__main__` (the run and its
report).
"""
