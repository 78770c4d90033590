"""First use of the library: issue 13's defects in the Python API, each with the SPEC rule it checks."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from handrail import Command, HumanInTheLoopMiddleware
from handrail.errors import ConfigurationError, InvalidDecisionError
from test_docs_examples import ROOT, _examples, _run

from _support import AgentFactory, Ledger, call, config, events_of, turn

TWO_WRITES = [
    turn(call("write_file", "c1", path="a", content="x"), call("write_file", "c2", path="b", content="y")),
    {"content": "done"},
]
APPROVE = {"type": "approve"}


# 8. A bad interrupt_on value never means "not reviewed" (SPEC §3) --------------------------------
@pytest.mark.parametrize("value", [None, 0, 1, "yes", []])
def test_interrupt_on_refuses_anything_but_true_false_or_a_config(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"interrupt_on\['write_file'\]") as raised:
        HumanInTheLoopMiddleware(interrupt_on={"write_file": value})

    assert isinstance(raised.value, ValueError)
    assert "False" in str(raised.value)  # says how to turn review off on purpose


# 9. v2 "values" parts always carry "interrupts" (SPEC §2, stream) -------------------------------
def test_every_v2_values_part_carries_interrupts_empty_while_nothing_is_pending(
    make_agent: AgentFactory,
) -> None:
    agent = make_agent(TWO_WRITES)

    parts = [p for p in agent.stream({"messages": "go"}, config(), stream_mode="values", version="v2")]

    assert all("interrupts" in part for part in parts)
    assert [len(part["interrupts"]) for part in parts][:-1] == [0] * (len(parts) - 1)
    assert len(parts[-1]["interrupts"]) == 1  # the pause
    assert all(isinstance(part["interrupts"], tuple) for part in parts)
    (pending,) = parts[-1]["interrupts"]
    resumed = list(
        agent.stream(
            Command(resume={pending.id: {"decisions": [APPROVE, APPROVE]}}),
            config(),
            stream_mode="values",
            version="v2",
        )
    )
    assert resumed and all(part["interrupts"] == () for part in resumed)


# 10. A resume map with unknown ids says which, and lists the pending ones (rule 5) ----------------
def _two_pending(make_agent: AgentFactory) -> tuple[Any, list[str]]:
    agent = make_agent(TWO_WRITES, mode="per_call")
    out = agent.invoke({"messages": "go"}, config(), version="v2")
    ids = [i.id for i in out.interrupts]
    assert len(ids) == 2
    return agent, ids


@pytest.mark.parametrize("unknown", ["deadbeef", "not-an-id", "0" * 32])
def test_a_map_naming_a_pending_id_and_an_unknown_one_names_the_unknown(
    make_agent: AgentFactory, ledger: Ledger, unknown: str
) -> None:
    agent, ids = _two_pending(make_agent)
    before = events_of(agent)

    with pytest.raises(InvalidDecisionError) as raised:
        agent.invoke(Command(resume={ids[0]: APPROVE, unknown: APPROVE}), config())

    message = str(raised.value)
    assert unknown in message and "ambiguous" not in message
    assert all(i in message for i in ids)  # the pending ones, listed
    assert events_of(agent) == before and ledger.calls == []


@pytest.mark.parametrize("unknown", ["deadbeef", "0123456789abcdef"])
def test_a_one_key_map_whose_key_is_not_a_full_id_names_it_and_the_pending_ids(
    make_agent: AgentFactory, unknown: str
) -> None:
    agent = make_agent(TWO_WRITES)
    out = agent.invoke({"messages": "go"}, config(), version="v2")
    (pending,) = out.interrupts
    before = events_of(agent)

    with pytest.raises(InvalidDecisionError) as raised:
        agent.invoke(Command(resume={unknown: {"decisions": [APPROVE, APPROVE]}}), config())

    message = str(raised.value)
    assert unknown in message and pending.id in message
    assert "must be {'decisions'" not in message
    assert events_of(agent) == before


def test_an_interrupt_object_as_a_key_answers_that_interrupt(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    agent = make_agent(TWO_WRITES, mode="per_call")
    out = agent.invoke({"messages": "go"}, config(), version="v2")
    first, second = out.interrupts

    agent.invoke(Command(resume={first: APPROVE, second: {"type": "reject"}}), config())

    assert ledger.calls == [("write_file", {"path": "a", "content": "x"})]


# 13. An input error names only the keys a caller may send -----------------------------------------
def test_an_input_error_does_not_show_internal_state_keys(make_agent: AgentFactory) -> None:
    agent = make_agent(TWO_WRITES)

    with pytest.raises(ValueError) as raised:
        agent.invoke({"mesages": "go"}, config())

    assert "_hitl" not in str(raised.value)
    assert "messages" in str(raised.value)


# 13. The production guide's examples run twice in a row in the same folder -----------------------
def test_the_production_guides_sqlite_examples_run_twice_in_the_same_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    examples = [e for e in _examples(ROOT / "docs" / "production.md") if "SqliteSaver(" in e.source]
    examples = [e for e in examples if not e.marker]
    assert len(examples) >= 3
    monkeypatch.chdir(tmp_path)
    for example in examples:
        _run(example)
        first = capsys.readouterr().out
        _run(example)  # as a reader who runs the page's examples again would
        assert capsys.readouterr().out == first, example.label


# 13. The README names every package the core installs -------------------------------------------
def test_the_readme_names_every_dependency_of_the_core() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.split(r"[<>=!~ \[]", item, maxsplit=1)[0] for item in declared]
    readme = " ".join((ROOT / "README.md").read_text().split())
    sentence = readme.partition("The core needs only")[2].partition(".")[0]
    assert sentence and all(f"`{name}`" in sentence for name in names), (names, sentence)


# 14. The README's recipes: the web inbox's own store, and no promise of "a few seconds" -----------
def test_the_readme_web_inbox_recipe_keeps_a_store_apart_from_the_demos() -> None:
    """Issue 25 item 11: following the demo and then the web-inbox recipe in one folder
    must not mix both into ./handrail.db: every command of the recipe names its own."""
    readme = (ROOT / "README.md").read_text()
    for page in (readme, (ROOT / "docs" / "service.md").read_text()):
        commands = [
            line
            for line in page.splitlines()
            if re.match(r"\.venv/bin/handrail (tokens create|serve) ", line)
        ]
        recipe = [c for c in commands if "examples.web_inbox" in c or "--role support" in c]
        assert len(recipe) >= 2 and all("--db inbox.db" in c for c in recipe), recipe
    assert "a few seconds" not in readme  # the first make demo installs the core: up to a minute
