"""The demo agent, driven through its injectable console and prompt function (no TTY)."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
from rich.console import Console

from handrail import InMemorySaver, ToolMessage
from handrail.cli._demo_agent import DELETE_QUERY, EDIT_NOTICE
from handrail.cli.demo import (
    DemoError,
    DemoResult,
    DemoWorkspace,
    ToolOutcome,
    find_demo_thread,
    make_demo_tools,
    run_demo,
    waiting_demo_threads,
)

ALL_IDS = [1, 2, 3, 4, 5, 6, 7, 8]
RECENT_IDS = [1, 2, 3, 4, 5]  # rows 6, 7 and 8 are older than 30 days


class Answers:
    """A scripted person: answers prompts in order and remembers what was asked."""

    def __init__(self, answers: Iterable[str]) -> None:
        self.remaining = list(answers)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.remaining:
            raise AssertionError(f"the demo asked more than the test answered: {prompt!r}")
        return self.remaining.pop(0)

    def asked(self, start: str) -> int:
        return sum(1 for prompt in self.prompts if prompt.startswith(start))


def never_asked(prompt: str) -> str:
    raise AssertionError(f"the demo asked a question in automatic mode: {prompt!r}")


@pytest.fixture
def out() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def console(out: io.StringIO) -> Console:
    return Console(file=out, force_terminal=False, width=120)


def outcome(result: DemoResult, name: str) -> ToolOutcome:
    (found,) = [o for o in result.outcomes if o.name == name]
    return found


def tool_message(result: DemoResult, name: str) -> ToolMessage:
    (found,) = [m for m in result.messages if isinstance(m, ToolMessage) and m.name == name]
    return found


def test_approving_everything_archives_and_deletes_the_old_records(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    answers = Answers(["a", "a"])

    result = run_demo(console, answers, workdir=tmp_path)

    assert answers.asked("Decision for write_file") == 1
    assert answers.asked("Decision for execute_sql") == 1
    assert result.workspace.record_ids() == RECENT_IDS
    with (tmp_path / "old_records.csv").open() as archive:
        assert [row["id"] for row in csv.DictReader(archive)] == ["6", "7", "8"]
    assert [(o.name, o.review) for o in result.outcomes] == [
        ("read_data", "not reviewed"),
        ("write_file", "approved"),
        ("execute_sql", "approved"),
        ("read_data", "not reviewed"),
    ]
    assert "Deleted 3 rows." in result.final_answer
    assert "now holds 5 rows, 0 of them older than 30 days" in result.final_answer
    shown = out.getvalue()
    for part in ("Review 1 of 2: write_file", "Review 2 of 2: execute_sql", DELETE_QUERY, "Final answer"):
        assert part in shown


def test_review_panel_shows_tool_arguments_description_and_allowed_decisions(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    run_demo(console, Answers(["a", "a"]), workdir=tmp_path)

    shown = out.getvalue()
    assert '"path": "old_records.csv"' in shown
    assert "SQL can change or delete data for good" in shown
    assert "Allowed: approve, edit, reject, respond" in shown
    assert re.search(r"Allowed: approve, edit, reject\s+│", shown)


def test_editing_the_delete_runs_the_edited_query_and_not_the_original(
    console: Console, tmp_path: Path
) -> None:
    edited = "DELETE FROM records WHERE id = 8"
    answers = Answers(["a", "e", json.dumps({"query": edited})])

    result = run_demo(console, answers, workdir=tmp_path)

    assert result.workspace.record_ids() == [1, 2, 3, 4, 5, 6, 7]  # only row 8 went
    sql = outcome(result, "execute_sql")
    assert (sql.review, sql.proposed_args, sql.final_args) == (
        "edited",
        {"query": DELETE_QUERY},
        {"query": edited},
    )
    assert tool_message(result, "execute_sql").text.startswith(EDIT_NOTICE)
    assert "execute_sql (as edited by the reviewer): Deleted 1 row." in result.final_answer


def test_editing_field_by_field_keeps_what_is_left_empty(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    answers = Answers(["e", "", "", "", "a"])  # write_file: Enter for JSON, then keep path and content

    result = run_demo(console, answers, workdir=tmp_path)

    assert answers.prompts[2].startswith("path (Enter keeps it")
    assert answers.prompts[3].startswith("content (Enter keeps it")
    assert 'path now: "old_records.csv"' in out.getvalue()
    assert outcome(result, "write_file").review == "approved"  # nothing changed: approved as proposed
    assert (tmp_path / "old_records.csv").exists()


def test_editing_one_field_changes_only_that_argument(console: Console, tmp_path: Path) -> None:
    answers = Answers(["a", "e", "", "DELETE FROM records WHERE id = 7"])

    result = run_demo(console, answers, workdir=tmp_path)

    assert result.workspace.record_ids() == [1, 2, 3, 4, 5, 6, 8]
    assert outcome(result, "execute_sql").final_args == {"query": "DELETE FROM records WHERE id = 7"}


def test_a_json_edit_replaces_the_keys_it_gives_and_keeps_the_others(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    """Issue 25, item 5: one rule for the demo and 'handrail edit --args', said where it is asked:
    the keys given replace those shown, the others keep their proposed values; handrail then
    checks the merged arguments as any edit."""
    answers = Answers(["e", json.dumps({"path": "kept.csv"}), "a"])

    result = run_demo(console, answers, workdir=tmp_path)

    assert "the others keep their proposed values" in answers.prompts[1]
    edited = outcome(result, "write_file")
    assert edited.review == "edited" and edited.final_args is not None
    assert edited.final_args["path"] == "kept.csv" and edited.final_args["content"]  # content as proposed
    assert (tmp_path / "kept.csv").read_text() == edited.final_args["content"]


def test_a_refused_edit_shows_handrails_reason_and_asks_again(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    answers = Answers(
        [
            "a",
            "e",
            json.dumps({"sql": "DELETE FROM records"}),  # not an argument of execute_sql
            "e",
            json.dumps({"query": "DELETE FROM records WHERE id = 6"}),
        ]
    )

    result = run_demo(console, answers, workdir=tmp_path)

    shown = out.getvalue()
    assert "handrail refused the answer" in shown
    assert "Extra inputs are not permitted" in shown
    assert answers.asked("Decision for write_file") == 1  # the accepted decision is not asked again
    assert answers.asked("Decision for execute_sql") == 2
    assert result.workspace.record_ids() == [1, 2, 3, 4, 5, 7, 8]
    assert outcome(result, "execute_sql").final_args == {"query": "DELETE FROM records WHERE id = 6"}


def test_a_refused_edit_can_be_answered_with_a_rejection_instead(console: Console, tmp_path: Path) -> None:
    answers = Answers(["a", "e", json.dumps({"query": 42}), "r", ""])

    result = run_demo(console, answers, workdir=tmp_path)

    assert result.workspace.record_ids() == ALL_IDS
    assert outcome(result, "execute_sql").review == "rejected"


def test_rejecting_the_delete_with_a_reason_keeps_the_rows_and_tells_the_model(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    answers = Answers(["a", "r", "keep them for the audit"])

    result = run_demo(console, answers, workdir=tmp_path)

    assert result.workspace.record_ids() == ALL_IDS
    sql = outcome(result, "execute_sql")
    assert (sql.review, sql.ran) == ("rejected", False)
    message = tool_message(result, "execute_sql")
    assert message.status == "error"
    assert (
        message.text == "User rejected the tool call for `execute_sql` with reason: keep them for the audit"
    )
    assert "execute_sql was rejected, so I did not run it." in result.final_answer
    assert "keep them for the audit" in result.final_answer
    assert "Not run" in out.getvalue()


def test_rejecting_without_a_reason_uses_handrails_default_message(console: Console, tmp_path: Path) -> None:
    answers = Answers(["a", "r", ""])

    result = run_demo(console, answers, workdir=tmp_path)

    assert "The tool was not executed" in tool_message(result, "execute_sql").text


def test_responding_to_write_file_gives_the_model_the_reply_instead_of_writing(
    console: Console, tmp_path: Path
) -> None:
    answers = Answers(["s", "", "An archive already exists on the shared drive.", "a"])

    result = run_demo(console, answers, workdir=tmp_path)

    assert not (tmp_path / "old_records.csv").exists()
    assert answers.prompts[2].startswith("Your reply")  # an empty reply is asked again
    write = outcome(result, "write_file")
    assert (write.review, write.ran) == ("answered", False)
    assert tool_message(result, "write_file").text == "An archive already exists on the shared drive."
    assert result.workspace.record_ids() == RECENT_IDS


def test_respond_is_not_offered_where_the_policy_does_not_allow_it(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    answers = Answers(["a", "s", "respond", "a"])

    run_demo(console, answers, workdir=tmp_path)

    assert "respond" not in answers.prompts[1]
    assert answers.asked("Decision for execute_sql") == 3
    assert "Please answer one of: a, e, r." in out.getvalue()


def test_invalid_json_while_editing_is_explained_and_asked_again(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    answers = Answers(
        ["a", "e", "{query: oops", "[1, 2]", json.dumps({"query": "DELETE FROM records WHERE id = 8"})]
    )

    result = run_demo(console, answers, workdir=tmp_path)

    shown = out.getvalue()
    assert "That is not valid JSON" in shown
    assert "The arguments must be a JSON object" in shown
    assert result.workspace.record_ids() == [1, 2, 3, 4, 5, 6, 7]


def test_auto_approve_answers_every_review_without_asking(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    result = run_demo(console, never_asked, workdir=tmp_path, auto_approve=True)

    assert result.workspace.record_ids() == RECENT_IDS
    assert [o.review for o in result.outcomes if o.name != "read_data"] == ["approved", "approved"]
    assert "Approved execute_sql automatically." in out.getvalue()


def test_a_thread_left_waiting_for_review_continues_where_it_paused(console: Console, tmp_path: Path) -> None:
    saver = InMemorySaver()

    def walk_away(prompt: str) -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_demo(console, walk_away, checkpointer=saver, thread_id="t-1", workdir=tmp_path)
    assert DemoWorkspace.open(tmp_path).record_ids() == ALL_IDS  # nothing ran while waiting

    result = run_demo(console, Answers(["a", "a"]), checkpointer=saver, thread_id="t-1", workdir=tmp_path)

    assert result.thread_id == "t-1"
    assert result.workspace.record_ids() == RECENT_IDS
    assert [o.name for o in result.outcomes] == ["read_data", "write_file", "execute_sql", "read_data"]
    assert [o.review for o in result.outcomes][1:3] == ["approved", "approved"]


def test_write_file_refuses_paths_outside_the_working_directory(tmp_path: Path) -> None:
    workspace = DemoWorkspace.open(tmp_path / "work")
    write_file = make_demo_tools(workspace)[0]

    with pytest.raises(ValueError, match="outside the working directory"):
        write_file.invoke({"path": "../escape.txt", "content": "x"})
    assert not (tmp_path / "escape.txt").exists()


def test_read_data_names_the_tables_when_asked_for_an_unknown_one(tmp_path: Path) -> None:
    workspace = DemoWorkspace.open(tmp_path)
    workspace.seed()
    read_data = make_demo_tools(workspace)[2]

    with pytest.raises(ValueError, match=r"no table 'users'; tables: \['records'\]"):
        read_data.invoke({"table": "users"})


def test_a_file_cannot_be_the_working_directory(tmp_path: Path) -> None:
    path = tmp_path / "file.txt"
    path.write_text("x")

    with pytest.raises(DemoError, match="is not a directory"):
        DemoWorkspace.open(path)


def test_a_finished_thread_is_shown_again_without_running_anything(console: Console, tmp_path: Path) -> None:
    saver = InMemorySaver()
    first = run_demo(
        console, Answers(["a", "r", "not today"]), checkpointer=saver, thread_id="t", workdir=tmp_path
    )

    again = run_demo(console, never_asked, checkpointer=saver, thread_id="t", workdir=tmp_path)

    assert again.final_answer == first.final_answer
    assert again.workspace.record_ids() == ALL_IDS
    # Decided in an earlier call: the reviews come from the thread's audit trail.
    assert [o.review for o in again.outcomes][1:3] == ["approved", "rejected"]
    assert [o.ran for o in again.outcomes][1:3] == [True, False]


# Leaving a review for later, and picking the thread up again -----------------------------------
def test_later_is_offered_only_when_the_thread_outlives_the_call(console: Console, tmp_path: Path) -> None:
    kept = Answers(["l"])
    run_demo(console, kept, checkpointer=InMemorySaver(), workdir=tmp_path / "kept")
    lost = Answers(["a", "a"])
    run_demo(console, lost, workdir=tmp_path / "lost")  # its own InMemorySaver: gone after the call

    assert "later (l)" in kept.prompts[0]
    assert "later" not in lost.prompts[0]


def test_answering_later_stops_before_anything_runs_and_the_thread_waits(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    saver = InMemorySaver()

    result = run_demo(console, Answers(["l"]), checkpointer=saver, thread_id="t-later", workdir=tmp_path)

    assert result.waiting
    assert result.final_answer == ""
    assert [o.name for o in result.outcomes] == ["read_data"]  # only the unreviewed read ran
    assert result.workspace.record_ids() == ALL_IDS
    assert not (tmp_path / "old_records.csv").exists()
    assert "waits for review" in out.getvalue()
    snapshot = saver.get_thread("t-later")
    assert snapshot is not None and snapshot.status == "interrupted"

    again = run_demo(console, Answers(["a", "a"]), checkpointer=saver, thread_id="t-later")

    assert not again.waiting
    assert again.workspace.root == tmp_path.resolve()  # found again from the thread's metadata
    assert again.workspace.record_ids() == RECENT_IDS
    assert [o.review for o in again.outcomes][1:3] == ["approved", "approved"]


def test_later_after_answering_part_of_a_review_says_those_answers_were_not_sent(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    saver = InMemorySaver()

    person = Answers(["a", "l", "y"])
    result = run_demo(console, person, checkpointer=saver, thread_id="t", workdir=tmp_path)

    assert result.waiting
    assert "You answered 1 of the 2 calls in this review. Later sends none of it" in out.getvalue()
    assert person.prompts[-1] == "Leave the whole review for later? (y/N):"  # asked before leaving
    assert "were not sent" in out.getvalue()
    assert not (tmp_path / "old_records.csv").exists()  # the approved write_file did not run
    resumed = Answers(["r", "", "a"])
    again = run_demo(console, resumed, checkpointer=saver, thread_id="t")
    assert resumed.asked("Decision for write_file") == 1  # the whole review is asked again
    assert outcome(again, "write_file").review == "rejected"


def test_a_new_thread_records_the_demo_and_its_work_directory_in_its_metadata(
    console: Console, tmp_path: Path
) -> None:
    saver = InMemorySaver()

    run_demo(
        console,
        never_asked,
        checkpointer=saver,
        thread_id="t-meta",
        workdir=tmp_path,
        auto_approve=True,
        metadata={"model": "openai:gpt-4o-mini"},
    )

    found = find_demo_thread(saver, "t-meta")
    assert found is not None
    assert (found.is_demo, found.workdir, found.model, found.status) == (
        True,
        tmp_path.resolve(),
        "openai:gpt-4o-mini",
        "idle",
    )
    assert find_demo_thread(saver, "no-such-thread") is None


def test_resuming_shows_the_conversation_so_far_before_the_pending_review(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    saver = InMemorySaver()
    run_demo(console, Answers(["l"]), checkpointer=saver, thread_id="t", workdir=tmp_path)
    out.truncate(0)
    out.seek(0)

    run_demo(console, Answers(["a", "a"]), checkpointer=saver, thread_id="t")

    shown = out.getvalue()
    assert "Continuing the conversation saved for this thread." in shown
    assert shown.index("read_data -> 8 rows from records") < shown.index("Review 1 of 2: write_file")


def test_a_work_directory_that_vanished_is_seeded_again_on_resume(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    saver = InMemorySaver()
    run_demo(console, Answers(["l"]), checkpointer=saver, thread_id="t", workdir=tmp_path / "w")
    (tmp_path / "w" / "demo.db").unlink()

    result = run_demo(console, Answers(["a", "a"]), checkpointer=saver, thread_id="t")

    assert "Its database was gone" in out.getvalue()
    assert result.workspace.record_ids() == RECENT_IDS


def test_waiting_demo_threads_lists_the_threads_left_for_later(console: Console, tmp_path: Path) -> None:
    saver = InMemorySaver()
    for name in ("first", "second"):
        run_demo(console, Answers(["l"]), checkpointer=saver, thread_id=name, workdir=tmp_path / name)
    run_demo(console, never_asked, checkpointer=saver, thread_id="done", workdir=tmp_path, auto_approve=True)

    waiting = waiting_demo_threads(saver)

    assert [t.thread_id for t in waiting] == ["first", "second"]
    assert waiting[0].tools == ("write_file", "execute_sql")
    assert waiting[0].workdir == str((tmp_path / "first").resolve())


def test_when_another_session_answers_first_the_demo_shows_the_thread_as_it_stands(
    console: Console, out: io.StringIO, tmp_path: Path
) -> None:
    saver = InMemorySaver()
    run_demo(console, Answers(["l"]), checkpointer=saver, thread_id="t", workdir=tmp_path)

    def slow_reviewer(prompt: str) -> str:
        # While this person reads the request, someone else approves it in another session.
        if prompt.startswith("Decision for write_file"):
            run_demo(
                Console(file=io.StringIO()), never_asked, checkpointer=saver, thread_id="t", auto_approve=True
            )
        return "a" if prompt.startswith("Decision") else ""

    result = run_demo(console, slow_reviewer, checkpointer=saver, thread_id="t")

    assert "Another session got there first" in out.getvalue()
    assert not result.waiting
    assert result.workspace.record_ids() == RECENT_IDS
    assert "Deleted 3 rows." in result.final_answer
    results = [m for m in result.messages if isinstance(m, ToolMessage) and m.name == "execute_sql"]
    assert len(results) == 1


def test_after_a_conflict_the_summary_shows_the_other_sessions_edit_from_the_audit_trail(
    console: Console, tmp_path: Path
) -> None:
    """Issue 13: the losing reviewer sees what ran (edited, with the edited query), not 'unknown'."""
    saver = InMemorySaver()
    run_demo(console, Answers(["l"]), checkpointer=saver, thread_id="t", workdir=tmp_path)
    edited = "DELETE FROM records WHERE id = 8"

    def slow_reviewer(prompt: str) -> str:
        if prompt.startswith("Decision for write_file"):  # meanwhile another reviewer edits the DELETE
            other = Answers(["a", "e", json.dumps({"query": edited})])
            run_demo(Console(file=io.StringIO()), other, checkpointer=saver, thread_id="t")
        return "a" if prompt.startswith("Decision") else ""

    result = run_demo(console, slow_reviewer, checkpointer=saver, thread_id="t")

    sql = outcome(result, "execute_sql")
    assert (sql.review, sql.final_args) == ("edited", {"query": edited})
    assert outcome(result, "write_file").review == "approved"
    assert result.workspace.record_ids() == [1, 2, 3, 4, 5, 6, 7]
