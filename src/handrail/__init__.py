"""handrail: a person between an AI agent and the tools it calls.

Example::

    from handrail import create_agent, HumanInTheLoopMiddleware, Command, InMemorySaver, tool

The public names live here; errors live in :mod:`handrail.errors`.
"""

from typing import TYPE_CHECKING, Any

from handrail.agent import Agent, InterruptPage, PendingInterrupt, create_agent
from handrail.checkpoint import BaseCheckpointSaver, InMemorySaver, MemorySaver
from handrail.context import Runtime, ToolRuntime, get_stream_writer, interrupt
from handrail.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from handrail.middleware import (
    Action,
    ActionRequest,
    AgentMiddleware,
    AgentState,
    ApproveDecision,
    EditDecision,
    HITLRequest,
    HITLResponse,
    HumanInTheLoopMiddleware,
    InterruptOnConfig,
    ModelRequest,
    ModelResponse,
    RejectDecision,
    RespondDecision,
    ReviewConfig,
    ToolCallRequest,
)
from handrail.models import ChatModel, init_chat_model
from handrail.structured_output import ProviderStrategy, ToolStrategy
from handrail.tools import Tool, tool
from handrail.types import (
    AuditEntry,
    AuditVerification,
    Command,
    GraphOutput,
    Interrupt,
    RunnableConfig,
    StateSnapshot,
)

if TYPE_CHECKING:
    from handrail.checkpoint.postgres import AsyncPostgresSaver as AsyncPostgresSaver
    from handrail.checkpoint.postgres import PostgresSaver as PostgresSaver
    from handrail.checkpoint.sqlite import AsyncSqliteSaver as AsyncSqliteSaver
    from handrail.checkpoint.sqlite import SqliteSaver as SqliteSaver
    from handrail.models.scripted import ScriptedModel as ScriptedModel

__version__ = "0.1.0"

__all__ = [
    "AIMessage",
    "AIMessageChunk",
    "Action",
    "ActionRequest",
    "Agent",
    "AgentMiddleware",
    "AgentState",
    "AnyMessage",
    "ApproveDecision",
    "AsyncSqliteSaver",
    "AuditEntry",
    "AuditVerification",
    "BaseCheckpointSaver",
    "BaseMessage",
    "ChatModel",
    "Command",
    "EditDecision",
    "GraphOutput",
    "HITLRequest",
    "HITLResponse",
    "HumanInTheLoopMiddleware",
    "HumanMessage",
    "InMemorySaver",
    "Interrupt",
    "InterruptOnConfig",
    "InterruptPage",
    "MemorySaver",
    "ModelRequest",
    "ModelResponse",
    "PendingInterrupt",
    "ProviderStrategy",
    "RejectDecision",
    "RemoveMessage",
    "RespondDecision",
    "ReviewConfig",
    "RunnableConfig",
    "Runtime",
    "ScriptedModel",
    "SqliteSaver",
    "StateSnapshot",
    "SystemMessage",
    "Tool",
    "ToolCall",
    "ToolCallRequest",
    "ToolMessage",
    "ToolRuntime",
    "ToolStrategy",
    "__version__",
    "create_agent",
    "get_stream_writer",
    "init_chat_model",
    "interrupt",
    "tool",
]


def __getattr__(name: str) -> Any:
    # The SQLite savers and the scripted model load on first use (an agent that does not
    # use them never pays for their import). The Postgres savers load psycopg, an optional
    # extra: they are imported on first use and left out of __all__, so that
    # `from handrail import *` works without psycopg.
    if name in ("SqliteSaver", "AsyncSqliteSaver"):
        from handrail.checkpoint import sqlite

        value = getattr(sqlite, name)
        globals()[name] = value
        return value
    if name == "ScriptedModel":
        from handrail.models.scripted import ScriptedModel

        globals()[name] = ScriptedModel
        return ScriptedModel
    if name in ("PostgresSaver", "AsyncPostgresSaver"):
        from handrail.checkpoint import postgres

        return getattr(postgres, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
