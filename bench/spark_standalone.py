"""A Spark standalone cluster on this machine, from the installed PySpark: a master and
workers, each a JVM of its own (``spark-class ...deploy.master.Master`` and
``...deploy.worker.Worker``), so that executors run in other processes than the driver, as on
a real cluster.

Nothing here knows dbqueue: :func:`standalone_cluster` starts the JVMs, waits until every
worker has registered with the master, and stops them all on the way out (SIGTERM to each
process group, SIGKILL after a while), whatever happened in between. The cluster tests
(tests/spark/test_cluster.py) and ``python -m bench.spark_cluster`` run on it.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.loadtest.shop import free_port

#: Seconds to wait for the JVMs to come up or go away (a hang guard, not a threshold).
PATIENCE = 120.0
HOST = "127.0.0.1"
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def session_config(master: str, python: str, path: str, executors: int = 2) -> dict[str, str]:
    """The settings of a driver on this machine for the cluster at ``master``: one executor
    of 1 core and 1 GB per worker, every address on the loopback, the executors' Python
    workers running ``python`` with ``path`` first on their module path."""
    return {
        "spark.master": master,
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.driver.memory": "1g",
        "spark.executor.memory": "1g",
        "spark.executor.cores": "1",
        "spark.cores.max": str(executors),
        "spark.pyspark.python": python,
        "spark.executorEnv.PYTHONPATH": path,
    }


def executor_count(session: Any) -> int:
    """Executors registered with a session's driver (its block managers, less its own)."""
    return int(session.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1


def wait_for_executors(session: Any, count: int) -> None:
    """Return once ``count`` executors have registered with the driver."""
    deadline = time.monotonic() + PATIENCE
    while executor_count(session) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} executors did not register with the driver in time")
        time.sleep(0.2)


def spark_home() -> Path:
    """The installed PySpark's folder: a Spark distribution (bin/, jars/) of its own."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    """A running master and its workers; ``url`` is what ``SparkSession.builder.master``
    takes."""

    port: int
    webui_port: int
    folder: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    def state(self) -> dict[str, Any]:
        """The master's view of the cluster (its web UI's ``/json``)."""
        with urllib.request.urlopen(f"http://{HOST}:{self.webui_port}/json", timeout=5) as r:
            return json.load(r)  # type: ignore[no-any-return]

    def alive_workers(self) -> int:
        """How many workers the master counts as alive (0 while it is not answering yet)."""
        try:
            workers = self.state().get("workers", [])
        except (OSError, ValueError):  # not answering yet, or not with its JSON yet
            return 0
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def logs(self) -> str:
        """The JVMs' output, for a failure's message."""
        return "\n".join(
            f"--- {log.name} ---\n{log.read_text(errors='replace')[-4000:]}"
            for log in sorted(self.folder.glob("*.log"))
        )

    def start(self, name: str, args: list[str], env: Mapping[str, str]) -> None:
        """Start one daemon (``spark-class`` execs the JVM) in a process group of its own:
        the executors a worker starts, and their Python workers, are in the same group."""
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        with (self.folder / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(
                command, env=dict(env), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.processes.append(process)

    def stop(self) -> None:
        """SIGTERM every group (the JVMs' shutdown hooks end their executors), then SIGKILL
        what is still there after a while. Safe to call twice."""
        for process in reversed(self.processes):
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in reversed(self.processes):
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            # The group too: an executor or a Python worker may outlive its JVM parent.
            _signal_group(process, signal.SIGKILL)
            process.wait()
        self.processes.clear()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def distinct_free_ports(count: int) -> list[int]:
    """``count`` different free ports: each is free now, and none is handed out twice before
    the JVMs, which start a few seconds later, bind them."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def daemon_environ(python: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The daemons' environment: this interpreter for the executors' Python workers, every
    address on the loopback, and the installed PySpark as SPARK_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=HOST,
        SPARK_LOCAL_HOSTNAME=HOST,
        PYSPARK_PYTHON=python,
        # A small heap for the master and the workers (the executors get their own setting).
        SPARK_DAEMON_MEMORY="512m",
        # A port taken fails the daemon instead of moving it to the next port, where the
        # workers and the web UI's poll would not find it; and no REST submission server,
        # whose fixed port (6066) another master on this machine may hold.
        SPARK_DAEMON_JAVA_OPTS="-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false",
    )
    env.update(extra or {})
    return env


#: Starts tried before giving up, each on fresh ports: another program may take a port between
#: the moment it is picked and the JVM's bind, a few seconds later.
ATTEMPTS = 3


class PortTaken(RuntimeError):
    """A daemon could not bind the port it was given."""


@contextmanager
def standalone_cluster(
    folder: Path,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    python: str = sys.executable,
    environ: Mapping[str, str] | None = None,
) -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, their logs and
    work folders under ``folder``; ``environ`` adds to the daemons' environment (the executors
    inherit it). Stopped on the way out, and at interpreter exit if the way out is never
    reached."""
    env = daemon_environ(python, environ)
    for attempt in range(1, ATTEMPTS + 1):
        cluster = StandaloneCluster(0, 0, folder / f"start-{attempt}")
        atexit.register(cluster.stop)
        try:
            _start(cluster, workers, cores, memory, env)
        except PortTaken:
            cluster.stop()
            atexit.unregister(cluster.stop)
            if attempt == ATTEMPTS:
                raise
            continue
        except BaseException:
            cluster.stop()
            atexit.unregister(cluster.stop)
            raise
        try:
            yield cluster
        finally:
            cluster.stop()
            atexit.unregister(cluster.stop)
        return


def _start(
    cluster: StandaloneCluster, workers: int, cores: int, memory: str, env: dict[str, str]
) -> None:
    """Start the master and the workers of ``cluster`` on fresh ports, and wait until every
    worker has registered."""
    cluster.folder.mkdir(parents=True, exist_ok=True)
    cluster.port, cluster.webui_port, *worker_ui_ports = distinct_free_ports(2 + workers)
    cluster.start("master", [MASTER, "--host", HOST, "--port", str(cluster.port),
                             "--webui-port", str(cluster.webui_port)], env)  # fmt: skip
    for i in range(workers):
        work = cluster.folder / f"worker-{i}"
        work.mkdir(exist_ok=True)
        cluster.start(f"worker-{i}", [
            WORKER, cluster.url, "--cores", str(cores), "--memory", memory, "--host", HOST,
            "--webui-port", str(worker_ui_ports[i]), "--work-dir", str(work),
        ], env)  # fmt: skip
    _wait_for_workers(cluster, workers)


def _wait_for_workers(cluster: StandaloneCluster, count: int) -> None:
    deadline = time.monotonic() + PATIENCE
    while cluster.alive_workers() < count:
        dead = [p.args for p in cluster.processes if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = cluster.logs()
            what = f"exited: {dead}" if dead else f"{count} workers not registered in time"
            error = PortTaken if dead and "BindException" in logs else RuntimeError
            raise error(f"the standalone cluster did not start ({what})\n{logs}")
        time.sleep(0.2)
