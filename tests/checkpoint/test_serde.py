"""Rule 10: stored data holds no pickle and loads no type it does not know."""

from __future__ import annotations

import functools
import pathlib
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import (
    AIMessage,
    Command,
    HumanInTheLoopMiddleware,
    HumanMessage,
    InMemorySaver,
    ScriptedModel,
    ToolMessage,
    create_agent,
    tool,
)
from handrail.checkpoint.base import Append, PendingReview, StoredEvent
from handrail.checkpoint.serde import dumps, loads
from handrail.errors import SerializationError
from handrail.runtime.events import decode_event

from _support import AgentFactory, call, config, turn

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "handrail"


def test_no_pickle_anywhere_in_the_package() -> None:
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        assert "import pickle" not in text and "pickle.loads" not in text, path


def test_messages_round_trip_exactly() -> None:
    messages = [
        HumanMessage("hi", id="1"),
        AIMessage(
            "",
            id="2",
            tool_calls=[{"name": "t", "args": {"x": [1, {"y": None}]}, "id": "c"}],
            usage_metadata={"input_tokens": 3},
        ),
        ToolMessage("res", tool_call_id="c", status="error", id="3", name="t"),
    ]
    assert loads(dumps({"messages": messages})) == {"messages": messages}


def test_datetimes_round_trip() -> None:
    moment = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert loads(dumps({"at": moment})) == {"at": moment}


def test_unknown_values_are_refused_when_saving() -> None:
    with pytest.raises(SerializationError, match="cannot store state: a value of type set cannot be stored"):
        dumps({"x": {1, 2}}, where="state")

    class Custom:
        pass

    with pytest.raises(SerializationError, match="Custom cannot be stored"):
        dumps([Custom()])


def test_unknown_tags_fail_loudly_naming_thread_and_record() -> None:
    payload = orjson.dumps({"values": {"messages": [{"__hr__": "pickle", "data": "gASV"}]}, "next": []})
    with pytest.raises(
        SerializationError, match=r"thread 'th', record 7: unknown stored type 'pickle'"
    ) as caught:
        decode_event(StoredEvent(7, "input", 0.0, payload), "th")
    assert caught.value.thread_id == "th" and caught.value.seq == 7


def test_damaged_message_fields_fail_loudly() -> None:
    for fields in (
        {"content": 5},
        {"content": "x", "secret": 1},
        {"content": "x", "tool_calls": [{"args": {}}]},
    ):
        payload = orjson.dumps({"message": {"__hr__": "ai", **fields}, "task": "c"})
        with pytest.raises(SerializationError, match=r"thread 't', record 3: damaged 'ai' record"):
            decode_event(StoredEvent(3, "tool_finished", 0.0, payload), "t")


def test_unknown_event_kinds_and_missing_fields_fail_loudly() -> None:
    with pytest.raises(SerializationError, match="unknown event kind 'exec'"):
        decode_event(StoredEvent(1, "exec", 0.0, b"{}"), "t")
    with pytest.raises(SerializationError, match=r"input event lacks \['values', 'next'\]"):
        decode_event(StoredEvent(1, "input", 0.0, b"{}"), "t")
    with pytest.raises(SerializationError, match="must hold an object"):
        decode_event(StoredEvent(1, "input", 0.0, b"[1]"), "t")


