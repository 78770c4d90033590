"""The benchmark agent of ``bench/_service_agent.py``, built with LangChain for LangGraph's server.

It runs ONLY in ``bench/.venv-langgraph-server`` (``bash bench/setup_langgraph_server.sh``),
served by ``langgraph dev`` from this folder (``langgraph.json`` names ``agent:graph`` as
the assistant ``bench``). The same tool (``execute_sql``, answering "1 row affected"),
the same policy (``execute_sql`` reviewed, approve or reject), the same model behaviour
(every turn, whatever came before, one SQL call whose text carries the number of
messages so far), through ``langchain.agents.create_agent`` and its
``HumanInTheLoopMiddleware``. No checkpointer here: the server brings its own.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool


class OneSqlCallPerTurn(BaseChatModel):
    """Every call: an empty answer with one ``execute_sql`` call (as ``_service_agent._turn``)."""

    @property
    def _llm_type(self) -> str:
        return "scripted-benchmark"

    def _generate(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        call = {
            "name": "execute_sql",
            "args": {"query": f"UPDATE t SET n = {len(messages)}"},
            "id": f"call_{uuid.uuid4().hex}",
        }
        message = AIMessage(content="", tool_calls=[call], id=f"run-{uuid.uuid4().hex}")
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        return self._generate(messages)  # no executor hop, as handrail's scripted model

    def bind_tools(self, tools: Any, **_: Any) -> OneSqlCallPerTurn:
        return self  # the model already knows its one tool


@tool
def execute_sql(query: str) -> str:
    """Run a SQL statement."""
    return "1 row affected"


graph = create_agent(
    OneSqlCallPerTurn(),
    [execute_sql],
    middleware=[
        HumanInTheLoopMiddleware(interrupt_on={"execute_sql": {"allowed_decisions": ["approve", "reject"]}})
    ],
    name="bench",
)
