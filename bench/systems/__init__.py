"""Every benchmarked system, by name: each module of this package defines System subclasses,
which register themselves. Peer libraries are imported lazily inside their systems."""

import importlib
import pkgutil

from bench.systems.base import PAYLOAD, REGISTRY, System, Tally

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["PAYLOAD", "REGISTRY", "System", "Tally"]
