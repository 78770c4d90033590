"""`import handrail` loads the agent side only (issue 16, the cold path).

The terminal UI (rich), the provider SDKs, psycopg, the review service (FastAPI, uvicorn,
jinja2), pydantic, zstandard, typing_extensions and socket are loaded when something uses
them, not on import. Each
check runs a fresh interpreter, since this test process has long loaded all of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

from handrail.runtime import events

_LAZY = (
    "rich",
    "openai",
    "anthropic",
    "psycopg",
    "psycopg_pool",
    "fastapi",
    "uvicorn",
    "jinja2",
    "starlette",
    "pydantic",
    "pydantic_core",
    "zstandard",
    "typing_extensions",
    "socket",
    "handrail.server",
    "handrail.cli",
    "handrail.checkpoint.postgres",
)


def _loaded_after(code: str) -> set[str]:
    """The names of ``_LAZY`` in ``sys.modules`` after a fresh interpreter runs ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {list(_LAZY)!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_import_handrail_loads_no_terminal_ui_sdk_driver_service_pydantic_or_zstandard() -> None:
    assert _loaded_after("import handrail") == set()


def test_star_import_loads_none_of_them_either() -> None:
    assert _loaded_after("from handrail import *") == set()


def test_postgres_saver_is_still_a_public_name_loaded_on_first_use() -> None:
    loaded = _loaded_after(
        "import handrail, sys\n"
        "assert 'psycopg' not in sys.modules\n"
        "from handrail import PostgresSaver, AsyncPostgresSaver\n"
        "assert PostgresSaver.__name__ == 'PostgresSaver'\n"
        "assert AsyncPostgresSaver.__name__ == 'AsyncPostgresSaver'"
    )
    assert {"psycopg", "handrail.checkpoint.postgres"} <= loaded
    assert "handrail.server" not in loaded and "rich" not in loaded


def test_a_small_thread_runs_without_zstandard_and_a_large_payload_loads_it() -> None:
    small = _loaded_after(
        "from handrail.runtime.events import pack_payload, unpack_payload\n"
        "assert unpack_payload(pack_payload(b'{\"a\": 1}'), 't', 'record 1') == b'{\"a\": 1}'"
    )
    assert "zstandard" not in small
    large = _loaded_after(
        "from handrail.runtime.events import pack_payload, unpack_payload\n"
        "data = b'{\"text\": \"' + b'abc ' * 4000 + b'\"}'\n"
        "packed = pack_payload(data)\n"
        "assert len(packed) < len(data) and unpack_payload(packed, 't', 'record 1') == data"
    )
    assert "zstandard" in large


def test_lazily_built_codecs_work_in_every_thread() -> None:
    # the codecs are thread-local: each thread builds its own on first use, from one set of dictionaries
    data = b'{"text": "' + b"the quick brown fox " * 500 + b'"}'
    packed: list[bytes] = []
    unpacked: list[bytes] = []

    def pack() -> None:
        packed.append(events.pack_payload(data))

    def unpack() -> None:
        unpacked.append(events.unpack_payload(packed[0], "t", "record 1"))

    for target in (pack, unpack):
        worker = threading.Thread(target=target)
        worker.start()
        worker.join()
    assert len(packed[0]) < len(data)
    assert unpacked == [data]
    assert events.unpack_payload(packed[0], "t", "record 1") == data


def test_an_agent_of_plain_tools_pauses_and_resumes_without_pydantic() -> None:
    """A process that builds an agent of plain-argument tools and runs a review cycle
    never imports pydantic (it took 25 ms of a new process's first resume), nor
    pydantic_core to write down the arguments a call ran with (16 ms of a 22 ms first
    resume on SQLite, found in session 14), an edited call's included."""
    probe = """
from handrail import Command, HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool

@tool
def execute_sql(query: str) -> str:
    "Run a SQL statement."
    return "ok"

call = {"name": "execute_sql", "args": {"query": "x"}}
script = [{"content": "", "tool_calls": [call]}, {"content": "done"}]
review = HumanInTheLoopMiddleware({"execute_sql": True})
agent = create_agent(ScriptedModel(script), [execute_sql], middleware=[review], checkpointer=InMemorySaver())
config = {"configurable": {"thread_id": "t"}}
paused = agent.invoke({"messages": ["go"]}, config)
answer = {paused["__interrupt__"][0].id: {"decisions": [{"type": "approve"}]}}
assert agent.invoke(Command(resume=answer), config)["messages"][-1].content == "done"
config = {"configurable": {"thread_id": "edited"}}
agent = create_agent(ScriptedModel(script), [execute_sql], middleware=[review], checkpointer=InMemorySaver())
paused = agent.invoke({"messages": ["go"]}, config)
edit = {"type": "edit", "edited_action": {"name": "execute_sql", "args": {"query": "y"}}}
answer = {paused["__interrupt__"][0].id: {"decisions": [edit]}}
assert agent.invoke(Command(resume=answer), config)["messages"][-1].content == "done"
"""
    loaded = _loaded_after(probe)
    assert "pydantic" not in loaded
    assert "pydantic_core" not in loaded


def test_the_sqlite_savers_scripted_model_and_other_middleware_load_on_first_use() -> None:
    late = [
        "handrail.checkpoint.sqlite",
        "handrail.models.scripted",
        "handrail.middleware._summarization",
        "handrail.middleware._retry",
        "handrail.middleware._limits",
        "handrail.middleware._fallback",
    ]
    probe = (
        "import sys, handrail, handrail.middleware as mw\n"
        f"late = {late!r}\n"
        "assert not [m for m in late if m in sys.modules], [m for m in late if m in sys.modules]\n"
        "assert handrail.SqliteSaver.__name__ == 'SqliteSaver'\n"
        "assert handrail.ScriptedModel.__name__ == 'ScriptedModel'\n"
        "assert mw.SummarizationMiddleware.__name__ == 'SummarizationMiddleware'\n"
        "from handrail.checkpoint import AsyncSqliteSaver\n"
        "from handrail.models import ScriptExhaustedError\n"
        "from handrail.middleware import ModelCallLimitMiddleware, ModelFallbackMiddleware\n"
        "from handrail.middleware import ToolRetryMiddleware\n"
        "assert all(m in sys.modules for m in late)\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)
