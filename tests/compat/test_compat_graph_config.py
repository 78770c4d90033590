"""``agent.get_graph().draw_mermaid()`` and ``agent.with_config(...)``, as LangChain's docs use them."""

from __future__ import annotations

from typing import Any

import pytest

from handrail import (
    AgentMiddleware,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    ScriptedModel,
    create_agent,
    tool,
)
from handrail.errors import ConfigurationError


@tool
def search(query: str) -> str:
    """Search."""
    return "found"


def test_get_graph_draws_the_agent_steps() -> None:
    agent = create_agent(
        ScriptedModel([]),
        tools=[search],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"search": True})],
    )
    graph = agent.get_graph()
    assert list(graph.nodes) == [
        "__start__",
        "model",
        "HumanInTheLoopMiddleware.after_model",
        "tools",
        "__end__",
    ]
    mermaid = graph.draw_mermaid()
    assert mermaid.startswith("graph TD;\n")
    for line in (
        "__start__ --> model;",
        "model --> HumanInTheLoopMiddleware_after_model;",
        "HumanInTheLoopMiddleware_after_model -.-> tools;",
        "HumanInTheLoopMiddleware_after_model -.-> __end__;",
        "tools --> model;",
    ):
        assert f"\t{line}" in mermaid


def test_get_graph_without_tools_goes_straight_to_the_end() -> None:
    graph = create_agent(ScriptedModel([])).get_graph()
    assert [(e.source, e.target, e.conditional) for e in graph.edges] == [
        ("__start__", "model", False),
        ("model", "__end__", False),
    ]


def test_with_config_binds_defaults_under_the_callers_config() -> None:
    seen: list[Any] = []

    class Peek(AgentMiddleware):
        def before_model(self, state: dict[str, Any], runtime: Any) -> None:
            seen.append((runtime.thread_id, dict(runtime.config.get("metadata", {}))))

    agent = create_agent(
        ScriptedModel([{"content": "a"}, {"content": "b"}]), middleware=[Peek()], checkpointer=InMemorySaver()
    )
    bound = agent.with_config({"configurable": {"thread_id": "bound"}, "metadata": {"team": "x"}})
    bound.invoke({"messages": ["hi"]})
    bound.invoke({"messages": ["hi"]}, {"metadata": {"user": "y"}})
    assert seen == [("bound", {"team": "x"}), ("bound", {"team": "x", "user": "y"})]
    assert len(agent.get_state({"configurable": {"thread_id": "bound"}}).values["messages"]) == 4


def test_unknown_run_options_are_refused_and_langgraph_ones_accepted() -> None:
    agent = create_agent(ScriptedModel([{"content": "a"}]))
    with pytest.raises(ConfigurationError, match="unexpected run option"):
        agent.invoke({"messages": ["hi"]}, interrupt_before=["tools"])
    assert agent.invoke({"messages": ["hi"]}, durability="sync")["messages"][-1].content == "a"


def test_recursion_limit_stops_a_looping_agent_and_the_steps_are_kept() -> None:
    from handrail.errors import GraphRecursionError

    loop_turn = {"content": "", "tool_calls": [{"name": "search", "args": {"query": "again"}}]}
    agent = create_agent(
        ScriptedModel([loop_turn] * 10 + [{"content": "done"}]), tools=[search], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "loop"}, "recursion_limit": 5}
    with pytest.raises(GraphRecursionError, match="recursion limit of 5 steps") as caught:
        agent.invoke({"messages": ["go"]}, config)
    assert isinstance(caught.value, RecursionError)
    assert len(agent.get_state(config).values["messages"]) == 6  # human + 5 steps (model, tools, ...)
    result = agent.with_config({"recursion_limit": 100}).invoke(None, {"configurable": {"thread_id": "loop"}})
    assert result["messages"][-1].content == "done"
    with pytest.raises(ConfigurationError, match="recursion_limit"):
        agent.invoke({"messages": ["go"]}, {"configurable": {"thread_id": "bad"}, "recursion_limit": 0})
