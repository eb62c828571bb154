"""The drivers dbqueue runs on through SQLAlchemy (psycopg 3, asyncpg, pysqlite, aiosqlite;
asyncpg runs the whole conformance suite, tests/conformance), and the others refused at the
first call with an UnsupportedDatabase that names the URL to use: never half working. A
database dbqueue does not run on is refused before create_all's first statement."""

from __future__ import annotations

import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbqueue.errors import UnsupportedDatabase
from tests.sqlalchemy.models import Base, Job

pytestmark = pytest.mark.sqlalchemy

#: Nothing connects: the driver is refused before the session opens a connection.
NOWHERE = "user@127.0.0.1:1/nowhere"


@pytest.mark.parametrize("driver", ["psycopg2", "pg8000"])
def test_a_sync_driver_other_than_psycopg_is_refused_at_the_first_call(driver: str) -> None:
    engine = sa.create_engine(f"postgresql+{driver}://{NOWHERE}")
    with Session(engine) as session:
        with pytest.raises(UnsupportedDatabase, match=rf"'{driver}' driver\. Use a URL like "
                           r"postgresql\+psycopg://"):  # fmt: skip
            Job.queue.push(session, name="a")
        with pytest.raises(UnsupportedDatabase, match=driver):
            Job.queue.pop_batch(session, 1)
    engine.dispose()


MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": "", "database": "test"}


def _mariadb_tables() -> set[str]:
    with pymysql.connect(**MARIADB) as conn, conn.cursor() as cursor:  # type: ignore[arg-type]
        cursor.execute("SHOW TABLES")
        return {str(r[0]) for r in cursor.fetchall()}


def test_create_all_on_a_database_dbqueue_does_not_run_on_writes_nothing() -> None:
    """MariaDB (the service CI runs): refused before the first CREATE TABLE, and drop_all
    before the first DROP, so nothing is left half made."""
    engine = sa.create_engine("mysql+pymysql://root@127.0.0.1:3306/test")
    before = _mariadb_tables()
    try:
        with pytest.raises(UnsupportedDatabase, match="dbqueue supports postgresql, sqlite"):
            Base.metadata.create_all(engine)
        assert _mariadb_tables() == before
        with pytest.raises(UnsupportedDatabase):
            Base.metadata.drop_all(engine)
        with pytest.raises(UnsupportedDatabase):
            Job.__table__.create(engine)  # type: ignore[attr-defined]
        assert _mariadb_tables() == before
    finally:
        engine.dispose()