@functools.cache
def _stored_log() -> list[StoredEvent]:
    """One real log (built once, so every example damages the same records)."""

    @tool
    def write_file(path: str, content: str) -> str:
        """Write."""
        return "ok"

    agent = create_agent(
        ScriptedModel(
            [
                turn(call("write_file", path="a", content="lorem ipsum dolor sit amet " * 12)),
                {"content": "done"},
            ]
        ),
        [write_file],
        middleware=[HumanInTheLoopMiddleware({"write_file": True})],
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": "go"}, config())
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    return agent.checkpointer.read("t1").events  # type: ignore[union-attr]


def test_the_sample_log_has_compressed_and_plain_records() -> None:
    """Every record is sealed (format v3); behind the seal, some are compressed, some not."""
    from handrail.checkpoint.integrity import is_sealed, unseal

    payloads = [e.payload for e in _stored_log()]
    assert all(is_sealed(p) for p in payloads)
    bodies = [unseal(p)[1] for p in payloads]
    assert any(b[:1] == b"\x04" for b in bodies) and any(b[:1] == b"{" for b in bodies)


def test_records_compressed_by_earlier_versions_still_load() -> None:
    """Format v1 - zlib (marker 0x02) or Zstandard (0x03), each against the v1 dictionary
    - is still read, event by event, as it was written; new records use v2 (0x04)."""
    import zlib

    import zstandard

    from handrail.checkpoint.integrity import unseal
    from handrail.runtime.events import _ZDICT_V1, decode_event, unpack_payload

    zstd_v1 = zstandard.ZstdCompressor(
        level=1,
        dict_data=zstandard.ZstdCompressionDict(_ZDICT_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT),
        write_checksum=True,
        write_content_size=True,
        write_dict_id=False,
    )
    compressed = 0
    for stored in _stored_log():
        plain = decode_event(stored, "t1")
        if unseal(stored.payload)[1][:1] != b"\x04":
            continue
        compressed += 1
        raw = unpack_payload(stored.payload, "t1", "record")
        deflater = zlib.compressobj(1, zlib.DEFLATED, 12, 5, zlib.Z_DEFAULT_STRATEGY, _ZDICT_V1)
        for old_payload in (
            b"\x02" + deflater.compress(raw) + deflater.flush(),
            b"\x03" + zstd_v1.compress(raw),
        ):
            old = StoredEvent(stored.seq, stored.kind, stored.created_at, old_payload)
            assert decode_event(old, "t1").data == plain.data
    assert compressed


@pytest.mark.parametrize("marker", [b"\x03", b"\x04"])
def test_a_compressed_record_that_claims_a_huge_size_is_refused(marker: bytes) -> None:
    import struct

    from handrail.runtime.events import decode_event

    # a Zstandard frame header declaring 2**40 bytes of content, and nothing after it
    frame = b"\x28\xb5\x2f\xfd" + bytes([0b11000000]) + struct.pack("<Q", 2**40)
    with pytest.raises(SerializationError, match="record 7: damaged compressed payload"):
        decode_event(StoredEvent(7, "step", 0.0, marker + frame), "t1")


def _damage(data: st.DataObject, payload: bytes) -> bytes:
    """``payload`` truncated, replaced by random bytes, or with one byte flipped."""
    mode = data.draw(st.sampled_from(["truncate", "random", "flip"]))
    if mode == "truncate":
        return payload[: data.draw(st.integers(0, max(0, len(payload) - 1)))]
    if mode == "random":
        return data.draw(st.binary(max_size=200))
    position = data.draw(st.integers(0, len(payload) - 1))
    return (
        payload[:position]
        + bytes([payload[position] ^ data.draw(st.integers(1, 255))])
        + payload[position + 1 :]
    )


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_and_truncated_records_raise_only_serialization_errors(data: st.DataObject) -> None:
    """A damaged record never loads as something else: it raises SerializationError naming it."""
    events = _stored_log()
    victim = data.draw(st.sampled_from(events))
    damaged = StoredEvent(victim.seq, victim.kind, victim.created_at, _damage(data, victim.payload))
    try:
        event = decode_event(damaged, "t1")
    except SerializationError as exc:
        assert f"record {victim.seq}" in str(exc) and "'t1'" in str(exc)
        return
    # It decoded: then folding it must either work or fail with SerializationError too.
    from handrail.runtime._fold import ThreadFold

    fold = ThreadFold("t1")
    fold.head_seq = victim.seq - 1
    try:
        fold.apply(event)
    except SerializationError as exc:
        assert f"record {victim.seq}" in str(exc) or f"event {victim.seq}" in str(exc)


def test_a_damaged_log_fails_loudly_when_the_thread_loads(make_agent: AgentFactory) -> None:
    agent = make_agent([turn(call("write_file", path="a", content="b"))])
    agent.invoke({"messages": "go"}, config())
    store = agent.checkpointer
    log = store._events["t1"]  # type: ignore[union-attr]
    log[1] = StoredEvent(log[1].seq, log[1].kind, log[1].created_at, log[1].payload[:10])
    agent._spec.cache.drop("t1")
    with pytest.raises(SerializationError, match="thread 't1', record 2"):
        agent.get_state(config())


def test_the_compression_dictionary_of_format_v1_never_changes() -> None:
    """Stored records depend on it byte for byte: a new dictionary needs a new marker byte."""
    import hashlib

    from handrail.runtime.events import _ZDICT_V1

    digest = hashlib.sha256(_ZDICT_V1).hexdigest()
    assert digest == "3b2327779d3ee024024f8431052eaab64495cbc34ace4519a39510b5db792667"


def _paused(make_agent: AgentFactory, content: str = "b") -> Any:
    """An agent whose thread t1 is paused at one review of ``write_file``."""
    agent = make_agent([turn(call("write_file", path="notes.txt", content=content))])
    agent.invoke({"messages": "go"}, config())
    return agent


def _inbox_entry(agent: Any) -> PendingReview:
    (pending,) = agent.checkpointer._records["t1"].pending
    return pending  # type: ignore[no-any-return]


def _store_inbox_payload(agent: Any, payload: bytes) -> None:
    """Put ``payload`` in place of the inbox payload of t1's review, as a store would hold it:
    written by an append (with no event), so that the in-memory store seals it as it is."""
    from dataclasses import replace

    store = agent.checkpointer
    record = store._records["t1"]
    held = replace(record, pending=(replace(record.pending[0], payload=payload),))
    store.append("t1", Append([], expected_seq=record.head_seq, record=held))


def test_a_damaged_inbox_entry_names_the_thread_and_interrupt(make_agent: AgentFactory) -> None:
    agent = _paused(make_agent)
    interrupt_id = _inbox_entry(agent).interrupt_id
    _store_inbox_payload(agent, b"\x80")
    with pytest.raises(SerializationError, match=f"thread 't1', pending interrupt {interrupt_id}: not valid"):
        agent.list_interrupts()


def test_the_inbox_keeps_a_large_review_compressed_and_reads_it_back(make_agent: AgentFactory) -> None:
    """A pending review's payload is stored like an event's: compressed when that pays."""
    agent = _paused(make_agent, "lorem ipsum dolor " * 40)
    pending = _inbox_entry(agent)
    # its interrupt event's stored payload: sealed (0x06, a 32-byte hash), then compressed
    assert pending.payload[:1] == b"\x06" and pending.payload[33:34] == b"\x04"
    (item,) = agent.list_interrupts().items
    assert item.interrupt == agent.get_state(config()).interrupts[0]
    _store_inbox_payload(agent, pending.payload[:-6] + b"\x00" * 6)
    with pytest.raises(
        SerializationError,
        match=f"thread 't1', pending interrupt {pending.interrupt_id}: damaged compressed payload",
    ):
        agent.list_interrupts()


def test_a_review_is_serialised_once_for_the_log_and_the_inbox(make_agent: AgentFactory) -> None:
    """The inbox payload of a new review is the stored bytes of the interrupt event that raised
    it: in memory the same object, so a paused thread holds them once."""
    agent = _paused(make_agent, "lorem ipsum dolor " * 40)
    (event,) = [e for e in agent.checkpointer._events["t1"] if e.kind == "interrupt"]  # type: ignore[union-attr]
    assert _inbox_entry(agent).payload is event.payload
    (item,) = agent.list_interrupts().items
    assert item.interrupt == agent.get_state(config()).interrupts[0]


def test_a_durable_store_keeps_the_inbox_payload_as_the_interrupt_events_bytes(
    make_agent: AgentFactory, tmp_path: pathlib.Path
) -> None:
    """SQLite writes the review's row with its event's sealed payload behind the marker of
    format v2.1, which every reader of format v3 reads (the bare form is for memory only)."""
    from handrail import SqliteSaver

    with SqliteSaver.from_conn_string(tmp_path / "t.db") as saver:
        agent = make_agent(
            [turn(call("write_file", path="notes.txt", content="lorem " * 80))], checkpointer=saver
        )
        agent.invoke({"messages": "go"}, config())
        read = saver.read("t1")
        (event,) = [e for e in read.events if e.kind == "interrupt"]
        assert read.record is not None
        (pending,) = read.record.pending
        assert pending.payload == b"\x05" + event.payload
        (item,) = agent.list_interrupts().items
        assert item.interrupt == agent.get_state(config()).interrupts[0]


def test_an_inbox_payload_of_format_v2_1_still_loads(make_agent: AgentFactory) -> None:
    """The form a durable store writes, the event's payload behind a marker (0x05), loads
    from the memory store too."""
    agent = _paused(make_agent, "lorem ipsum dolor " * 40)
    (event,) = [e for e in agent.checkpointer._events["t1"] if e.kind == "interrupt"]  # type: ignore[union-attr]
    value = agent.get_state(config()).interrupts[0].value
    _store_inbox_payload(agent, b"\x05" + event.payload)
    (item,) = agent.list_interrupts().items
    assert item.interrupt.value == value


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "compressed"])
def test_an_inbox_payload_of_the_earlier_form_still_loads(make_agent: AgentFactory, packed: bool) -> None:
    """Reviews saved before format v2.1 hold their value's own JSON; the inbox still reads them."""
    from handrail.runtime.events import pack_payload

    agent = _paused(make_agent, "lorem ipsum dolor " * 40)
    value = agent.get_state(config()).interrupts[0].value
    earlier = pack_payload(dumps(value)) if packed else dumps(value)
    assert earlier[:1] == (b"\x04" if packed else b"{")
    _store_inbox_payload(agent, earlier)
    (item,) = agent.list_interrupts().items
    assert item.interrupt.value == value


