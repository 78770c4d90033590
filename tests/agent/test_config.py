"""SPEC §3 configuration: interrupt_on policies, legacy flags, and create_agent's own checks."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import AgentMiddleware, HumanInTheLoopMiddleware, ScriptedModel, create_agent, tool
from handrail.errors import ConfigurationError, InvalidInputError

from _support import AgentFactory, call, config, turn


def test_true_allows_all_four_decisions_and_false_never_reviews(make_agent: AgentFactory) -> None:
    agent = make_agent(
        [turn(call("write_file", path="a", content="b"), call("read_data", table="t"))],
        policy={"write_file": True, "read_data": False},
    )
    (pending,) = agent.invoke({"messages": "go"}, config())["__interrupt__"]
    assert pending.value["review_configs"] == [
        {
            "action_name": "write_file",
            "allowed_decisions": ["approve", "edit", "reject", "respond"],
            "args_schema": pending.value["review_configs"][0]["args_schema"],
        }
    ]
    assert [a["name"] for a in pending.value["action_requests"]] == ["write_file"]


def test_args_schema_override_is_shown_to_reviewers(make_agent: AgentFactory) -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    agent = make_agent(
        [turn(call("write_file", path="a", content="b"))],
        policy={"write_file": {"allowed_decisions": ["approve"], "args_schema": schema}},
    )
    (pending,) = agent.invoke({"messages": "go"}, config())["__interrupt__"]
    assert pending.value["review_configs"][0]["args_schema"] == schema


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("yes", r"interrupt_on\['write_file'\] must be True, False or a dict"),
        (1, "must be True, False or a dict"),
        ({"allowed_decision": ["approve"]}, r"unknown key\(s\) \['allowed_decision'\]"),
        ({}, "needs 'allowed_decisions'"),
        ({"allowed_decisions": []}, "must be a non-empty list"),
        ({"allowed_decisions": "approve"}, "must be a non-empty list"),
        ({"allowed_decisions": ["approve", "accept"]}, r"unknown decision type\(s\) \['accept'\]"),
        ({"allowed_decisions": ["approve", "approve"]}, "lists a type twice"),
        ({"allowed_decisions": ["approve"], "description": 5}, "description must be a string or a callable"),
        ({"allowed_decisions": ["approve"], "when": True}, "when must be a callable"),
        ({"allowed_decisions": ["approve"], "args_schema": "x"}, "args_schema must be a JSON schema dict"),
        ({"allow_accept": False}, "must be a non-empty list"),
        ({"allow_accept": "yes"}, r"\['allow_accept'\] must be True or False"),
        (
            {"allow_accept": True, "allowed_decisions": ["approve"]},
            "mixes 'allowed_decisions' with legacy flags",
        ),
    ],
)
def test_bad_policy_entries_are_refused_naming_the_tool(entry: Any, message: str) -> None:
    """SPEC §3: a bad config is a ValueError naming the tool, never 'auto-approve'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ConfigurationError, match=message) as caught:
            HumanInTheLoopMiddleware(interrupt_on={"write_file": entry})
    assert isinstance(caught.value, ValueError)
    assert "write_file" in str(caught.value)


def test_bad_middleware_options_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="interrupt_mode must be 'batched' or 'per_call'"):
        HumanInTheLoopMiddleware({"x": True}, interrupt_mode="each")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="interrupt_on must be a dict"):
        HumanInTheLoopMiddleware(["write_file"])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="edit_notice must be a string or None"):
        HumanInTheLoopMiddleware({"x": True}, edit_notice=3)  # type: ignore[arg-type]


def test_a_policy_for_a_tool_the_agent_lacks_is_refused(spec_tools: list) -> None:
    """A misspelt tool name would leave the real tool unreviewed."""
    with pytest.raises(
        ConfigurationError, match=r"interrupt_on names \['writ_file'\], which the agent does not have"
    ):
        create_agent(
            ScriptedModel([]), spec_tools, middleware=[HumanInTheLoopMiddleware({"writ_file": True})]
        )


@pytest.mark.parametrize(
    ("flags", "allowed"),
    [
        ({"allow_accept": True}, ["approve"]),
        ({"allow_accept": True, "allow_edit": True}, ["approve", "edit"]),
        ({"allow_respond": True}, ["reject", "respond"]),
        (
            {"allow_accept": True, "allow_edit": True, "allow_respond": True},
            ["approve", "edit", "reject", "respond"],
        ),
    ],
)
def test_legacy_flags_map_to_decisions_with_a_deprecation_warning(
    make_agent: AgentFactory, flags: dict, allowed: list
) -> None:
    with pytest.warns(DeprecationWarning, match="deprecated; use 'allowed_decisions'"):
        agent = make_agent([turn(call("write_file", path="a", content="b"))], policy={"write_file": flags})
    (pending,) = agent.invoke({"messages": "go"}, config())["__interrupt__"]
    assert pending.value["review_configs"][0]["allowed_decisions"] == allowed


