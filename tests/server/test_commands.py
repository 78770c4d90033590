"""``handrail tokens`` and ``handrail serve``'s refusals: one line, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from handrail.cli import main


def test_tokens_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "h.db")
    assert main(["tokens", "create", "--name", "alice", "--role", "dba", "--db", db]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    assert token.startswith("hr_")
    assert main(["tokens", "list", "--db", db]) == 0
    listing = capsys.readouterr().out
    assert "alice" in listing and "dba" in listing and token not in listing
    assert main(["tokens", "revoke", "alice", "--db", db]) == 0
    assert "Revoked" in capsys.readouterr().out
    assert main(["tokens", "revoke", "alice", "--db", db]) == 1
    assert "no live token" in capsys.readouterr().err


def test_a_token_made_before_the_service_first_ran_leaves_the_file_usable(tmp_path: Path) -> None:
    """'handrail tokens create --db FILE' on a new file makes the service's tables first; the
    store then opens the file (they are handrail's own, not foreign tables)."""
    from handrail import SqliteSaver

    db = tmp_path / "new.db"
    assert main(["tokens", "create", "--name", "alice", "--db", str(db)]) == 0
    with SqliteSaver(db) as saver:
        assert saver.get_thread("t") is None


def test_a_token_made_on_a_fresh_file_leaves_it_to_the_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from handrail.checkpoint.sqlite import SqliteSaver

    db = str(tmp_path / "fresh.db")
    assert main(["tokens", "create", "--name", "alice", "--db", db]) == 0
    assert main(["tokens", "link", "alice", "--db", db, "--url", "https://review.example"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("https://review.example/inbox/link/")
    SqliteSaver(db).close()  # what 'handrail serve --db' opens first: not refused
    assert main(["tokens", "link", "alice", "--db", db, "--url", "ftp://x"]) == 1
    assert "--url must start with http:// or https://" in capsys.readouterr().err
    assert main(["tokens", "link", "alice", "--db", db, "--minutes", "0"]) == 1
    assert "--minutes must be a positive number of minutes, got 0" in capsys.readouterr().err
    # Issue 25, item 7e: said in minutes, as given (it said "got -300.0", in seconds)
    assert main(["tokens", "link", "alice", "--db", db, "--minutes", "-5"]) == 1
    assert "--minutes must be a positive number of minutes, got -5\n" in capsys.readouterr().err
    assert main(["tokens", "link", "alice", "--db", db, "--minutes", str(8 * 24 * 60)]) == 1
    assert "at most 7 days" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tokens", "create", "--name", "bad name!"], "a token's name"),
        (["tokens"], "choose an action"),
        (["tokens", "link", "nobody"], "no live token with name or id 'nobody'"),
        (["serve", "nomodule_here:agent"], "cannot import"),
        (["serve", "served_agent"], "module:attribute"),
        (["serve", "served_agent:RAN"], "not an Agent"),
        (["serve"], "name an agent"),
        (["serve", "served_agent:agent", "--agent", "oops"], "NAME=module:attribute"),
        (["worker"], "name an agent"),
        (["worker", "served_agent:agent", "--concurrency", "0"], "at least 1"),
        (["worker", "served_agent:agent", "--poll", "0"], "--poll"),
    ],
)
def test_service_commands_refuse_in_one_line(
    argv: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(Path(__file__).parent)
    assert main([*argv, "--db", str(tmp_path / "h.db")] if argv != ["tokens"] else argv) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
