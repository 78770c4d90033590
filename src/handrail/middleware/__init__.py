"""Middleware: the base class, the request types, the decorators and the built-in middleware.

The review middleware, the base class and the decorators load with the package; the other
built-in middleware (fallback, limits, retry, summarization) on first use, so that an agent
that does not use them does not pay for their import.
"""

import importlib
from typing import TYPE_CHECKING, Any

from handrail.middleware._decorators import (
    after_agent,
    after_model,
    before_agent,
    before_model,
    dynamic_prompt,
    hook_config,
    wrap_model_call,
    wrap_tool_call,
)
from handrail.middleware.human_in_the_loop import (
    Action,
    ActionRequest,
    ApproveDecision,
    Decision,
    EditDecision,
    HITLRequest,
    HITLResponse,
    HumanInTheLoopMiddleware,
    InterruptOnConfig,
    RejectDecision,
    RespondDecision,
    ReviewConfig,
    ToolApprovalRequest,
)
from handrail.middleware.types import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    ResumeContext,
    ToolCallRequest,
)

if TYPE_CHECKING:
    from handrail.middleware._fallback import ModelFallbackMiddleware
    from handrail.middleware._limits import ModelCallLimitMiddleware, ToolCallLimitMiddleware
    from handrail.middleware._retry import ModelRetryMiddleware, ToolRetryMiddleware
    from handrail.middleware._summarization import SummarizationMiddleware

_ON_FIRST_USE = {
    "ModelFallbackMiddleware": "handrail.middleware._fallback",
    "ModelCallLimitMiddleware": "handrail.middleware._limits",
    "ToolCallLimitMiddleware": "handrail.middleware._limits",
    "ModelRetryMiddleware": "handrail.middleware._retry",
    "ToolRetryMiddleware": "handrail.middleware._retry",
    "SummarizationMiddleware": "handrail.middleware._summarization",
}

__all__ = [
    "Action",
    "ActionRequest",
    "AgentMiddleware",
    "AgentState",
    "ApproveDecision",
    "Decision",
    "EditDecision",
    "HITLRequest",
    "HITLResponse",
    "HumanInTheLoopMiddleware",
    "InterruptOnConfig",
    "ModelCallLimitMiddleware",
    "ModelFallbackMiddleware",
    "ModelRequest",
    "ModelResponse",
    "ModelRetryMiddleware",
    "RejectDecision",
    "RespondDecision",
    "ResumeContext",
    "ReviewConfig",
    "SummarizationMiddleware",
    "ToolApprovalRequest",
    "ToolCallLimitMiddleware",
    "ToolCallRequest",
    "ToolRetryMiddleware",
    "after_agent",
    "after_model",
    "before_agent",
    "before_model",
    "dynamic_prompt",
    "hook_config",
    "wrap_model_call",
    "wrap_tool_call",
]


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
