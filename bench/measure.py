"""Measurements and their statistics: median of the runs, min and max, ratios."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Measurement:
    """One figure: a system in a workload with parameters, measured ``len(runs)`` times."""

    system: str
    workload: str
    params: dict[str, Any]
    runs: list[float]
    unit: str = "msg/s"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else float("nan")

    @property
    def key(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        """Workload and parameters: what makes two systems' figures comparable."""
        return (self.workload, tuple(sorted(self.params.items())))

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            median=self.median,
            min=min(self.runs) if self.runs else None,
            max=max(self.runs) if self.runs else None,
        )
        return d


def ratios(results: list[Measurement], reference: str = "thin") -> dict[int, float]:
    """For each measurement (by index), its median divided by the reference's, same key."""
    refs = {m.key: m.median for m in results if m.system == reference}
    out = {}
    for i, m in enumerate(results):
        ref = refs.get(m.key)
        if ref:
            out[i] = m.median / ref
    return out


def params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "-"
