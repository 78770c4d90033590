"""Slack approvals (SPEC §5.4, rules 11-15, 17): real slack_sdk clients against a local lookalike.

A review is posted with ``SlackChannel`` (the deliverer's Slack channel) to
:class:`slack_lookalike.SlackLookalike`, a server on 127.0.0.1 speaking the Web API;
clicks and modal submissions are signed like Slack's and posted to the service's
``/handrail/slack/actions``. What ran is judged by the tools' ledger once the worker ran
the thread, what was recorded by the thread's audit trail, never by the replies alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from slack_lookalike import SECRET, TEAM, TOKEN, SlackLookalike, buttons_of, signed, text_of

from conftest import Backend
from handrail import AIMessage, HumanInTheLoopMiddleware, HumanMessage, ScriptedModel, create_agent
from handrail.notify.channels import Delivery, Endpoint
from handrail.notify.events import event_of
from handrail.notify.slack import SlackChannel, SlackSettings
from handrail.runtime import answering
from handrail.server import _slack as slack
from handrail.server import _slack_replies as slack_replies
from handrail.server.app import create_app
from handrail.server.slack_users import SlackUsers

RAN: list[str] = []
PUBLIC = "https://handrail.example"
CHANNEL = "C0REVIEWS"
ENDPOINT = Endpoint("file:slack", "slack", CHANNEL, ("review.requested", "review.decided"))
USERS = {"U0ALICE": "alice", "U0BOB": "bob", "U0DAVE": "dave", "U0CAROL": "carol", "U0GONE": "gone"}


def execute_sql(query: str) -> str:
    """Run a SQL statement."""
    RAN.append(query)
    return f"ran {query}"


def vote_sql(query: str) -> str:
    """Run a SQL statement two DBAs approved."""
    RAN.append(query)
    return f"ran {query}"


def build(saver: Any) -> Any:
    def turn(messages: list[Any]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            if last.text.startswith("vote "):
                return AIMessage("", tool_calls=[{"name": "vote_sql", "args": {"query": last.text[5:]}}])
            return AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"query": last.text}}])
        return AIMessage(f"done: {last.text}")

    policy = {
        "execute_sql": {
            "allowed_decisions": ["approve", "reject", "respond"],
            "reviewers": ["dba"],
            "allow_self_approval": False,
            "expires_after": 3600,
        },
        "vote_sql": {
            "allowed_decisions": ["approve", "reject"],
            "reviewers": ["dba"],
            "required_approvals": 2,
        },
    }
    return create_agent(
        ScriptedModel([turn] * 1000),
        tools=[execute_sql, vote_sql],
        middleware=[HumanInTheLoopMiddleware(policy)],
        checkpointer=saver,
        name="sql",
    )


class Receipts:
    """What the outbox keeps of earlier deliveries (``Outbox.receipt``), in memory."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str, str], Any] = {}

    def receipt(self, endpoint_id: str, interrupt_id: str, event: str) -> Any:
        return self.kept.get((endpoint_id, interrupt_id, event))


