"""What ran is what the audit says (issue 25 item 5): arguments are recorded as the tool's
schema read them - the values the tool got - wherever an answer comes from."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import (
    AIMessage,
    Command,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    ScriptedModel,
    ToolMessage,
    create_agent,
)
from handrail.errors import InvalidDecisionError
from handrail.tools import Tool

from _support import call, config, turn


def _agent(
    got: list[Any], proposed: dict[str, Any], *, schema: type[pydantic.BaseModel] | None = None
) -> Any:
    def pay(account: str, amount: float) -> str:
        """Pay an amount into an account."""
        got.append(amount)
        return f"paid {amount!r}"

    tool = Tool(pay, args_schema=schema) if schema is not None else pay
    return create_agent(
        ScriptedModel([turn(call("pay", "c1", **proposed)), {"content": "done"}]),
        [tool],
        middleware=[HumanInTheLoopMiddleware({"pay": True})],
        checkpointer=InMemorySaver(),
    )


def _edit(agent: Any, args: dict[str, Any]) -> dict[str, Any]:
    (paused,) = agent.invoke({"messages": "pay"}, config())["__interrupt__"]
    edit = {"type": "edit", "edited_action": {"name": "pay", "args": args}}
    result: dict[str, Any] = agent.invoke(Command(resume={paused.id: {"decisions": [edit]}}), config())
    return result


def _started(agent: Any) -> Any:
    (entry,) = [e for e in agent.get_audit_trail(config()) if e.event == "tool_started"]
    return entry


def test_an_edit_with_a_string_for_a_float_is_recorded_as_the_float_the_tool_got() -> None:
    got: list[Any] = []
    agent = _agent(got, {"account": "a", "amount": 5.0})
    result = _edit(agent, {"account": "a", "amount": "12"})
    assert got == [12.0] and type(got[0]) is float
    (answered,) = [e for e in agent.get_audit_trail(config()) if e.event == "answered"]
    assert answered.value["decisions"][0]["edited_action"]["args"] == {"account": "a", "amount": 12.0}
    started = _started(agent)
    assert started.args == {"account": "a", "amount": 12.0} and type(started.args["amount"]) is float
    (tool_message,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert '"amount": 12.0' in str(tool_message.content) and '"12"' not in str(tool_message.content)
    # the model's own call stays as it wrote it (rule 4)
    (proposal,) = [m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    assert proposal.tool_calls[0]["args"] == {"account": "a", "amount": 5.0}


def test_an_approved_call_keeps_the_models_words_and_the_audit_says_what_the_tool_got() -> None:
    got: list[Any] = []
    agent = _agent(got, {"account": "a", "amount": "7"})
    (paused,) = agent.invoke({"messages": "pay"}, config())["__interrupt__"]
    assert paused.value["action_requests"][0]["args"] == {"account": "a", "amount": "7"}  # what was seen
    result = agent.invoke(Command(resume={paused.id: {"decisions": [{"type": "approve"}]}}), config())
    assert got == [7.0]
    (proposal,) = [m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    assert proposal.tool_calls[0]["args"] == {"account": "a", "amount": "7"}
    started = _started(agent)
    assert started.args == {"account": "a", "amount": 7.0}
    assert started.proposed is not None and started.proposed["args"] == {"account": "a", "amount": "7"}
    (tool_message,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert tool_message.content == "paid 7.0" and "Note" not in str(tool_message.content)  # not an edit


class _Lenient(pydantic.BaseModel):
    account: str
    amount: float  # pydantic's default: undeclared arguments are ignored


def test_an_edit_with_an_argument_the_tool_does_not_take_is_refused_even_where_the_schema_drops_it() -> None:
    agent = _agent([], {"account": "a", "amount": 1.0}, schema=_Lenient)
    (paused,) = agent.invoke({"messages": "pay"}, config())["__interrupt__"]
    edit = {
        "type": "edit",
        "edited_action": {"name": "pay", "args": {"account": "a", "amount": 2, "memo": "x"}},
    }
    with pytest.raises(InvalidDecisionError, match=r"takes no argument.*memo"):
        agent.invoke(Command(resume={paused.id: {"decisions": [edit]}}), config())
    assert [i.id for i in agent.get_state(config()).interrupts] == [paused.id]  # nothing saved


_NUMBERS = st.one_of(
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)


@settings(max_examples=40, deadline=None)
@given(number=_NUMBERS, as_text=st.booleans())
def test_any_coercible_edit_is_recorded_as_the_value_the_tool_got(number: float, as_text: bool) -> None:
    got: list[Any] = []
    agent = _agent(got, {"account": "a", "amount": 0.5})
    _edit(agent, {"account": "a", "amount": repr(number) if as_text else number})
    (value,) = got
    assert _started(agent).args["amount"] == value and type(_started(agent).args["amount"]) is float
