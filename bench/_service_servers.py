"""handrail serve and LangGraph's server as the service benchmark starts them, watched and profiled.

Part of ``bench/service.py`` (see its documentation).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _service_agent  # noqa: E402
import httpx  # noqa: E402
from langgraph_sdk import get_sync_client  # noqa: E402

DSN = os.environ.get("HANDRAIL_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
LANGGRAPH_VENV = Path(os.environ.get("LANGGRAPH_SERVER_VENV", HERE / ".venv-langgraph-server"))
LANGGRAPH_GRAPH = HERE / "langgraph_server" / "agent.py"
LANGGRAPH_COPY = HERE / "langgraph_server" / "copy_paused.py"
# What keeps `langgraph dev` from reaching out: the CLI's analytics, the server's check for
# a newer version on PyPI, LangSmith tracing. (With no license key it sends no metadata.)
LANGGRAPH_ENV = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "1",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
}
APPROVE = {"decisions": [{"type": "approve"}]}
STORES = ("sqlite", "postgres")
SYSTEMS = ("sqlite", "postgres", "langgraph")
MEASURES = ("cycle", "answer", "crowd", "inbox")
LABEL = {"sqlite": "handrail SQLite", "postgres": "handrail Postgres", "langgraph": "LangGraph server"}
Target = tuple[str, str]  # (thread id, interrupt id)


# Statistics ---------------------------------------------------------------------------------
def pct(samples: list[float], q: float) -> float:
    """The nearest-rank percentile ``q`` of ``samples`` (seconds), in ms."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


class LoadWatch:
    """The machine's 1-minute load average, every 5 s, while the benchmark runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(5)

    def __enter__(self) -> LoadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# Servers --------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[Any], log: Path | None, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise SystemExit(f"the server at {url} exited ({process.returncode}):\n{tail}")
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the server at {url} did not answer within {seconds:.0f} s")


class Profiler:
    """py-spy recording one process (``--profile``): every thread, collapsed stacks."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.py_spy = next(
            (
                str(p)
                for p in (LANGGRAPH_VENV / "bin" / "py-spy", HERE / ".venv-reference" / "bin" / "py-spy")
                if p.exists()
            ),
            shutil.which("py-spy"),
        )
        if folder is not None:
            if self.py_spy is None:
                raise SystemExit("--profile needs py-spy (bash bench/setup_langgraph_server.sh installs it)")
            folder.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def record(self, pid: int, name: str) -> Iterator[None]:
        if self.folder is None or self.py_spy is None:
            yield
            return
        out = self.folder / f"{name}.txt"
        command = [
            self.py_spy,
            "record",
            "--pid",
            str(pid),
            "-r",
            "250",
            "--threads",
            "--nonblocking",  # sampling without pausing it: 50 reviewers slow down far less
            "-f",
            "raw",
            "-o",
            str(out),
        ]
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # attached
        try:
            yield
        finally:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)


