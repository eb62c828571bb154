"""The load test's report: ``loadtest.md`` (tables) and ``loadtest.json`` (every figure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _others(non_2xx: dict[str, int]) -> str:
    return ", ".join(f"{cause}: {n:,}" for cause, n in non_2xx.items()) or "none"


def markdown(summary: dict[str, Any], title: str, notes: list[str]) -> str:
    """The report of one run (``summary``: :meth:`Result.as_dict` and the environment)."""
    plan, config, v = summary["plan"], summary["config"], summary["verdict"]
    overall = summary["overall"]
    lines = [
        f"# {title}",
        "",
        *notes,
        "",
        f"gunicorn: {config['web_workers']} `{config['worker_class']}` worker(s)"
        f"{' x ' + str(config['threads']) + ' threads' if config['threads'] > 1 else ''}, "
        f"`CONN_MAX_AGE={config['conn_max_age']}`, "
        f"`CONN_HEALTH_CHECKS={config['health_checks']}`; the worker: `runqueueworker "
        f"--concurrency {config['worker_concurrency']}`. Offered load: {plan['rate']:g} orders/s "
        f"from {plan['clients']} clients, a new connection per request. The ring `OrderEvent` "
        f"has {summary['ring_capacity']:,} slots.",
        "",
        "## Requests",
        "",
        "| phase | notes | requests | 2xx/s | p50 ms | p99 ms | non-2xx |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for p in summary["phases"]:
        lines.append(
            f"| {p['name']} | {'; '.join(p['notes']) or '-'} | {p['requests']:,} "
            f"| {p['req_per_s']:,.1f} | {_ms(p['p50_ms'])} | {_ms(p['p99_ms'])} "
            f"| {_others(p['non_2xx'])} |"
        )
    lines += [
        f"| **whole run** | {overall['seconds']:.0f} s | {overall['requests']:,} "
        f"| {overall['req_per_s']:,.1f} | {_ms(overall['p50_ms'])} | {_ms(overall['p99_ms'])} "
        f"| {_others(overall['non_2xx'])} |",
        "",
        "Non-2xx answers by cause, from the server's log (status and exception class): "
        + _others(summary["server_causes"])
        + ".",
        "",
        "Most connections at once (`pg_stat_activity`, sampled every 0.25 s): "
        + ", ".join(f"{name or '(unnamed)'} {n}" for name, n in summary["max_connections"].items())
        + f"; {summary['max_connections_total']} in all. Backends of the killed worker, "
        "counted apart (each ends when it next notices its client gone): at most "
        f"{summary.get('max_orphans', 0)} at once.",
        "",
        "## Checks",
        "",
        f"Drain after the load: {'complete' if summary['drained'] else 'INCOMPLETE'} in "
        f"{summary['drain_seconds']:.1f} s.",
        "",
        "| check | count |",
        "|---|---:|",
        f"| orders committed | {v['orders']:,} |",
        f"| 201 answers whose order is missing | {v['acknowledged_missing']:,} |",
        f"| orders committed without a 201 (answer lost) | {v['committed_unacknowledged']:,} |",
        f"| confirmations lost (order without `SentConfirmation`) | {v['confirmations_lost']:,} |",
        f"| confirmations without an order | {v['confirmations_stray']:,} |",
        f"| confirmations delivered again, not re-sent | {v['confirmations_redelivered']:,} |",
        f"| e-mails written | {v['emails_sent']:,} |",
        f"| e-mails lost | {v['emails_lost']:,} |",
        f"| e-mails duplicated (allowed: {v['emails_duplicates_allowed']}) "
        f"| {v['emails_duplicated']:,} |",
        f"| sales lost | {v['sales_lost']:,} |",
        f"| sales without an order | {v['sales_stray']:,} |",
        f"| sales with a wrong total | {v['sales_wrong_total']:,} |",
        f"| items left in the queues | {sum(v['left_in_queues'].values()):,} |",
        "",
        f"**{'PASS' if summary['ok'] else 'FAIL'}**",
        "",
    ]
    return "\n".join(lines)


def write(summary: dict[str, Any], out: Path, name: str, text: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text, encoding="utf-8")
    (out / f"{name}.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
