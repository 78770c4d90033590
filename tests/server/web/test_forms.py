"""The pieces of the web inbox that need no service: edit forms from schemas, markup, review shapes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from conftest import missing
from handrail import tool
from handrail.server.pages._forms import FieldSpec, build_fields, read_fields
from handrail.server.pages._lookup import ReviewAt, answer_verb
from handrail.server.pages._markup import age, clock, highlight_json, line_diff, summary, visible
from handrail.server.pages._review import read_answer
from handrail.server.pages._shape import read_shape
from handrail.types import AuditEntry


class Address(BaseModel):
    street: str
    zip: int


@tool
def ship(
    order: str,
    weight_kg: float,
    boxes: int,
    speed: Literal["standard", "express"],
    level: Literal[1, 2, 3] = 1,
    insured: bool = False,
    tags: list[str] | None = None,
    note: str | None = None,
    to: Address | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """Ship an order."""
    return "shipped"


SCHEMA = ship.json_schema


def form_of(spec: FieldSpec, form: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """The form a browser would send for ``spec`` as shown (every value as displayed)."""
    out = form if form is not None else {}
    if spec.choices:
        out[spec.state_name] = [spec.state]
    if spec.kind in ("object", "array"):
        for child in spec.children:
            form_of(child, out)
    elif spec.kind == "boolean":
        if spec.checked:
            out[spec.name] = ["true"]
    else:
        out[spec.name] = [spec.raw]
    return out


def fields_by_path(spec: FieldSpec) -> dict[tuple[Any, ...], FieldSpec]:
    found = {spec.path: spec}
    for child in spec.children:
        found.update(fields_by_path(child))
    return found


PROPOSED = {
    "order": "o-1",
    "weight_kg": 2.5,
    "boxes": 3,
    "speed": "express",
    "level": 2,
    "tags": ["fragile", "gift"],
    "to": {"street": "Main 1", "zip": 1234},
}


def test_each_type_of_the_schema_gets_its_field() -> None:
    spec = build_fields(0, SCHEMA, PROPOSED)
    by_path = fields_by_path(spec)
    kinds = {path[0]: f.kind for path, f in by_path.items() if len(path) == 1}
    assert kinds == {
        "order": "string",
        "weight_kg": "number",
        "boxes": "integer",
        "speed": "enum",
        "level": "enum",
        "insured": "boolean",
        "tags": "array",
        "note": "string",
        "to": "object",
        "extra": "json",
    }
    assert [f.required for p, f in by_path.items() if p in [("order",), ("insured",)]] == [True, False]
    assert by_path[("to", "zip")].kind == "integer" and by_path[("to", "zip")].required
    assert by_path[("tags", 1)].raw == "gift" and by_path[("level",)].raw == "2"
    assert by_path[("insured",)].state == "omit" and by_path[("note",)].choices == ["omit", "null"]
    assert by_path[("tags",)].next_index == 2


def test_the_form_as_shown_reads_back_as_the_proposal_with_its_types() -> None:
    spec = build_fields(0, SCHEMA, PROPOSED)
    value, errors = read_fields(build_fields(0, SCHEMA, PROPOSED), form_of(spec))
    assert errors == [] and value == PROPOSED
    assert type(value["boxes"]) is int and type(value["weight_kg"]) is float and type(value["level"]) is int


def test_edits_come_back_typed_and_choices_leave_out_or_send_null() -> None:
    spec = build_fields(0, SCHEMA, PROPOSED)
    form = form_of(spec)
    form.update(
        {
            'v:0:["boxes"]': ["4"],
            'v:0:["weight_kg"]': ["3"],
            'v:0:["level"]': ["3"],
            's:0:["insured"]': ["set"],
            'v:0:["insured"]': ["true"],
            'v:0:["tags",7]': ["late"],
            's:0:["note"]': ["null"],
            's:0:["to"]': ["omit"],
            'v:0:["to","zip"]': ["not even read"],
            's:0:["extra"]': ["set"],
            'v:0:["extra"]': ['{"a": [1, true]}'],
        }
    )
    value, errors = read_fields(build_fields(0, SCHEMA, PROPOSED), form)
    assert errors == []
    assert value == {
        "order": "o-1",
        "weight_kg": 3,
        "boxes": 4,
        "speed": "express",
        "level": 3,
        "insured": True,
        "tags": ["fragile", "gift", "late"],
        "note": None,
        "extra": {"a": [1, True]},
    }


@pytest.mark.parametrize(
    ("path", "sent", "message"),
    [
        ('["boxes"]', "2.5", "'2.5' is not a whole number"),
        ('["boxes"]', "", "enter a whole number"),
        ('["weight_kg"]', "heavy", "'heavy' is not a number"),
        ('["weight_kg"]', "Infinity", "'Infinity' is not a number"),
        ('["speed"]', '"overnight"', "choose one of the listed values"),
        ('["level"]', '"2"', "choose one of the listed values"),  # the string "2" is not the number 2
        ('["level"]', "true", "choose one of the listed values"),  # nor is true the number 1
    ],
)
def test_a_value_that_cannot_be_read_is_an_error_named_by_its_field(
    path: str, sent: str, message: str
) -> None:
    spec = build_fields(0, SCHEMA, PROPOSED)
    form = {**form_of(spec), f"v:0:{path}": [sent]}
    fresh = build_fields(0, SCHEMA, PROPOSED)
    _, errors = read_fields(fresh, form)
    assert [str(e) for e in errors] == [f"{path[2:-2]}: {message}"]
    field = fields_by_path(fresh)[tuple(__import__("json").loads(path))]
    assert field.error == message and field.raw == sent  # shown again as typed


def test_arguments_the_schema_cannot_describe_are_edited_as_json() -> None:
    whole = build_fields(0, None, {"a": 1})
    assert whole.kind == "json" and whole.path == () and '"a": 1' in whole.raw
    assert read_fields(whole, {"v:0:[]": ['{"a": 2}']}) == ({"a": 2}, [])
    _, errors = read_fields(build_fields(0, None, {}), {"v:0:[]": ["{broken"]})
    assert len(errors) == 1 and "not JSON" in str(errors[0])
    extra = build_fields(0, {"type": "object", "properties": {"a": {"type": "string"}}}, {"a": "x", "b": 1})
    assert extra.kind == "json"  # a key the schema does not name is never dropped by the form


def test_markup_escapes_every_value_and_shows_hidden_characters() -> None:
    shown = str(highlight_json({"<b>": "</pre><script>alert(1)</script>", "n": 1, "ok": True, "z": None}))
    assert "<script>" not in shown and "<b>" not in shown
    assert '<span class="j-key">&#34;&lt;b&gt;&#34;</span>' in shown
    assert '<span class="j-num">1</span>' in shown and '<span class="j-lit">true</span>' in shown
    assert (
        str(visible("a\u202eb\x07c\nd\te"))
        == 'a<span class="ctl">\\u202e</span>b<span class="ctl">\\u0007</span>c\nd\te'
    )
    assert str(visible("x\r\ny\rz")) == 'x\r\ny<span class="ctl">\\u000d</span>z'
    assert '<span class="ctl">\\u200b</span>' in str(highlight_json(["zero\u200bwidth"]))
    assert summary({"q": "x" * 300}).endswith("…") and len(summary({"q": "x" * 300})) == 160
    assert (
        summary({"a": 1, "b": "two\nlines"}) == 'a: 1, b: "two\\nlines"' and summary({}) == "(no arguments)"
    )


def test_times_and_diffs() -> None:
    now = datetime(2026, 12, 1, 10, 42, 30, tzinfo=UTC)
    assert clock(now, now) == "10:42 UTC" and clock(now - timedelta(days=1), now) == "2026-11-30 10:42 UTC"
    assert [age(now - timedelta(seconds=s), now) for s in (5, 125, 7300, 90000)] == [
        "5 s",
        "2 min",
        "2 h",
        "1 d",
    ]
    assert line_diff({"b": 1, "a": 2}, {"a": 2, "b": 3}) == [
        (" ", "{"),
        (" ", '  "a": 2,'),
        ("-", '  "b": 1'),
        ("+", '  "b": 3'),
        (" ", "}"),
    ]


def test_the_shapes_of_a_review() -> None:
    batched = read_shape(
        {
            "action_requests": [
                {"name": "ship", "args": {"order": "o"}, "description": "d", "tool_call_id": "c1"}
            ],
            "review_configs": [{"action_name": "ship", "allowed_decisions": ["approve", "bogus", "reject"]}],
        }
    )
    assert batched.kind == "batched" and batched.calls[0].allowed == ("approve", "reject")
    assert batched.answer([{"type": "approve"}]) == {"decisions": [{"type": "approve"}]}
    per_call = read_shape(
        {
            "type": "tool_approval",
            "name": "ship",
            "args": {},
            "tool_call_id": "c",
            "allowed_decisions": ["edit"],
        }
    )
    assert per_call.kind == "per_call" and per_call.answer([{"type": "edit"}]) == {"type": "edit"}
    unknown = read_shape({"type": "outcome_unknown", "name": "ship", "args": {}, "tool_call_id": "c"})
    assert unknown.kind == "outcome_unknown" and unknown.calls[0].allowed == ("approve", "respond", "reject")
    assert read_shape("Which account?").kind == "custom" and read_shape({"question": 1}).kind == "custom"


def test_a_custom_question_is_answered_with_text_or_json() -> None:
    shape = read_shape("How many rows?")
    assert read_answer(shape, {"answer": ["about 3\r\nor 4"]}).answer == "about 3\nor 4"
    assert read_answer(shape, {"answer": ['{"rows": 3}'], "answer_json": ["true"]}).answer == {"rows": 3}
    broken = read_answer(shape, {"answer": ["{nope"], "answer_json": ["true"]})
    assert broken.problems and broken.custom == {"text": "{nope", "json": True}


def entry(event: str, seq: int, **fields: Any) -> AuditEntry:
    at = datetime(2026, 12, 1, 10, 42, tzinfo=UTC)
    return AuditEntry(thread_id="t", seq=seq, at=at, event=event, interrupt_id="i", **fields)  # type: ignore[arg-type]


def review_at(*entries: AuditEntry, pending: bool = False) -> ReviewAt:
    asked = next((e for e in entries if e.event == "review_requested"), None)
    answered = next((e for e in entries if e.event == "answered"), None)
    return ReviewAt("t", "i", "a", None, None, list(entries), object() if pending else None, asked, answered)  # type: ignore[arg-type]


def test_where_a_review_stands_is_said_plainly() -> None:
    asked = entry("review_requested", 1, value={})
    approve = {"decisions": [{"type": "approve"}]}
    decided = review_at(asked, entry("answered", 2, value=approve, reviewer={"id": "alice"}, channel="web"))
    assert decided.status == "decided"
    assert decided.notice() == "Already approved by alice at 2026-12-01 10:42 UTC through web."
    expired = review_at(
        asked, entry("answered", 2, value={"decisions": [{"type": "reject"}]}, channel="expiry")
    )
    assert expired.status == "expired" and expired.notice().startswith("This review expired at")
    withdrawn = review_at(asked)
    assert withdrawn.status == "withdrawn" and "withdrawn" in withdrawn.notice()
    assert review_at().status == "unknown" and review_at(asked, pending=True).status == "pending"
    assert (
        answer_verb({"decisions": [{"type": "approve"}, {"type": "reject"}]}) == "decided (approve, reject)"
    )
    assert answer_verb({"type": "respond", "message": "x"}) == "answered"


def test_without_a_browser_the_browser_tests_skip_but_fail_where_they_must_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HANDRAIL_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception):
        missing("no Chromium")
    monkeypatch.setenv("HANDRAIL_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="must run here"):
        missing("no Chromium")
