"""A scripted model that also records what each call was offered (tools, tool choice, settings)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handrail import AIMessage, ScriptedModel
from handrail.messages import BaseMessage


class RecordingModel(ScriptedModel):
    """``ScriptedModel`` that keeps each call's tool specs, tool choice and settings."""

    def __init__(self, responses: Sequence[Any] = ()) -> None:
        super().__init__(responses)
        self.tool_specs: list[list[dict[str, Any]]] = []
        self.tool_choices: list[Any] = []
        self.settings: list[dict[str, Any]] = []

    def invoke(
        self, messages: Sequence[BaseMessage], *, tools: Any = None, tool_choice: Any = None, **settings: Any
    ) -> AIMessage:
        self.tool_specs.append([dict(t) for t in tools or ()])
        self.tool_choices.append(tool_choice)
        self.settings.append(settings)
        return super().invoke(messages)