class World:
    """The service with the Slack route, its tokens and Slack users, and the lookalike."""

    def __init__(self, backend: Backend, lookalike: SlackLookalike) -> None:
        self.agent = build(backend.saver())
        self.db = backend.server_db()
        self.app = create_app({"sql": self.agent}, db=self.db, sweep_every=None)
        self.app.include_router(slack.router)  # what server/app.py does
        self.service = self.app.state.service
        self.slack = lookalike
        self.channel = SlackChannel(TOKEN, base_url=lookalike.api_url)
        self.receipts = Receipts()
        self.headers = {name: self.token(name, "dba") for name in ("alice", "bob", "dave")}
        self.token("carol", "support")
        self.token("gone", "dba")
        self.service.tokens.revoke("gone")
        for user, identity in USERS.items():
            SlackUsers(self.db).add(user, identity)
        SlackSettings.save(
            self.db, bot_token=TOKEN, signing_secret=SECRET, api_url=lookalike.api_url, team_id=TEAM
        )
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://handrail.test"
        )

    def token(self, name: str, *roles: str) -> dict[str, str]:
        _, token = self.service.tokens.create(name, list(roles), ["run", "review"])
        return {"Authorization": f"Bearer {token}"}

    async def ask(self, text: str) -> tuple[str, str]:
        """Alice starts a run that pauses on a review: its thread and interrupt."""
        alice = self.headers["alice"]
        thread = (await self.http.post("/threads", json={}, headers=alice)).json()["thread_id"]
        reply = await self.http.post(
            f"/threads/{thread}/runs/wait",
            json={"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": text}]}},
            headers=alice,
        )
        assert reply.status_code == 200, reply.text
        return thread, reply.json()["__interrupt__"][0]["id"]

    async def deliver(self, event: str, interrupt: str, endpoint: Endpoint = ENDPOINT) -> Any:
        """Send the feed's ``event`` about ``interrupt`` as the deliverer would; keep its receipt."""
        store = self.agent.checkpointer
        found, after = None, None
        while True:
            entries = await store.aread_feed(after)
            if not entries:
                break
            for entry in entries:
                made = event_of(entry, PUBLIC)
                if made is not None and made.type == event and made.interrupt_id == interrupt:
                    found = made
            after = entries[-1].cursor
        assert found is not None, f"no {event} about {interrupt} in the feed"
        delivery = Delivery(
            f"msg_{event}_{interrupt}", endpoint.id, event, found.thread_id, interrupt, found.body
        )
        sent = await self.channel.send(endpoint, delivery, self.receipts)
        if sent.ok and sent.receipt is not None:
            self.receipts.kept[(endpoint.id, interrupt, event)] = sent.receipt
        return sent

    async def posted(self, text: str) -> tuple[str, str, str]:
        """Ask, and post the review to Slack: the thread, the interrupt and the message's ts."""
        thread, interrupt = await self.ask(text)
        sent = await self.deliver("review.requested", interrupt)
        assert sent.ok, sent.error
        return thread, interrupt, sent.receipt["ts"]

    async def act(
        self, payload: dict[str, Any], *, secret: str = SECRET, at: float | None = None
    ) -> httpx.Response:
        body, headers = signed(payload, secret, at=at)
        reply = await self.http.post("/handrail/slack/actions", content=body, headers=headers)
        await slack_replies.settle()
        return reply

    async def click(self, ts: str, decision: str, user: str) -> httpx.Response:
        return await self.act(self.slack.click(CHANNEL, ts, f"handrail.{decision}", user))

    async def run(self, thread: str) -> None:
        """What the worker does with an answered thread."""
        await self.service.worker.run_thread(thread)

    def blocks(self, ts: str) -> list[dict[str, Any]]:
        return self.slack.message(CHANNEL, ts)["blocks"]

    async def answers(self, thread: str) -> list[dict[str, Any]]:
        trail = await self.agent.aget_audit_trail({"configurable": {"thread_id": thread}})
        return [
            {"event": e.event, "reviewer": e.reviewer, "channel": e.channel}
            for e in trail
            if e.event in ("answered", "approval")
        ]

    def told(self) -> list[str]:
        """What the clickers were told on their own (response_url posts and ephemeral messages)."""
        ephemeral = [c["text"] for c in self.slack.called("chat.postEphemeral")]
        return [r["text"] for r in self.slack.responses if r.get("response_type") == "ephemeral"] + ephemeral


@pytest.fixture
def lookalike() -> Iterator[SlackLookalike]:
    with SlackLookalike() as found:
        yield found


@pytest.fixture
async def world(backend: Backend, lookalike: SlackLookalike) -> AsyncIterator[World]:
    RAN.clear()
    found = World(backend, lookalike)
    yield found
    await found.http.aclose()


