"""The benchmark harness: dbqueue's layouts, the naive baseline, the physical reference and
peer libraries, through the same workloads on ONE PostgreSQL, reported as ratios.

Run ``python -m bench --help`` (or ``make bench`` / ``make bench-quick``).
"""