def test_an_inbox_payload_naming_another_interrupt_is_refused(make_agent: AgentFactory) -> None:
    from handrail.runtime.events import pack_payload, review_payload

    agent = _paused(make_agent)
    interrupt_id = _inbox_entry(agent).interrupt_id
    _store_inbox_payload(
        agent, review_payload(pack_payload(dumps({"id": "someone-else", "step": "x", "value": 1})))
    )
    with pytest.raises(
        SerializationError,
        match=f"thread 't1', pending interrupt {interrupt_id}: its payload is not the interrupt",
    ):
        agent.list_interrupts()


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_and_truncated_inbox_payloads_raise_only_serialization_errors(data: st.DataObject) -> None:
    """Rule 10 for the inbox: a damaged review payload loads as its value or fails naming it."""
    from handrail.checkpoint.integrity import seal
    from handrail.runtime.events import decode_review, pack_payload, review_payload

    value = {"action_requests": [{"name": "write_file", "args": {"content": "lorem ipsum " * 40}}]}
    event = pack_payload(dumps({"id": "i1", "step": "after_model", "value": value}))
    sealed, _ = seal(bytes(32), "t1", 3, "interrupt", 1.0, event)
    forms = [review_payload(event), review_payload(sealed), review_payload(sealed, same=True)]
    forms.append(pack_payload(dumps(value)))
    payload = data.draw(st.sampled_from(forms))
    if data.draw(st.booleans()):
        payload = _damage(data, payload)
    else:  # the marker of a form, before anything at all
        payload = data.draw(st.sampled_from([b"\x05", b"\x06"])) + data.draw(st.binary(max_size=200))
    try:
        decode_review(payload, "t1", "i1")
    except SerializationError as exc:
        assert "pending interrupt i1" in str(exc) and "'t1'" in str(exc)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8).filter(lambda key: key != "__hr__"), inner, max_size=4)
    ),
    max_leaves=20,
)  # (a dict keyed "__hr__" is refused when stored: test_the_reserved_key_is_refused_when_stored)


