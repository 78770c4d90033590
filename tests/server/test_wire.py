"""``to_wire`` (orjson in one pass) gives what a plain walk of the value gives, for any value."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from handrail import AIMessage, HumanMessage, Interrupt, ToolMessage
from handrail.messages import BaseMessage
from handrail.server.wire import to_wire


def walked(value: Any) -> Any:
    """The reference: every dict and list walked in Python."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, BaseMessage):
        return {
            "type": value.type,
            **{f.name: walked(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    if isinstance(value, Interrupt):
        return {"value": walked(value.value), "id": value.id}
    if isinstance(value, Mapping):
        return {str(k): walked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [walked(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
scalars |= st.floats(allow_nan=False, allow_infinity=False)
scalars |= st.datetimes(timezones=st.just(UTC)) | st.datetimes()
messages = st.builds(HumanMessage, st.text(max_size=20)) | st.builds(
    ToolMessage, st.text(max_size=20), tool_call_id=st.text(min_size=1, max_size=8), name=st.just("t")
)
messages |= st.builds(
    AIMessage,
    st.text(max_size=20),
    tool_calls=st.lists(
        st.fixed_dictionaries(
            {
                "name": st.just("t"),
                "args": st.dictionaries(st.text(max_size=5), scalars, max_size=3),
                "id": st.just("c"),
            }
        ),
        max_size=2,
    ),
)
values = st.recursive(
    scalars | messages,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6) | st.integers(0, 9), inner, max_size=4)
        | st.builds(Interrupt, value=inner, id=st.text(min_size=1, max_size=6))
    ),
    max_leaves=20,
)


@given(values)
def test_to_wire_is_the_plain_walk(value: Any) -> None:
    assert to_wire(value) == walked(value)