def test_duplicate_tool_and_middleware_names_are_refused(spec_tools: list) -> None:
    @tool("write_file")
    def another(path: str) -> str:
        """Another writer."""
        return path

    with pytest.raises(ConfigurationError, match="two tools are named 'write_file'") as caught:
        create_agent(ScriptedModel([]), [*spec_tools, another])
    assert isinstance(caught.value, ValueError)

    class Audit(AgentMiddleware):
        pass

    with pytest.raises(ConfigurationError, match="two middleware are named 'Audit'"):
        create_agent(ScriptedModel([]), spec_tools, middleware=[Audit(), Audit()])
    first, second = Audit(), Audit()
    second.name = "Audit2"
    create_agent(ScriptedModel([]), spec_tools, middleware=[first, second])


def test_bad_create_agent_arguments_are_refused(spec_tools: list) -> None:
    with pytest.raises(ConfigurationError, match="model must be a ChatModel"):
        create_agent(42, spec_tools)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="unknown model provider 'nope'"):
        create_agent("nope:model", spec_tools)
    with pytest.raises(ConfigurationError, match="cannot tell which provider serves 'mystery'"):
        create_agent("mystery", spec_tools)
    with pytest.raises(ConfigurationError, match="middleware must be AgentMiddleware instances"):
        create_agent(ScriptedModel([]), spec_tools, middleware=[object()])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="checkpointer must be a saver"):
        create_agent(ScriptedModel([]), spec_tools, checkpointer=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot use 42 as a tool"):
        create_agent(ScriptedModel([]), [42])


def test_bad_run_configs_are_refused(make_agent: AgentFactory) -> None:
    agent = make_agent([{"content": "x"}])
    for bad, message in (
        ("t1", "config must be a dict"),
        ({"configurable": "t1"}, r"config\['configurable'\] must be a dict"),
        ({"configurable": {"thread_id": ""}}, "thread_id must be a non-empty string"),
        ({"configurable": {"thread_id": ["x"]}}, "thread_id must be a non-empty string"),
        ({"configurable": {"thread_id": "t", "reviewer": 3}}, "reviewer must be a string id"),
        ({"configurable": {"thread_id": "t", "reviewer": {"id": "a", "team": "x"}}}, "unexpected key"),
        ({"configurable": {"thread_id": "t"}, "metadata": "x"}, r"config\['metadata'\] must be a dict"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            agent.invoke({"messages": "go"}, bad)  # type: ignore[arg-type]


def test_bad_input_is_refused_and_saves_nothing(make_agent: AgentFactory) -> None:
    agent = make_agent([{"content": "x"}])
    for bad, message in (
        ("hello", "input must be a dict like"),
        ({"messages": 5}, "must be a list of messages"),
        ({"messages": [{"content": "no role"}]}, "without a 'role'"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "unknown role 'wizard'"),
        ({"messages": [("user", "ok"), object()]}, r"input\['messages'\]\[1\] must be a message object"),
        ({"msgs": []}, r"unknown state key\(s\) \['msgs'\]"),
    ):
        with pytest.raises(InvalidInputError, match=message) as caught:
            agent.invoke(bad, config())
        assert isinstance(caught.value, ValueError)
    assert agent.checkpointer.get_thread("t1") is None  # type: ignore[union-attr]


def test_all_message_input_forms_are_accepted(make_agent: AgentFactory) -> None:
    from handrail import HumanMessage

    agent = make_agent([{"content": "x"}])
    result = agent.invoke(
        {
            "messages": [
                HumanMessage("object"),
                {"role": "user", "content": "dict"},
                ("human", "tuple"),
                "bare string",
                {"role": "system", "content": "sys"},
            ]
        },
        config(),
    )
    assert [(m.type, m.content) for m in result["messages"][:5]] == [
        ("human", "object"),
        ("human", "dict"),
        ("human", "tuple"),
        ("human", "bare string"),
        ("system", "sys"),
    ]
    assert all(m.id for m in result["messages"])


decision_names = st.sampled_from(["approve", "edit", "reject", "respond", "accept", "", "APPROVE"])
entries = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(),
    st.text(max_size=3),
    st.dictionaries(
        st.sampled_from(
            ["allowed_decisions", "description", "when", "args_schema", "allowed", "allow_accept"]
        ),
        st.one_of(st.lists(decision_names, max_size=5), st.text(max_size=3), st.booleans(), st.none()),
        max_size=3,
    ),
)


@settings(max_examples=300, deadline=None)
@given(entry=entries)
def test_random_policy_entries_are_valid_or_refused_never_auto_approve(entry: Any) -> None:
    """Any policy is either refused with a ValueError naming the tool, or gates as it says."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            middleware = HumanInTheLoopMiddleware(interrupt_on={"write_file": entry})
        except ConfigurationError as exc:
            assert "write_file" in str(exc)
            return
    policy = middleware.policies.get("write_file")
    if entry is False or entry is None:
        assert policy is None
        return
    assert policy is not None, "an accepted non-False entry must gate the tool"
    assert policy.allowed and set(policy.allowed) <= {"approve", "edit", "reject", "respond"}
    if isinstance(entry, dict) and "allowed_decisions" in entry:
        assert list(policy.allowed) == entry["allowed_decisions"]
