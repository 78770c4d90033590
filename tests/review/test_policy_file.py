"""Policy files (SPEC §5.4): read as strictly as code, every problem named by file, line and
key, never weaker than they read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail import Command, HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent
from handrail.errors import ConfigurationError, InvalidDecisionError
from handrail.review.policy_file import PolicyFileError, load_policy_file

EXAMPLE = """\
# the support agent's reviews
[agents.support]
description_prefix = "Support action pending review"

[agents.support.interrupt_on]
read_data = false
send_email = true

[agents.support.interrupt_on.refund]
allowed_decisions = ["approve", "reject"]
reviewers = ["support"]
description = "Refunds need a second pair of eyes"
"""


def write(tmp_path: Path, text: str, name: str = "handrail.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refund(payment_id: str, amount_cents: int) -> str:
    """Refund a payment."""
    return f"refunded {amount_cents} on {payment_id}"


def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def read_data(table: str) -> str:
    """Read a table."""
    return "rows"


def test_a_policy_file_gates_the_agent_as_the_same_policy_in_code_does(tmp_path: Path) -> None:
    policies = load_policy_file(write(tmp_path, EXAMPLE))
    options = policies.for_agent("support", tools=["refund", "send_email", "read_data"])
    assert options == {
        "interrupt_on": {
            "read_data": False,
            "send_email": True,
            "refund": {
                "allowed_decisions": ["approve", "reject"],
                "reviewers": ["support"],
                "description": "Refunds need a second pair of eyes",
            },
        },
        "description_prefix": "Support action pending review",
    }
    ran: list[str] = []

    def refund_logged(payment_id: str, amount_cents: int) -> str:
        """Refund a payment."""
        ran.append(payment_id)
        return "refunded"

    refund_logged.__name__ = "refund"
    call = {"name": "refund", "args": {"payment_id": "p1", "amount_cents": 500}}
    agent = create_agent(
        ScriptedModel([{"content": "", "tool_calls": [call]}, {"content": "Done."}]),
        tools=[refund_logged, send_email, read_data],
        middleware=[HumanInTheLoopMiddleware(**options)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t", "reviewer": {"id": "sam", "roles": ["support"]}}}
    paused = agent.invoke({"messages": [{"role": "user", "content": "refund p1"}]}, config)
    (interrupt,) = paused["__interrupt__"]
    assert interrupt.value["review_configs"][0]["allowed_decisions"] == ["approve", "reject"]
    assert interrupt.value["action_requests"][0]["description"].startswith("Refunds need")
    assert ran == []
    with pytest.raises(InvalidDecisionError, match="Decision type 'edit' is not allowed"):  # not in the file
        agent.invoke(Command(resume={"decisions": [{"type": "edit", "edited_action": call}]}), config)
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert ran == ["p1"]


@pytest.mark.parametrize(
    ("change", "line", "key", "said"),
    [
        (('reviewers = ["support"]', 'reviewrs = ["support"]'), 11, "refund.reviewrs", "unknown key"),
        (
            ('reviewers = ["support"]', 'expires_after = "soon"'),
            11,
            "refund.expires_after",
            "cannot read the duration",
        ),
        (
            ('reviewers = ["support"]', "required_approvals = 0"),
            11,
            "refund.required_approvals",
            "whole number from 1",
        ),
        (('reviewers = ["support"]', 'when = "amount > 10"'), 11, "refund.when", "Python callable"),
        (('reviewers = ["support"]', "reviewers = []"), 11, "refund.reviewers", "non-empty list"),
        (('["approve", "reject"]', '["approve", "maybe"]'), 10, "refund.allowed_decisions", "maybe"),
        (("send_email = true", 'send_email = "yes"'), 7, "interrupt_on.send_email", "must be True, False"),
        (
            ('description_prefix = "Support action pending review"', "prefix = 1"),
            3,
            "support.prefix",
            "unknown",
        ),
        (
            ("[agents.support.interrupt_on]\n", "[agents.support.interrupt]\n"),
            5,
            "support.interrupt",
            "unknown",
        ),
    ],
)
def test_every_problem_names_the_file_the_line_and_the_key(
    tmp_path: Path, change: tuple[str, str], line: int, key: str, said: str
) -> None:
    old, new = change
    assert old in EXAMPLE
    path = write(tmp_path, EXAMPLE.replace(old, new, 1))
    with pytest.raises(PolicyFileError) as refused:
        load_policy_file(path)
    assert refused.value.path == path and refused.value.line == line, str(refused.value)
    assert refused.value.key is not None and refused.value.key.endswith(key), refused.value.key
    assert said in str(refused.value) and str(refused.value).startswith(f"{path}:{line}: ")
    assert isinstance(refused.value, ConfigurationError)


def test_a_file_that_is_not_toml_names_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, EXAMPLE.replace('reviewers = ["support"]', 'reviewers = ["support"'))
    with pytest.raises(PolicyFileError, match="is not valid TOML") as refused:
        load_policy_file(path)
    assert refused.value.line is not None and refused.value.line >= 11


def test_an_unreadable_or_empty_file_is_refused_never_read_as_no_review(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match="cannot be read"):
        load_policy_file(tmp_path / "missing.toml")
    with pytest.raises(PolicyFileError, match=r"at least one \[agents.NAME\]"):
        load_policy_file(write(tmp_path, "# nothing yet\n"))
    with pytest.raises(PolicyFileError, match="notifications: must be a table"):
        load_policy_file(write(tmp_path, EXAMPLE + '\n[[notifications]]\nurl = "https://x"\n'))


def test_a_tool_or_agent_that_is_not_there_is_refused_at_its_line(tmp_path: Path) -> None:
    policies = load_policy_file(write(tmp_path, EXAMPLE))
    with pytest.raises(PolicyFileError, match="agent 'support' has no tool 'refund'") as refused:
        policies.for_agent("support", tools=["send_email", "read_data"])
    assert refused.value.line == 9
    with pytest.raises(PolicyFileError, match="has no policy for agent 'billing'"):
        policies.for_agent("billing", tools=["refund"])
    with pytest.raises(PolicyFileError, match="no agent is named 'support' here") as refused:
        policies.check({"billing": ["refund"]})
    assert refused.value.line == 2
    policies.check({"support": ["refund", "send_email", "read_data"], "other": []})


def test_the_tool_handrail_table_of_pyproject_is_a_policy_file(tmp_path: Path) -> None:
    text = '[project]\nname = "app"\n\n' + EXAMPLE.replace("[agents.", "[tool.handrail.agents.")
    path = write(tmp_path, text.replace("reviewers =", "reviewrs ="), name="pyproject.toml")
    with pytest.raises(PolicyFileError) as refused:
        load_policy_file(path)
    assert (
        refused.value.line == 14
        and refused.value.key == "tool.handrail.agents.support.interrupt_on.refund.reviewrs"
    )
    loaded = load_policy_file(write(tmp_path, text, name="pyproject.toml"))
    assert loaded.agents["support"]["interrupt_on"]["refund"]["reviewers"] == ["support"]
    with pytest.raises(PolicyFileError, match=r"has no \[tool.handrail\] table"):
        load_policy_file(write(tmp_path, '[project]\nname = "app"\n', name="pyproject.toml"))


def test_a_key_in_an_inline_table_or_a_quoted_key_is_located(tmp_path: Path) -> None:
    text = (
        '[agents."support-2"]\n'
        "interrupt_on = { refund = { allowed_decisions = [\n"
        '    "approve",\n'
        '], reviewrs = ["x"] } }\n'
    )
    with pytest.raises(PolicyFileError) as refused:
        load_policy_file(write(tmp_path, text))
    assert refused.value.line == 2 and refused.value.key == "agents.support-2.interrupt_on.refund.reviewrs"


# Hypothesis: any policy written in a file loads as exactly what it declares; any key the
# parser does not know, put anywhere in it, makes the whole file refused.
DECISIONS = ["approve", "edit", "reject", "respond"]
names = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
entries = st.one_of(
    st.booleans(),
    st.fixed_dictionaries(
        {"allowed_decisions": st.lists(st.sampled_from(DECISIONS), min_size=1, max_size=4, unique=True)},
        optional={
            "reviewers": st.lists(names, min_size=1, max_size=3),
            "description": st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40),
        },
    ),
)
policies = st.dictionaries(
    names, st.dictionaries(names, entries, min_size=1, max_size=4), min_size=1, max_size=3
)


def to_toml(agents: dict[str, dict[str, Any]]) -> tuple[str, dict[tuple[str, ...], int]]:
    """The agents as TOML, one table a tool, and the line of each key written."""
    lines: list[str] = []
    where: dict[tuple[str, ...], int] = {}
    for agent, tools in agents.items():
        lines.append(f"[agents.{agent}.interrupt_on]")
        for tool, entry in tools.items():
            if isinstance(entry, bool):
                lines.append(f"{tool} = {'true' if entry else 'false'}")
        for tool, entry in tools.items():
            if isinstance(entry, dict):
                lines.append(f"[agents.{agent}.interrupt_on.{tool}]")
                for key, value in entry.items():
                    lines.append(f"{key} = {json.dumps(value, ensure_ascii=False)}")
                    where[(agent, tool, key)] = len(lines)
    return "\n".join(lines) + "\n", where


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(agents=policies, data=st.data())
def test_random_policy_files_load_as_declared_and_an_unknown_key_anywhere_refuses_them(
    tmp_path: Path, agents: dict[str, dict[str, Any]], data: st.DataObject
) -> None:
    text, where = to_toml(agents)
    loaded = load_policy_file(write(tmp_path, text))
    assert {name: dict(table["interrupt_on"]) for name, table in loaded.agents.items()} == agents
    if not where:
        return
    agent, tool, key = data.draw(st.sampled_from(sorted(where)))
    bad = data.draw(names.filter(lambda k: k not in {"allowed_decisions", "reviewers", "description"}))
    lines = text.splitlines()
    lines.insert(where[(agent, tool, key)], f"{bad} = true")
    with pytest.raises(PolicyFileError) as refused:
        load_policy_file(write(tmp_path, "\n".join(lines) + "\n"))
    assert refused.value.line == where[(agent, tool, key)] + 1
    assert refused.value.key == f"agents.{agent}.interrupt_on.{tool}.{bad}"


def test_handrail_policy_check_lints_a_file_and_checks_it_against_agents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from handrail.cli import main

    good = write(tmp_path, EXAMPLE)
    assert main(["policy", "check", str(good)]) == 0
    assert capsys.readouterr().out.strip() == f"{good}: ok: 3 tool policies for support"
    bad = write(tmp_path, EXAMPLE.replace("reviewers =", "reviewrs ="), name="bad.toml")
    assert main(["policy", "check", str(bad)]) == 1
    said = capsys.readouterr().err
    assert f"{bad}:11: agents.support.interrupt_on.refund.reviewrs: unknown key" in " ".join(said.split())
    (tmp_path / "policy_agents.py").write_text(
        "from handrail import create_agent, ScriptedModel\n"
        "def refund(payment_id: str) -> str:\n    return 'ok'\n"
        "def send_email(to: str) -> str:\n    return 'ok'\n"
        "support = create_agent(ScriptedModel([]), tools=[refund, send_email], name='support')\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["policy", "check", str(good), "policy_agents:support"]) == 1
    assert "agent 'support' has no tool 'read_data'" in " ".join(capsys.readouterr().err.split())
    assert main(["policy", "check", str(good), "--agent", "billing=policy_agents:support"]) == 1
    assert "no agent is named 'support' here" in " ".join(capsys.readouterr().err.split())
    assert main(["policy"]) == 2


def test_create_agent_takes_a_policy_file_for_its_name_and_refuses_two_policies(tmp_path: Path) -> None:
    path = write(tmp_path, EXAMPLE)
    call = {"name": "refund", "args": {"payment_id": "p1", "amount_cents": 500}}
    agent = create_agent(
        ScriptedModel([{"content": "", "tool_calls": [call]}, {"content": "Done."}]),
        tools=[refund, send_email, read_data],
        checkpointer=InMemorySaver(),
        name="support",
        policy_file=path,
    )
    config = {"configurable": {"thread_id": "t"}}
    paused = agent.invoke({"messages": [{"role": "user", "content": "refund p1"}]}, config)
    (interrupt,) = paused["__interrupt__"]
    assert interrupt.value["review_configs"][0]["allowed_decisions"] == ["approve", "reject"]
    assert interrupt.value["action_requests"][0]["description"].startswith("Refunds need")
    with pytest.raises(ConfigurationError, match="both give the review policy"):
        create_agent(
            ScriptedModel([]),
            tools=[refund, send_email, read_data],
            middleware=[HumanInTheLoopMiddleware({"refund": True})],
            name="support",
            policy_file=path,
        )
    with pytest.raises(PolicyFileError, match="agent 'support' has no tool 'read_data'"):
        create_agent(ScriptedModel([]), tools=[refund, send_email], name="support", policy_file=path)
    with pytest.raises(PolicyFileError, match="has no policy for agent 'billing'"):
        create_agent(ScriptedModel([]), tools=[refund], name="billing", policy_file=path)
    unnamed = create_agent(ScriptedModel([]), tools=[refund, send_email, read_data], policy_file=path)
    assert unnamed.name is None  # the file's only agent gave the policy
    two = write(tmp_path, EXAMPLE + "\n[agents.billing.interrupt_on]\nrefund = true\n", name="two.toml")
    with pytest.raises(PolicyFileError, match=r"holds several agents \(billing, support\)"):
        create_agent(ScriptedModel([]), tools=[refund], policy_file=two)


def test_a_file_writes_expiry_as_a_duration_and_the_review_keeps_it(tmp_path: Path) -> None:
    """§5.4 with rule 15: ``expires_after = "1h"`` in a file is 3600 seconds in the review's terms."""
    from handrail.review.policy_file import load_policy_file

    path = tmp_path / "handrail.toml"
    path.write_text(
        "[agents.support.interrupt_on.refund]\n"
        'allowed_decisions = ["approve", "reject"]\n'
        'expires_after = "1h"\n'
        "required_approvals = 2\n"
        "allow_self_approval = false\n"
    )
    found = load_policy_file(path).for_agent("support", tools=["refund"])
    assert found["interrupt_on"]["refund"]["expires_after"] == 3600.0
