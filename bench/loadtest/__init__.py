"""The example shop under load (``make loadtest``, ``python -m bench.loadtest``): gunicorn
serving ``POST /orders/`` to a load generator while the shop's worker is killed with SIGKILL,
stopped for longer than the ``OrderEvent`` ring lasts, and the web's connections are cut with
``pg_terminate_backend``; then SQL checks that every order has exactly one confirmation and one
sale.

Modules: :mod:`.shop` (the processes: gunicorn, the worker, the database), :mod:`.load` (the
load generator and its figures), :mod:`.server_log` (the web's errors, one line each, and
their causes), :mod:`.shop_settings` (the shop's settings with that log and a file outbox),
:mod:`.verify` (the checks), :mod:`.scenario` (the timeline), :mod:`.throughput` (req/s by
``CONN_MAX_AGE``), :mod:`.report` and :mod:`.__main__` (the command).
"""
