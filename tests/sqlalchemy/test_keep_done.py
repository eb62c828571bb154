"""``keep_done`` through ``__queue_options__`` (``KeptJob``): acked and removed items kept as
done on a Session, ``items("done")`` and ``purge(session, "done")``, and the ``dbqueue`` CLI's
stats and purge of done items. (Declarations refused: tests/sqlalchemy/test_spec.py; the
operations on every front, asyncio too: tests/conformance/test_keep_done.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbqueue.message import State
from tests.sqlalchemy.cli_support import dbqueue
from tests.sqlalchemy.kept import KeptBase, KeptJob
from tests.sqlalchemy.models import Job

pytestmark = pytest.mark.sqlalchemy


@pytest.fixture
def kept_engine(url: str) -> Iterator[sa.Engine]:
    """An engine with KeptJob's tables (on its own metadata) created, dropped afterwards."""
    engine = sa.create_engine(url)
    KeptBase.metadata.drop_all(engine)
    KeptBase.metadata.create_all(engine)
    yield engine
    KeptBase.metadata.drop_all(engine)
    engine.dispose()


def keep_two_of_three(engine: sa.Engine) -> list[int]:
    """Three KeptJobs: the first acked, the second popped at most once, the third ready."""
    with Session(engine) as session:
        ids = KeptJob.queue.push_many(session, [{"name": n} for n in "abc"])
        session.commit()
        leased = KeptJob.queue.pop_batch(session)
        session.commit()
        assert KeptJob.queue.ack(session, leased) == ids[:1]
        session.commit()
        assert [j.id for j in KeptJob.queue.pop_batch(session, mode="at_most_once")] == ids[1:2]
    return ids


def test_the_option_reaches_the_spec() -> None:
    assert KeptJob.__queue_spec__.options.keep_done is True
    assert Job.__queue_spec__.options.keep_done is False


def test_done_items_are_a_query_and_purged_by_state(kept_engine: sa.Engine) -> None:
    a, b, c = keep_two_of_three(kept_engine)
    with Session(kept_engine) as session:
        rows = session.execute(KeptJob.queue.items("done")).all()
        assert [(r[0].id, r[0].name, State(r.state), r.attempts) for r in rows] == [
            (a, "a", State.DONE, 1), (b, "b", State.DONE, 1),
        ]  # fmt: skip
        assert all(r.lease_until is None for r in rows)
        assert KeptJob.queue.stats(session)["done"] == 2
        assert KeptJob.queue.purge(session, "done") == 2
        session.commit()
        assert session.scalars(sa.select(KeptJob.id)).all() == [c]


def test_the_cli_counts_and_purges_done_items(kept_engine: sa.Engine, url: str) -> None:
    keep_two_of_three(kept_engine)
    shown = dbqueue("stats", "--url", url, "--json")
    assert shown.returncode == 0, shown.stderr
    (row,) = [r for r in json.loads(shown.stdout)["queues"] if r["queue"] == "sa_kept_job"]
    assert (row["ready"], row["done"], row["failed"]) == (1, 2, 0)
    args = ["--url", url, "--queue", "sa_kept_job", "--state", "done", "--yes"]
    purged = dbqueue("purge", *args)
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout == "purged 2 done item(s) of sa_kept_job\n"
    with Session(kept_engine) as session:
        stats = KeptJob.queue.stats(session)
    assert (stats["ready"], stats["done"]) == (1, 0)
