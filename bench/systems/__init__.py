"""Every benchmarked system, by name. Peer libraries are imported lazily inside their
systems, so a missing optional package only removes that system from the run."""

from bench.systems import dbqueue_core, dbqueue_django, references
from bench.systems.base import PAYLOAD, REGISTRY, System, Tally

__all__ = ["PAYLOAD", "REGISTRY", "System", "Tally", "dbqueue_core", "dbqueue_django", "references"]
