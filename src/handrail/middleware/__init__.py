"""Middleware: the base class, the request types and the human-in-the-loop middleware."""

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
    "ModelRequest",
    "ModelResponse",
    "RejectDecision",
    "RespondDecision",
    "ResumeContext",
    "ReviewConfig",
    "ToolApprovalRequest",
    "ToolCallRequest",
]
