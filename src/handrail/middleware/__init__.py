"""Middleware: the base class, the request types, the decorators and the built-in middleware."""

from handrail.middleware.decorators import (
    after_agent,
    after_model,
    before_agent,
    before_model,
    dynamic_prompt,
    hook_config,
    wrap_model_call,
    wrap_tool_call,
)
from handrail.middleware.fallback import ModelFallbackMiddleware
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
from handrail.middleware.limits import ModelCallLimitMiddleware, ToolCallLimitMiddleware
from handrail.middleware.retry import ModelRetryMiddleware, ToolRetryMiddleware
from handrail.middleware.summarization import SummarizationMiddleware
from handrail.middleware.types import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    ResumeContext,
    ToolCallRequest,
)

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