# A review in Slack ----------------------------------------------------------------------------------
async def test_a_review_posts_its_call_with_a_button_per_decision(world: World) -> None:
    thread, interrupt, ts = await world.posted("SELECT '<b>&x</b>' FROM t -- <!channel> <@U0BOB>")
    blocks = world.blocks(ts)
    shown = text_of(blocks)
    assert "*execute_sql*" in shown and "Agent *sql*" in shown
    assert "&lt;b&gt;&amp;x&lt;/b&gt;" in shown and "&lt;!channel&gt; &lt;@U0BOB&gt;" in shown
    assert "<!channel>" not in shown and "<@U0BOB>" not in shown
    assert "Who may decide: role dba" in shown and "Expires " in shown
    assert buttons_of(blocks) == ["handrail.approve", "handrail.reject", "handrail.respond", "handrail.open"]
    (decide,) = [b for b in blocks if b.get("block_id") == "handrail.decide"]
    values = {orjson.loads(e["value"])["i"] for e in decide["elements"]}
    assert values == {interrupt}
    assert orjson.loads(decide["elements"][0]["value"])["t"] == thread
    (link,) = [e for b in blocks for e in b.get("elements") or () if e.get("action_id") == "handrail.open"]
    assert link["url"] == f"{PUBLIC}/inbox/reviews/{thread}/{interrupt}"
    (posted,) = world.slack.called("chat.postMessage")
    assert posted["channel"] == CHANNEL and posted["unfurl_links"] is False


async def test_a_click_approves_once_and_the_message_becomes_the_stamp(world: World) -> None:
    thread, _, ts = await world.posted("DELETE FROM logs")
    started = time.monotonic()
    reply = await world.click(ts, "approve", "U0BOB")
    assert reply.status_code == 200 and time.monotonic() - started < 3
    assert RAN == []  # recorded, not run: the worker runs it
    await world.run(thread)
    assert RAN == ["DELETE FROM logs"]
    assert await world.answers(thread) == [
        {"event": "answered", "reviewer": {"id": "bob", "roles": ["dba"]}, "channel": "slack"}
    ]
    blocks = world.blocks(ts)
    assert "Approved by *bob* in Slack at " in text_of(blocks)
    assert buttons_of(blocks) == ["handrail.open"]  # the decision buttons are gone
    assert "DELETE FROM logs" in text_of(blocks)  # what was approved stays in view
    # a second click (a stale message elsewhere) records nothing and runs nothing again
    world.slack.messages[(CHANNEL, ts)]["blocks"] = world.slack.called("chat.postMessage")[0]["blocks"]
    again = await world.click(ts, "approve", "U0DAVE")
    assert again.status_code == 200
    await world.run(thread)
    assert RAN == ["DELETE FROM logs"]
    assert len(await world.answers(thread)) == 1
    assert any(t.startswith("Not recorded:") for t in world.told())


async def test_reject_with_a_reason_through_the_modal(world: World) -> None:
    thread, _, ts = await world.posted("DROP TABLE users")
    assert (await world.click(ts, "reject", "U0BOB")).status_code == 200
    (opened,) = world.slack.called("views.open")
    view = opened["view"]
    assert opened["trigger_id"].startswith("1111.2222.") and view["callback_id"] == "handrail.decide"
    assert RAN == [] and await world.answers(thread) == []  # opening the modal records nothing
    reply = await world.act(world.slack.submit(view, "U0BOB", "too risky <b>today</b>"))
    assert reply.status_code == 200 and reply.content == b""  # an empty answer closes the modal
    await world.run(thread)
    assert RAN == []
    assert [a["channel"] for a in await world.answers(thread)] == ["slack"]
    shown = text_of(world.blocks(ts))
    assert "Rejected by *bob* in Slack at " in shown and ": too risky &lt;b&gt;today&lt;/b&gt;" in shown
    assert "DROP TABLE users" in shown and "handrail.reject" not in buttons_of(world.blocks(ts))