@settings(max_examples=300, deadline=None)
@given(value=_JSON)
def test_plain_json_loads_the_same_with_or_without_the_walk_for_tagged_objects(value: object) -> None:
    """A record with no tagged object skips the walk that rebuilds types, and loads the same."""
    from handrail.checkpoint.serde import _revive

    raw = orjson.dumps(value)
    assert loads(raw) == _revive(orjson.loads(raw)) == value


@pytest.mark.parametrize(
    "value",
    [{"__hr__": False}, {"args": {"__hr__": "ai", "content": "looks like a message"}}, [{"__hr__": 1}]],
)
def test_the_reserved_key_is_refused_when_stored(value: object) -> None:
    """Rule 10: a plain dict keyed "__hr__" would load as a typed object or wedge its thread."""
    with pytest.raises(SerializationError, match="reserves for the types it stores"):
        dumps(value, where="the test value")
    assert loads(dumps({"text": 'a "__hr__" inside a string', "m": AIMessage("x")}))["m"] == AIMessage("x")


def test_a_tag_spelled_with_escapes_is_still_refused() -> None:
    """Rule 10: the shortcut for plain records never lets a tagged object through untyped."""
    with pytest.raises(SerializationError, match="unknown stored type 'no-such-type'"):
        loads(b'{"\\u005f_hr__": "no-such-type"}', thread_id="t1", seq=3)
    with pytest.raises(SerializationError, match="unknown stored type 'no-such-type'"):
        loads(b'[{"__hr__": "no-such-type"}]', thread_id="t1", seq=3)
    for tag in (b"[1]", b"{}", b"3"):  # (a tag that is not a string, in a list as messages are)
        with pytest.raises(SerializationError, match="unknown stored type"):
            loads(b'[{"__hr__": ' + tag + b"}]", thread_id="t1", seq=3)


