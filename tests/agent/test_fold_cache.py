"""What an agent keeps for the threads it has seen is bounded (issue 16): at most 128
threads and 32,768 messages between them, the least recently used going first."""

from __future__ import annotations

from handrail import Command, HumanMessage
from handrail.runtime._fold import ThreadFold
from handrail.runtime.spec import FoldCache

from _support import AgentFactory, call, config, turn


def fold(thread_id: str, messages: int = 1, head: int = 1) -> ThreadFold:
    made = ThreadFold(thread_id)
    made.values["messages"] = [HumanMessage(str(i)) for i in range(messages)]
    made.head_seq = head
    return made


def test_the_cache_keeps_at_most_its_size_in_threads_least_recently_used_first() -> None:
    cache = FoldCache(size=3)
    for name in "abc":
        cache.put(fold(name))
    assert cache.get("a") is not None  # a is now the most recently used
    cache.put(fold("d"))
    assert len(cache) == 3 and cache.get("b") is None
    assert all(cache.get(name) is not None for name in "acd")


def test_the_cache_keeps_at_most_its_messages_but_always_the_thread_just_stored() -> None:
    cache = FoldCache(size=100, messages=10)
    cache.put(fold("a", 4))
    cache.put(fold("b", 4))
    cache.put(fold("c", 4))  # 12 > 10: a goes
    assert cache.get("a") is None and cache.get("b") is not None and cache.get("c") is not None
    cache.put(fold("huge", 50))  # alone over the bound, it stays: the others go
    assert len(cache) == 1 and cache.get("huge") is not None


def test_replacing_or_dropping_a_thread_keeps_the_count_of_messages_right() -> None:
    cache = FoldCache(size=100, messages=10)
    for head in range(1, 20):
        cache.put(fold("a", 6, head=head))  # the same thread again and again: 6, not 6 x 19
    cache.put(fold("b", 4))
    assert cache.get("a") is not None and cache.get("b") is not None
    cache.drop("a")
    cache.put(fold("c", 6))
    assert cache.get("b") is not None and cache.get("c") is not None
    cache.put(fold("a", 3, head=1))
    older = fold("c", 6, head=0)  # an older reading of c does not replace the newer one
    cache.put(older)
    assert cache.get("c") is not older


def test_an_agent_that_has_seen_more_threads_than_it_keeps_still_resumes_each(
    make_agent: AgentFactory,
) -> None:
    script = [
        turn(call("write_file", path="a", content="x")),
        turn(call("write_file", path="b", content="y")),
    ]
    agent = make_agent([*script, turn(content="done"), turn(content="done")])
    agent._spec.cache._size = 1
    first = agent.invoke({"messages": ["one"]}, config("t1"))["__interrupt__"][0].id
    second = agent.invoke({"messages": ["two"]}, config("t2"))["__interrupt__"][0].id
    assert agent._spec.cache.get("t1") is None and len(agent._spec.cache) == 1
    for thread_id, interrupt_id in (("t1", first), ("t2", second)):
        done = agent.invoke(
            Command(resume={interrupt_id: {"decisions": [{"type": "approve"}]}}), config(thread_id)
        )
        assert "__interrupt__" not in done and done["messages"][-1].content == "done"