async def test_respond_through_the_modal_gives_the_result(world: World) -> None:
    thread, _, ts = await world.posted("SELECT count(*) FROM users")
    await world.click(ts, "respond", "U0DAVE")
    (opened,) = world.slack.called("views.open")
    await world.act(world.slack.submit(opened["view"], "U0DAVE", "42"))
    await world.run(thread)
    assert RAN == []
    state = await world.agent.aget_state({"configurable": {"thread_id": thread}})
    assert any(getattr(m, "text", None) == "42" for m in state.values["messages"])
    assert "Answered by *dave* in Slack" in text_of(world.blocks(ts))


async def test_a_review_counting_approvals_shows_k_of_n(world: World) -> None:
    thread, _, ts = await world.posted("vote TRUNCATE audit")
    await world.click(ts, "approve", "U0BOB")
    blocks = world.blocks(ts)
    assert "1 of 2 approvals (bob)" in text_of(blocks)
    assert "handrail.approve" in buttons_of(blocks)  # still open for the second approval
    await world.run(thread)
    assert RAN == []
    await world.click(ts, "approve", "U0DAVE")
    await world.run(thread)
    assert RAN == ["TRUNCATE audit"]
    shown = text_of(world.blocks(ts))
    assert "Approved by *dave* in Slack" in shown and "1 of 2 approvals (bob)" in shown
    assert "handrail.approve" not in buttons_of(world.blocks(ts))