_MESSAGE_EXTRAS = st.dictionaries(
    st.sampled_from(["additional_kwargs", "response_metadata"]),
    st.dictionaries(
        st.text(max_size=6).filter(lambda key: key != "__hr__"),
        _JSON | st.datetimes(timezones=st.just(UTC)),
        max_size=3,
    ),
)


def _message(kind: str, text: str, extras: dict[str, Any], args: Any) -> Any:
    if kind == "ai":
        return AIMessage(text, id="a", tool_calls=[{"name": "t", "args": {"v": args}, "id": "c"}], **extras)
    if kind == "tool":
        return ToolMessage(text, tool_call_id="c", artifact=args, **extras)
    return HumanMessage(text, **extras)


@settings(max_examples=300, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["ai", "tool", "human"]), min_size=1, max_size=4),
    text=st.text(max_size=12),
    extras=_MESSAGE_EXTRAS,
    args=_JSON | st.datetimes(timezones=st.just(UTC)),
)
def test_messages_with_tagged_values_inside_load_exactly_as_the_whole_walk_gives(
    kinds: list[str], text: str, extras: dict[str, Any], args: Any
) -> None:
    """Rule 10: the walk that does not look inside tagged objects is checked against the
    tags the bytes hold; a datetime inside a message (or a string that spells the tag)
    sends the load to the whole walk, and either way the record loads as it was saved."""
    from handrail.checkpoint.serde import _revive

    value = {"messages": [_message(kind, text, extras, args) for kind in kinds], "note": text}
    raw = dumps(value)
    assert loads(raw) == _revive(orjson.loads(raw)) == value


def test_a_string_that_spells_the_tag_does_not_hide_a_nested_tagged_value() -> None:
    # (dumps refuses such a string; bytes from elsewhere may hold one) the count of tags
    # then differs from what the shallow walk finds, and the whole walk finds the datetime
    moment = datetime(2026, 12, 2, tzinfo=UTC)
    message = {
        "__hr__": "ai",
        "content": "x",
        "additional_kwargs": {"at": {"__hr__": "datetime", "iso": moment.isoformat()}},
    }
    loaded = loads(orjson.dumps({"a": "__hr__", "b": "__hr__", "m": message}))
    assert loaded["m"] == AIMessage("x", additional_kwargs={"at": moment}) and loaded["a"] == "__hr__"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"content": 3}, "content must be a string or a list"),
        ({"content": "", "id": 5}, "id and name must be strings"),
        ({"content": "", "tool_calls": {"a": 1}}, "tool_calls must be a list"),
        ({"content": "", "invalid_tool_calls": None}, "invalid_tool_calls must be a list"),
        ({"content": "", "tool_calls": [{"args": {}}]}, "a tool call must be a dict with a string 'name'"),
        ({"content": "", "tool_calls": [{"name": "t", "args": 3}]}, "args must be a dict"),
        ({"content": "", "colour": "red"}, "unexpected field"),
    ],
)
def test_a_damaged_stored_ai_message_names_what_is_wrong(fields: dict[str, Any], problem: str) -> None:
    message = {"__hr__": "ai", **fields}
    # (a message in a list, as a reading holds them, is built by the walk's own path)
    for record in ({"m": message}, {"messages": [{"__hr__": "human", "content": "a"}, message]}):
        raw = orjson.dumps(record)
        with pytest.raises(SerializationError, match=problem):
            loads(raw, thread_id="t1", seq=4)


