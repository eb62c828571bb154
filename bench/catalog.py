"""Every workload of the harness, by name, in the order a run takes them."""

from bench import longtx, soak, stuck, workloads

WORKLOADS: dict[str, workloads.Runner] = {
    **workloads.WORKLOADS,
    "bloat": soak.bloat,
    "longtx": longtx.longtx,
    "stuck": stuck.stuck,
}