class HandrailServer:
    """``handrail serve _service_agent:agent`` on one store, and the library on the same store."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.kind = kind
        self.path = folder / f"{kind}.db"
        self.schema = f"bench_service_{uuid.uuid4().hex[:8]}"
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.token = ""
        self._saver: Any = None
        self._agent: Any = None

    def flags(self) -> list[str]:
        if self.kind == "postgres":
            return ["--postgres", DSN, "--schema", self.schema]
        return ["--db", str(self.path)]

    def start(self) -> None:
        command = [sys.executable, "-m", "handrail"]
        self.process = subprocess.Popen(
            [*command, "serve", "_service_agent:agent", *self.flags(), "--port", "0"],
            cwd=HERE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        lines = []
        for line in self.process.stdout:
            lines.append(line)
            found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
            if found:
                self.url = found.group(1)
                break
        else:
            raise SystemExit(f"handrail serve ({self.kind}) did not start:\n{''.join(lines)}")
        threading.Thread(target=self.process.stdout.read, daemon=True).start()
        wait_ready(self.url, self.process, None, 30)
        # After the service made the store: on a new SQLite file, `tokens create` first makes
        # the service's tables, and the store then refuses the file (see bench/README.md).
        created = subprocess.run(
            [
                *command,
                "tokens",
                "create",
                "--name",
                "bench",
                "--role",
                "dba",
                "--scope",
                "run",
                "--scope",
                "review",
                *self.flags(),
            ],
            cwd=HERE,
            capture_output=True,
            text=True,
            check=True,
        )
        self.token = created.stdout.strip().splitlines()[-1]

    def client(self) -> Any:
        return get_sync_client(url=self.url, api_key=self.token, timeout=300)

    def agent(self) -> Any:
        """The same agent on the same store, in this process (the library side)."""
        if self._agent is None:
            if self.kind == "postgres":
                from handrail.checkpoint.postgres import PostgresSaver

                self._saver = PostgresSaver.from_conn_string(DSN, schema=self.schema, pool_size=8)
                self._saver.setup()
            else:
                from handrail.checkpoint.sqlite import SqliteSaver

                self._saver = SqliteSaver(self.path)
            self._agent = _service_agent.build(self._saver)
        return self._agent

    def pause(self, count: int, prefix: str) -> list[Target]:
        """``count`` threads paused at their first review, by the library on the served store."""
        agent = self.agent()
        out = []
        for i in range(count):
            thread = f"{prefix}-{uuid.uuid4().hex[:12]}-{i}"
            result = agent.invoke({"messages": ["go"]}, {"configurable": {"thread_id": thread}})
            out.append((thread, result["__interrupt__"][0].id))
        return out

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(60)
        if self._saver is not None and hasattr(self._saver, "close"):
            self._saver.close()
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(DSN, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


class LangGraphServer:
    """``langgraph dev --no-reload`` in a folder of its own (where it saves its state)."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.folder = scratch
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.generation = 0

    def fresh(self) -> None:
        """A new, empty working folder (the next start has no threads)."""
        self.generation += 1
        self.folder = self.scratch / f"langgraph-{self.generation}"
        self.folder.mkdir()
        config = {
            "dependencies": [str(LANGGRAPH_GRAPH.parent)],
            "graphs": {"bench": f"{LANGGRAPH_GRAPH}:graph"},
        }
        (self.folder / "langgraph.json").write_text(json.dumps(config))

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        log = self.folder / "server.log"
        command = [str(LANGGRAPH_VENV / "bin" / "langgraph"), "dev", "--no-reload", "--no-browser"]
        command += ["--port", str(port), "--config", "langgraph.json"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=self.folder, stdout=out, stderr=subprocess.STDOUT, env={**env, **LANGGRAPH_ENV}
            )
        wait_ready(self.url, self.process, log, 600)

    def stop(self) -> None:
        """Stop it; it saves its whole state under ``.langgraph_api`` as it exits."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(600)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def client(self) -> Any:
        return get_sync_client(url=self.url, api_key=None, timeout=300)

    def paused_copies(self, count: int) -> list[Target]:
        """Restart with ``count`` more paused threads: copies of one paused for real."""
        client = self.client()
        thread = client.threads.create()["thread_id"]
        result = client.runs.wait(thread, "bench", input={"messages": [{"role": "user", "content": "go"}]})
        assert result["__interrupt__"], result
        self.stop()
        out = self.folder / "copies.json"
        python = str(LANGGRAPH_VENV / "bin" / "python")
        command = [python, str(LANGGRAPH_COPY), str(self.folder), "--thread", thread]
        subprocess.run(
            [*command, "--copies", str(count), "--out", str(out)],
            check=True,
            env={**os.environ, **LANGGRAPH_ENV},
        )
        self.start()
        return [(t, i) for t, i in json.loads(out.read_text())]


# The calls, the same for every server ----------------------------------------------------------