def test_a_stored_tool_call_not_in_its_normal_form_is_normalised_as_the_constructor_does() -> None:
    raw = orjson.dumps(
        {"__hr__": "ai", "content": "", "tool_calls": [{"name": "t", "args": None, "id": "c"}]}
    )
    assert loads(raw) == AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "c"}])
    assert loads(raw).tool_calls == [{"name": "t", "args": {}, "id": "c", "type": "tool_call"}]


def test_loaded_messages_do_not_share_their_empty_fields() -> None:
    first, second = loads(dumps([AIMessage("a"), AIMessage("b")]))
    first.additional_kwargs["k"] = 1
    first.tool_calls.append({"name": "t", "args": {}, "id": "c", "type": "tool_call"})
    assert second.additional_kwargs == {} and second.tool_calls == []
    assert AIMessage("c").additional_kwargs == {}


def test_what_a_dict_field_was_given_it_keeps_through_the_store() -> None:
    """A message built with ``additional_kwargs=None`` (nothing refuses it) is stored as it
    is and loads as it was: the store never wedges a thread on what it accepted."""
    odd = AIMessage("x", additional_kwargs=None, response_metadata=[1])  # type: ignore[arg-type]
    assert loads(dumps([odd])) == [odd]


def test_messages_are_stored_in_the_same_bytes_as_before() -> None:
    """The encoder's fast form writes exactly what the first one wrote (same keys, same order)."""
    messages = [
        HumanMessage("hi", id="h"),
        AIMessage(
            "",
            id="a",
            tool_calls=[{"name": "t", "args": {"x": 1}, "id": "c"}],
            usage_metadata={"input_tokens": 3},
            response_metadata={"model_name": "m"},
        ),
        ToolMessage("r", tool_call_id="c", status="error", name="t", id="x"),
    ]
    assert dumps(messages) == (
        b'[{"__hr__":"human","content":"hi","id":"h"},{"__hr__":"ai","content":"","id":"a",'
        b'"response_metadata":{"model_name":"m"},"tool_calls":[{"name":"t","args":{"x":1},"id":"c",'
        b'"type":"tool_call"}],"usage_metadata":{"input_tokens":3}},{"__hr__":"tool","content":"r",'
        b'"id":"x","name":"t","tool_call_id":"c","status":"error"}]'
    )


_FIELD_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "x", "call_1", "success", "error"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "name", "args"]), inner, max_size=3)
    ),
    max_leaves=8,
)


_KEYS = ["content", "id", "name", "tool_calls", "tool_call_id", "status", "iso", "colour"]
_TAGS = ["ai", "tool", "human", "remove", "datetime", "no-such-type"]


@st.composite
def _planted(draw: st.DrawFn, depth: int = 0) -> Any:
    """Decoded JSON with tagged objects planted anywhere, well-formed or not."""
    if depth > 2 or draw(st.booleans()):
        return draw(_FIELD_VALUES)
    if draw(st.booleans()):
        return [draw(_planted(depth + 1)) for _ in range(draw(st.integers(0, 3)))]
    fields = draw(
        st.dictionaries(
            st.sampled_from(
                ["content", "id", "name", "tool_calls", "tool_call_id", "status", "iso", "colour"]
            ),
            _planted(depth + 1),
            max_size=4,
        )
    )
    if draw(st.booleans()):
        fields["__hr__"] = draw(
            st.sampled_from(["ai", "tool", "human", "remove", "datetime", "no-such-type"])
        )
    return fields


def _outcome(load: Any) -> Any:
    try:
        return ("value", load())
    except SerializationError:
        return ("refused",)


@settings(max_examples=400, deadline=None)
@given(value=_planted())
def test_any_record_loads_or_is_refused_exactly_as_the_whole_walk_says(value: Any) -> None:
    """Rule 10 against the shortcut: whatever a record holds - tagged objects well formed
    or damaged, nested in each other or not - the load gives what the whole walk gives, or
    refuses it as the whole walk does. It never loads as other data."""
    from handrail.checkpoint.serde import _BadRecord, _revive

    raw = orjson.dumps(value)

    def whole() -> Any:
        try:
            return _revive(orjson.loads(raw))
        except _BadRecord as exc:
            raise SerializationError(str(exc)) from None

    assert _outcome(lambda: loads(raw)) == _outcome(whole)
