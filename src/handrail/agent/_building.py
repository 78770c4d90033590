"""``create_agent``: an agent built from a model, tools and middleware, its parts checked.

The model is coerced to a :class:`~handrail.models.ChatModel`, the tools to
:class:`~handrail.Tool` (a middleware's tools too), and the names checked unique; a
policy file becomes the review middleware. What is left is an
:class:`~handrail.runtime.spec.AgentSpec`, which an :class:`~handrail.agent.Agent` runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from handrail.agent._facade import Agent
from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.errors import ConfigurationError
from handrail.messages import SystemMessage
from handrail.middleware.types import AgentMiddleware
from handrail.models import init_chat_model
from handrail.models.base import ChatModel
from handrail.runtime.spec import AgentSpec
from handrail.tools import Tool, coerce_tool

__all__ = ["create_agent"]


def create_agent(
    model: str | ChatModel,
    tools: Sequence[Any] | None = None,
    *,
    system_prompt: str | SystemMessage | None = None,
    middleware: Sequence[AgentMiddleware] = (),
    checkpointer: BaseCheckpointSaver | None = None,
    name: str | None = None,
    response_format: Any = None,
    state_schema: type | None = None,
    context_schema: type | None = None,
    store: Any = None,
    debug: bool = False,
    policy_file: str | os.PathLike[str] | None = None,
) -> Agent:
    """Build an agent: a model that calls tools in a loop, with middleware around it.

    Example::

        agent = create_agent(
            model="openai:gpt-5.4",
            tools=[write_file, execute_sql, read_data],
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"write_file": True})],
            checkpointer=InMemorySaver(),
        )

    ``model`` is a :class:`~handrail.models.ChatModel` or a ``"provider:model"`` string.
    ``tools`` are plain functions, ``@tool`` functions or :class:`~handrail.Tool`
    objects. A checkpointer is needed for any pause (SPEC rule 7). Duplicate tool or
    middleware names raise :class:`~handrail.errors.ConfigurationError`.

    As in LangChain: ``response_format`` (a schema, ``ToolStrategy`` or
    ``ProviderStrategy``) makes the final answer structured, in
    ``state["structured_response"]``; ``state_schema`` adds state keys;
    ``context_schema`` types ``invoke(..., context=...)``, which hooks and tools read
    as ``runtime.context``; ``store`` is what they see as ``runtime.store``.

    ``policy_file`` (``handrail.toml``, or a ``pyproject.toml`` with ``[tool.handrail]``)
    gives the review policy instead of a ``HumanInTheLoopMiddleware`` in ``middleware``:
    the file's table for this agent's ``name`` (or its only agent) becomes that
    middleware, after the others. A problem in the file, or a tool it names that the
    agent does not have, raises :class:`~handrail.review.policy_file.PolicyFileError`
    (see docs/policies.md).
    """
    from handrail import _compat_agent

    chat_model = _coerce_model(model)
    middleware_list = _compat_agent.extra_middleware(state_schema, response_format) + list(middleware)
    names: set[str] = set()
    for item in middleware_list:
        if not isinstance(item, AgentMiddleware):
            raise ConfigurationError(
                f"middleware must be AgentMiddleware instances, got {type(item).__name__}"
            )
        if item.name in names:
            raise ConfigurationError(
                f"two middleware are named {item.name!r}; give one a different name "
                "(set its `name` attribute)"
            )
        names.add(item.name)
    tool_map: dict[str, Tool] = {}
    for candidate in [*(tools or ()), *(t for m in middleware_list for t in m.tools)]:
        resolved = coerce_tool(candidate)
        if resolved.name in tool_map:
            raise ConfigurationError(f"two tools are named {resolved.name!r}; tool names must be unique")
        tool_map[resolved.name] = resolved
    if checkpointer is not None and not isinstance(checkpointer, BaseCheckpointSaver):
        raise ConfigurationError(
            f"checkpointer must be a saver such as InMemorySaver(), got {type(checkpointer).__name__}"
        )
    if isinstance(system_prompt, SystemMessage):
        system_prompt = system_prompt.text
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise ConfigurationError("system_prompt must be a string or a SystemMessage")
    if policy_file is not None:
        from handrail.review.policy_file import sole_review_middleware

        middleware_list.append(sole_review_middleware(policy_file, name, middleware_list, tool_map))
    for item in middleware_list:
        item.bind(tool_map)
    spec = AgentSpec(
        name=name,
        model=chat_model,
        tools=tool_map,
        middleware=middleware_list,
        system_prompt=system_prompt,
        store=checkpointer,
        long_term_store=store,
        context_schema=context_schema,
        response_format=_compat_agent.resolve_response_format(response_format, chat_model),
    )
    return Agent(spec)


def _coerce_model(model: Any) -> ChatModel:
    if isinstance(model, ChatModel):
        return model
    if isinstance(model, str):
        return init_chat_model(model)
    adapter = getattr(model, "__handrail_model__", None)
    if callable(adapter):
        result = adapter()
        if isinstance(result, ChatModel):
            return result
    if callable(getattr(model, "bind_tools", None)) and callable(getattr(model, "invoke", None)):
        from handrail.models.langchain import from_langchain_model  # a LangChain chat model

        return from_langchain_model(model)
    raise ConfigurationError(
        f"model must be a ChatModel or a 'provider:model' string, got {type(model).__name__}"
    )
