"""`handrail demo --model`: the same demo driven by a real model's wire format (issue 4)."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path

import pytest

from handrail.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from _llm_server import LLMServer, json_reply, openai_completion, openai_tool_call


@pytest.fixture(autouse=True)
def no_provider_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the demo keeps its threads in ./handrail.db


class Keyboard(io.StringIO):
    """Typed answers on a stdin that says it is a terminal, so the demo asks instead of approving."""

    def isatty(self) -> bool:
        return True


def test_demo_runs_on_a_model_served_over_the_openai_wire(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LLMServer() as server:
        server.reply(
            json_reply(
                openai_completion(
                    "Reading first.", [openai_tool_call("c1", "read_data", '{"table": "records"}')]
                )
            ),
            json_reply(
                openai_completion(
                    "Archiving, then deleting.",
                    [
                        openai_tool_call(
                            "c2", "write_file", json.dumps({"path": "old.csv", "content": "1,2,3"})
                        ),
                        openai_tool_call(
                            "c3",
                            "execute_sql",
                            json.dumps(
                                {"query": "DELETE FROM records WHERE created_at < date('now', '-30 days')"}
                            ),
                        ),
                    ],
                )
            ),
            json_reply(openai_completion("Done: archived and deleted the old records.")),
        )
        code = main(
            [
                "demo",
                "--yes",
                "--workdir",
                str(tmp_path),
                "--model",
                "openai:qwen3:8b",
                "--base-url",
                server.url + "/v1",
            ]
        )
        bodies = server.bodies()
    out = capsys.readouterr().out
    assert code == 0
    assert "Done: archived and deleted the old records." in out
    assert (tmp_path / "old.csv").read_text() == "1,2,3"
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["write_file", "execute_sql", "read_data"]
    assert bodies[0]["model"] == "qwen3:8b"


def test_demo_with_a_model_but_no_key_says_how_to_set_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["demo", "--yes", "--workdir", str(tmp_path), "--model", "openai:gpt-4o-mini"])
    err = capsys.readouterr().err
    assert code == 1
    assert "OPENAI_API_KEY" in err and "export" in err
    assert "Traceback" not in err
    assert not (tmp_path / "demo.db").exists()  # nothing ran


def test_demo_anthropic_without_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--yes", "--workdir", str(tmp_path), "--model", "claude-sonnet-4-5"])
    assert code == 1
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--base-url", "http://localhost:1/v1"], "--base-url needs --model"),
        (["demo", "--model", "nope:thing"], "unknown model provider 'nope'"),
    ],
)
def test_bad_model_flags_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*argv, "--yes"])
    err = capsys.readouterr().err
    assert code in (1, 2)
    assert message in err and "Traceback" not in err


def test_a_thread_started_on_a_model_resumes_on_it_without_repeating_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    with LLMServer() as server:
        server.reply(
            json_reply(
                openai_completion("Reading.", [openai_tool_call("c1", "read_data", '{"table": "records"}')])
            ),
            json_reply(
                openai_completion(
                    "Deleting.",
                    [
                        openai_tool_call(
                            "c2", "execute_sql", json.dumps({"query": "DELETE FROM records WHERE id = 8"})
                        )
                    ],
                )
            ),
            json_reply(openai_completion("Done: deleted record 8.")),
        )
        monkeypatch.setattr(sys, "stdin", Keyboard("l\n"))
        started = main(
            ["demo", "--workdir", str(work), "--model", "openai:qwen3:8b", "--base-url", server.url + "/v1"]
        )
        out = capsys.readouterr().out
        assert started == 0
        assert "Left for later" in out
        command = re.search(r"demo --resume (\S+)", out)
        assert command is not None
        assert "--model" not in out.split("demo --resume", 1)[1]  # the thread remembers its model

        resumed = main(["demo", "--resume", command[1], "--yes"])
        out = capsys.readouterr().out
        bodies = server.bodies()

    assert resumed == 0
    assert "Model: openai:qwen3:8b" in out
    assert "Done: deleted record 8." in out
    assert len(bodies) == 3 and {body["model"] for body in bodies} == {"qwen3:8b"}
