"""The inbox newest or oldest first: ``agent.list_interrupts(order=...)`` (SPEC §5.1).

Cursor paging walks either order without skipping or repeating, also when only some
items are the reviewer's (rule 12); a cursor belongs to the order that made it.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from handrail.checkpoint import InMemorySaver

from _support import AgentFactory, call, config, turn

POLICY: dict[str, Any] = {
    "execute_sql": {"allowed_decisions": ["approve"], "reviewers": ["dba"]},
    "write_file": True,
}
BOB = {"id": "bob", "roles": ["ops"]}


def _seven_paused_threads(make_agent: AgentFactory) -> Any:
    store = InMemorySaver()
    for i in range(7):
        tool_call = (
            call("execute_sql", query=f"q{i}") if i % 2 else call("write_file", path=f"p{i}", content="c")
        )
        make_agent([turn(tool_call)], policy=POLICY, checkpointer=store).invoke(
            {"messages": ["go"]}, config(f"t{i}")
        )
    return make_agent([], policy=POLICY, checkpointer=store)


def _walk(agent: Any, limit: int, **options: Any) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = agent.list_interrupts(limit=limit, cursor=cursor, **options)
        seen += [i.thread_id for i in page.items]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


def test_newest_first_is_oldest_first_reversed(make_agent: AgentFactory) -> None:
    agent = _seven_paused_threads(make_agent)
    oldest = [i.thread_id for i in agent.list_interrupts().items]
    assert oldest == [f"t{i}" for i in range(7)]
    assert [i.thread_id for i in agent.list_interrupts(order="newest").items] == oldest[::-1]
    assert [i.thread_id for i in agent.list_interrupts(order="newest", tool="write_file").items] == [
        "t6",
        "t4",
        "t2",
        "t0",
    ]


@pytest.mark.parametrize("limit", [1, 2, 3])
@pytest.mark.parametrize("order", ["oldest", "newest"])
def test_cursor_pages_cover_the_inbox_once_in_either_order(
    make_agent: AgentFactory, order: str, limit: int
) -> None:
    agent = _seven_paused_threads(make_agent)
    everything = [i.thread_id for i in agent.list_interrupts(order=order).items]
    assert _walk(agent, limit, order=order) == everything
    for_bob = [t for t in everything if int(t[1:]) % 2 == 0]  # rule 12: only the reviews bob may decide
    assert _walk(agent, limit, order=order, reviewer=BOB) == for_bob


async def test_the_async_inbox_takes_the_order_too(make_agent: AgentFactory) -> None:
    agent = _seven_paused_threads(make_agent)
    page = await agent.alist_interrupts(order="newest", limit=2, reviewer=BOB)
    assert [i.thread_id for i in page.items] == ["t6", "t4"]
    rest = await agent.alist_interrupts(order="newest", limit=2, reviewer=BOB, cursor=page.next_cursor)
    assert [i.thread_id for i in rest.items] == ["t2", "t0"]


def test_a_cursor_continues_only_the_order_that_made_it(make_agent: AgentFactory) -> None:
    agent = _seven_paused_threads(make_agent)
    newest = agent.list_interrupts(order="newest", limit=2).next_cursor
    oldest = agent.list_interrupts(limit=2).next_cursor
    with pytest.raises(ValueError, match="continues an order='newest' listing; pass order='newest'"):
        agent.list_interrupts(cursor=newest)
    with pytest.raises(ValueError, match="continues an order='oldest' listing; pass order='oldest'"):
        agent.list_interrupts(order="newest", cursor=oldest)
    with pytest.raises(ValueError, match="order must be 'oldest' or 'newest', got 'sideways'"):
        agent.list_interrupts(order="sideways")  # type: ignore[arg-type]
    forged = base64.urlsafe_b64encode(orjson.dumps([1.0, "t", "i", "sideways"])).decode()
    with pytest.raises(ValueError, match="is not one list_interrupts returned"):
        agent.list_interrupts(cursor=forged)


def test_an_oldest_first_cursor_keeps_its_earlier_form(make_agent: AgentFactory) -> None:
    """Cursors handed out before the order existed still page oldest first."""
    agent = _seven_paused_threads(make_agent)
    page = agent.list_interrupts(limit=3)
    assert len(orjson.loads(base64.urlsafe_b64decode(page.next_cursor or ""))) == 3
    assert [i.thread_id for i in agent.list_interrupts(limit=3, cursor=page.next_cursor).items] == [
        "t3",
        "t4",
        "t5",
    ]