# Refusals ---------------------------------------------------------------------------------------------
async def test_forged_and_stale_signatures_are_refused_and_record_nothing(world: World) -> None:
    thread, _, ts = await world.posted("DELETE FROM sessions")
    click = world.slack.click(CHANNEL, ts, "handrail.approve", "U0BOB")
    forged = await world.act(click, secret="0" * 32)
    stale = await world.act(click, at=time.time() - 6 * 60)
    future = await world.act(click, at=time.time() + 6 * 60)
    body, _ = signed(click)
    unsigned = await world.http.post(
        "/handrail/slack/actions", content=body, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    for reply in (forged, stale, future, unsigned):
        assert reply.status_code == 401, reply.text
        assert reply.headers["content-type"] == "application/problem+json"
        assert "nothing was recorded" in reply.json()["detail"]
    await world.run(thread)
    assert RAN == [] and await world.answers(thread) == []
    assert world.slack.called("chat.update") == [] and world.told() == []


async def test_unmapped_users_and_users_without_the_role_are_refused_in_the_thread(world: World) -> None:
    thread, _, ts = await world.posted("UPDATE users SET admin = true")
    for user in ("U0NOBODY", "U0CAROL", "U0GONE"):
        assert (await world.click(ts, "approve", user)).status_code == 200
    await world.click(ts, "reject", "U0NOBODY")  # no modal for an unmapped user either
    unmapped, role, revoked, unmapped_again = world.told()
    assert "U0NOBODY" in unmapped and "not linked to a handrail identity" in unmapped
    assert role.startswith("Not recorded:") and "dba" in role
    assert "gone has no live handrail token" in revoked and unmapped_again == unmapped
    assert all(r["replace_original"] is False for r in world.slack.responses)
    await world.run(thread)
    assert RAN == [] and await world.answers(thread) == []
    assert world.slack.called("chat.update") == [] and world.slack.called("views.open") == []


async def test_the_starter_may_not_approve_from_slack_but_may_reject(world: World) -> None:
    thread, _, ts = await world.posted("GRANT ALL ON db TO alice")
    await world.click(ts, "approve", "U0ALICE")
    (told,) = world.told()
    assert "started this run" in told
    assert await world.answers(thread) == [] and world.slack.called("chat.update") == []
    await world.click(ts, "reject", "U0ALICE")
    (opened,) = world.slack.called("views.open")
    assert (await world.act(world.slack.submit(opened["view"], "U0ALICE", None))).status_code == 200
    await world.run(thread)
    assert RAN == [] and [a["reviewer"]["id"] for a in await world.answers(thread)] == ["alice"]
    assert "Rejected by *alice*" in text_of(world.blocks(ts))


async def test_an_expired_review_cannot_be_answered_from_slack(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread, _, ts = await world.posted("VACUUM FULL")
    monkeypatch.setattr(answering, "CLOCK", lambda: time.time() + 3601)
    await world.click(ts, "approve", "U0BOB")
    (told,) = world.told()
    assert told.startswith("Not recorded:") and "expired" in told
    await world.run(thread)
    assert RAN == [] and await world.answers(thread) == []
    assert "Expired unanswered" in text_of(world.blocks(ts))
    assert "handrail.approve" not in buttons_of(world.blocks(ts))


async def test_a_refusal_in_the_modal_is_shown_in_the_modal(world: World) -> None:
    thread, _, ts = await world.posted("DELETE FROM orders")
    await world.click(ts, "reject", "U0BOB")
    (opened,) = world.slack.called("views.open")
    reply = await world.act(world.slack.submit(opened["view"], "U0CAROL", "no"))
    assert reply.status_code == 200
    assert reply.json()["response_action"] == "errors"
    assert "dba" in reply.json()["errors"]["handrail.message"]
    assert await world.answers(thread) == []


async def test_a_click_from_another_workspace_or_without_setup_is_refused(world: World) -> None:
    _, _, ts = await world.posted("SELECT 1")
    other = await world.act(world.slack.click(CHANNEL, ts, "handrail.approve", "U0BOB", team="T0OTHER"))
    assert other.status_code == 403 and world.told() == []
    SlackSettings.save(world.db, signing_secret=None)
    missing = await world.act(world.slack.click(CHANNEL, ts, "handrail.approve", "U0BOB"))
    assert missing.status_code == 404 and "not set up" in missing.json()["detail"]


async def test_a_slow_slack_api_does_not_hold_the_answer(world: World) -> None:
    thread, _, ts = await world.posted("ANALYZE")
    world.slack.delay["chat.update"] = 4.0
    body, headers = signed(world.slack.click(CHANNEL, ts, "handrail.approve", "U0BOB"))
    started = time.monotonic()
    reply = await world.http.post("/handrail/slack/actions", content=body, headers=headers)
    assert reply.status_code == 200 and time.monotonic() - started < 3.0  # Slack waits 3 s at most
    assert len(await world.answers(thread)) == 1
    await slack_replies.settle()
    assert "Approved by *bob*" in text_of(world.blocks(ts))


# The deliverer's side: a decision made elsewhere ---------------------------------------------------
async def test_a_decision_on_the_web_updates_the_slack_message(world: World) -> None:
    from handrail.notify.deliverer import Deliverer
    from handrail.notify.outbox import Outbox

    thread, interrupt = await world.ask("REINDEX users")
    outbox = Outbox(world.db)
    endpoint = outbox.add_endpoint("slack", CHANNEL, ["review.requested", "review.decided"], start_after=None)
    deliverer = Deliverer(
        outbox, world.agent.checkpointer, public_url=PUBLIC, channels={"slack": world.channel}
    )

    async def deliver_all() -> None:
        await deliverer.run_once()
        await deliverer.drain()

    await deliver_all()
    receipt = outbox.receipt(endpoint.id, interrupt, "review.requested")
    assert receipt is not None and receipt["channel"] == CHANNEL
    answered = await world.http.post(
        f"/handrail/threads/{thread}/interrupts/{interrupt}/answer",
        json={"answer": {"decisions": [{"type": "approve"}]}},
        headers=world.headers["bob"],
    )
    assert answered.status_code == 202, answered.text
    await deliver_all()
    (update,) = world.slack.called("chat.update")
    assert update["ts"] == receipt["ts"]
    blocks = world.blocks(receipt["ts"])
    assert "Approved by *bob* through the API" in text_of(blocks) and buttons_of(blocks) == ["handrail.open"]
    assert len(world.slack.called("chat.postMessage")) == 1


async def test_stamps_without_a_posted_message_and_run_events(lookalike: SlackLookalike) -> None:
    channel, receipts = SlackChannel(TOKEN, base_url=lookalike.api_url), Receipts()
    data = {
        "thread_id": "t-1",
        "interrupt_id": "i-1",
        "agent": "ops",
        "tools": ["deploy"],
        "action_requests": [{"name": "deploy", "args": {"to": "prod"}, "description": "Ship it"}],
        "allowed_decisions": {"deploy": ["approve", "reject"]},
        "decided_by": {"id": "rita", "channel": "web"},
        "decision": {"decisions": [{"type": "reject", "message": "not on a Friday"}]},
        "links": {"review": f"{PUBLIC}/inbox/reviews/t-1/i-1"},
    }

    def delivery(event: str, body: dict[str, Any]) -> Delivery:
        payload = {"type": event, "timestamp": "2026-12-04T10:42:00.000Z", "data": body}
        return Delivery(
            f"msg_{event}", ENDPOINT.id, event, "t-1", body.get("interrupt_id"), orjson.dumps(payload)
        )

    decided = await channel.send(ENDPOINT, delivery("review.decided", data), receipts)
    assert decided.ok and decided.receipt is not None
    shown = text_of(lookalike.message(CHANNEL, decided.receipt["ts"])["blocks"])
    assert "Rejected by *rita* in the web inbox at 10:42 UTC: not on a Friday" in shown
    receipts.kept[(ENDPOINT.id, "i-1", "review.decided")] = decided.receipt
    late = await channel.send(ENDPOINT, delivery("review.requested", data), receipts)
    assert late.ok and "handrail.approve" not in buttons_of(
        lookalike.message(CHANNEL, late.receipt["ts"])["blocks"]
    )
    vote = await channel.send(ENDPOINT, delivery("review.approved", data), receipts)
    assert vote.ok and len(lookalike.called("chat.postMessage")) == 2  # decided already: no vote stamp
    expired = await channel.send(ENDPOINT, delivery("review.expired", {**data, "decision": None}), receipts)
    assert "Expired unanswered at 10:42 UTC" in text_of(
        lookalike.message(CHANNEL, expired.receipt["ts"])["blocks"]
    )
    # a vote on another review: a reply under its message, or the message itself with counts
    posted = {"channel": CHANNEL, "ts": late.receipt["ts"]}
    receipts.kept[(ENDPOINT.id, "i-2", "review.requested")] = posted
    vote = {"thread_id": "t-1", "interrupt_id": "i-2", "decided_by": {"id": "rita", "channel": "slack"}}
    assert (await channel.send(ENDPOINT, delivery("review.approved", vote), receipts)).ok
    (reply,) = [m for m in lookalike.messages.values() if m["thread_ts"] == posted["ts"]]
    assert reply["text"] == ":ballot_box_with_check: Approved by *rita* in Slack; more approvals are needed"
    counted = {**data, **vote, "approvals": [{"approvals": 1, "needed": 2, "approved_by": ["rita"]}]}
    assert (await channel.send(ENDPOINT, delivery("review.approved", counted), receipts)).ok
    blocks = lookalike.message(CHANNEL, posted["ts"])["blocks"]
    assert "1 of 2 approvals (rita)" in text_of(blocks) and "handrail.approve" in buttons_of(blocks)
    run = {
        "thread_id": "t-1",
        "agent": "ops",
        "status": "error",
        "links": {"thread": f"{PUBLIC}/inbox/threads/t-1"},
    }
    failed = await channel.send(ENDPOINT, delivery("run.failed", run), receipts)
    assert "stopped with an error" in lookalike.message(CHANNEL, failed.receipt["ts"])["text"]


async def test_hostile_and_huge_arguments_are_shown_safely_and_folded(lookalike: SlackLookalike) -> None:
    huge = "A" * 1_000_000
    args = {
        "payload": huge,
        "html": "<script>alert(1)</script><a href='https://evil.test'>x</a>",
        "mention": "<!channel> <!here> <@U0BOB> <https://evil.test|click me>",
        "control": "red\x1b[31m text \u202egnp.exe \x00 end",
        "fence": "``` closed? ``` *bold* _it_",
        "many": [f"item {n} " + "b" * 500 for n in range(40)],
    }
    data = {
        "thread_id": "t-1",
        "interrupt_id": "i-1",
        "agent": "ops<&>",
        "action_requests": [
            {"name": f"tool{n}<x>", "args": args, "description": "```\n<!here>"} for n in range(12)
        ],
        "allowed_decisions": {f"tool{n}<x>": ["approve", "reject"] for n in range(12)},
        "links": {"review": f"{PUBLIC}/inbox/reviews/t-1/i-1"},
    }
    body = orjson.dumps({"type": "review.requested", "timestamp": "2026-12-04T10:42:00.000Z", "data": data})
    delivery = Delivery("msg_1", ENDPOINT.id, "review.requested", "t-1", "i-1", body)
    channel = SlackChannel(TOKEN, base_url=lookalike.api_url)
    sent = await channel.send(ENDPOINT, delivery, Receipts())
    assert sent.ok, sent.error  # the lookalike refuses what Slack would (3000 characters a section ...)
    (posted,) = lookalike.called("chat.postMessage")
    blocks = posted["blocks"]
    shown = text_of(blocks)
    assert "<" not in shown.replace("&lt;", "") and ">" not in shown.replace("&gt;", "")
    assert "&lt;!channel&gt;" in shown and "&lt;script&gt;" in shown and "ops&lt;&amp;&gt;" in shown
    assert "\\u001b[31m" in shown and "\\u202e" in shown and "\x1b" not in shown and "\u202e" not in shown
    assert "folded: 1,000,000 characters in all" in shown and "cut to fit Slack" in shown
    assert "and 2 more call(s)" in shown
    for block in blocks:
        text = (block.get("text") or {}).get("text", "")
        assert len(text) <= 3000
        assert text.count("```") in (0, 2)  # the argument's backticks never close the code block
    assert len(body) > 12_000_000 and len(orjson.dumps(blocks)) < 60_000


async def test_slack_errors_are_told_as_sent_results(lookalike: SlackLookalike) -> None:
    data = {"thread_id": "t", "interrupt_id": "i", "action_requests": [{"name": "x", "args": {}}]}
    body = orjson.dumps({"type": "review.requested", "timestamp": "2026-12-04T10:42:00.000Z", "data": data})
    delivery = Delivery("msg_1", ENDPOINT.id, "review.requested", "t", "i", body)
    channel = SlackChannel(TOKEN, base_url=lookalike.api_url)
    missing = await channel.send(Endpoint("e", "slack", "C0MISSING", ()), delivery, Receipts())
    assert not missing.ok and missing.retry is False and "channel_not_found" in (missing.error or "")
    bad = await SlackChannel("xoxb-wrong", base_url=lookalike.api_url).send(ENDPOINT, delivery, Receipts())
    assert not bad.ok and bad.retry is False and "invalid_auth" in (bad.error or "")
    lookalike.fail("chat.postMessage", 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "1"})
    started = time.monotonic()
    waited = await channel.send(ENDPOINT, delivery, Receipts())
    assert waited.ok and time.monotonic() - started >= 1
    lookalike.fail("chat.postMessage", 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "600"})
    limited = await channel.send(ENDPOINT, delivery, Receipts())
    assert not limited.ok and limited.retry and limited.code == 429 and "600" in (limited.error or "")
    lookalike.fail("chat.postMessage", 500, {"ok": False, "error": "fatal_error"})
    broken = await channel.send(ENDPOINT, delivery, Receipts())
    assert not broken.ok and broken.retry and broken.code == 500
    down = await SlackChannel(TOKEN, base_url="http://127.0.0.1:9/api/").send(ENDPOINT, delivery, Receipts())
    assert not down.ok and down.retry and down.code is None and "could not reach Slack" in (down.error or "")


