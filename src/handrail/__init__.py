"""handrail: a person between an AI agent and the tools it calls.

Example::

    from handrail import create_agent, HumanInTheLoopMiddleware, Command, InMemorySaver, tool

The public names live here; errors live in :mod:`handrail.errors`.
"""

from handrail.agent import Agent, InterruptPage, PendingInterrupt, create_agent
from handrail.checkpoint import BaseCheckpointSaver, InMemorySaver, MemorySaver
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
from handrail.models import ChatModel, ScriptedModel, init_chat_model
from handrail.runtime.context import Runtime, ToolRuntime, get_stream_writer, interrupt
from handrail.tools import Tool, tool
from handrail.types import Command, GraphOutput, Interrupt, RunnableConfig, StateSnapshot

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
    "RejectDecision",
    "RemoveMessage",
    "RespondDecision",
    "ReviewConfig",
    "RunnableConfig",
    "Runtime",
    "ScriptedModel",
    "StateSnapshot",
    "SystemMessage",
    "Tool",
    "ToolCall",
    "ToolCallRequest",
    "ToolMessage",
    "ToolRuntime",
    "__version__",
    "create_agent",
    "get_stream_writer",
    "init_chat_model",
    "interrupt",
    "tool",
]