# The CLI and the mapping table ---------------------------------------------------------------------
def _cli(args: list[str], stdin: str = "") -> tuple[int, str]:
    import argparse
    import io
    import sys

    from rich.console import Console

    from handrail.cli import _slack

    parser = argparse.ArgumentParser(prog="handrail")
    _slack.add_commands(parser.add_subparsers(dest="command"))
    out = io.StringIO()

    class Failed(Exception):
        pass

    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        return _slack.run(parser.parse_args(args), Console(file=out, width=100), Failed), out.getvalue()
    except Failed as exc:
        return 1, str(exc)
    finally:
        sys.stdin = saved


async def test_slack_setup_checks_the_token_and_keeps_the_settings(
    backend: Backend, lookalike: SlackLookalike, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HANDRAIL_SLACK_BOT_TOKEN", "HANDRAIL_SLACK_SIGNING_SECRET", "HANDRAIL_SLACK_API_URL"):
        monkeypatch.delenv(name, raising=False)
    where = backend.store_flags()
    base = ["slack", "setup", "--api-url", lookalike.api_url, "--public-url", "https://hr.example/", *where]
    code, said = await asyncio.to_thread(
        _cli, [*base, "--bot-token", "xoxb-wrong", "--signing-secret", SECRET]
    )
    assert code == 1 and "invalid_auth" in said
    code, said = await asyncio.to_thread(
        _cli, [*base, "--bot-token", "-", "--signing-secret", SECRET], TOKEN + "\n"
    )
    assert code == 0, said
    assert "https://hr.example/handrail/slack/actions" in said and TEAM in said and TOKEN not in said
    db = backend.server_db()
    settings = SlackSettings.load(db)
    assert (settings.bot_token, settings.signing_secret, settings.team_id) == (TOKEN, SECRET, TEAM)
    monkeypatch.setenv("HANDRAIL_SLACK_BOT_TOKEN", "xoxb-from-env")
    assert SlackSettings.load(db).bot_token == "xoxb-from-env"
    code, said = await asyncio.to_thread(_cli, ["slack", "users", "add", "alice", "U0ALICE", *where])
    assert code == 1 and "not a Slack user id" in said
    code, said = await asyncio.to_thread(_cli, ["slack", "users", "add", "U0ALICE", "alice", *where])
    assert code == 0 and "no live token with the review scope" in said
    code, said = await asyncio.to_thread(_cli, ["slack", "users", "list", *where])
    assert "U0ALICE" in said and "alice" in said and "refused" in said
    code, said = await asyncio.to_thread(_cli, ["slack", "users", "remove", "U0ALICE", *where])
    assert code == 0 and SlackUsers(db).lookup("U0ALICE") is None
    code, said = await asyncio.to_thread(_cli, ["slack", "users", "remove", "U0ALICE", *where])
    assert code == 1 and "not linked" in said


def test_the_policy_files_users_are_kept_in_step(tmp_path: Path) -> None:
    from handrail.server.db import ServerDB

    db = ServerDB.open(db_path=tmp_path / "users.db")
    users = SlackUsers(db)
    users.add("U0CLI", "carol")
    users.keep_file({"U0ALICE": "alice", "U0BOB": "bob"})
    users.keep_file({"U0ALICE": "alice2", "U0CLI": "dave"})
    assert {(u.slack_user, u.identity, u.source) for u in users.all()} == {
        ("U0ALICE", "alice2", "file"),
        ("U0CLI", "dave", "file"),
    }
    users.keep_file({})
    assert users.all() == []
    with pytest.raises(ValueError, match="not a handrail identity"):
        users.add("U0X1", "bad name")
    db.close()
