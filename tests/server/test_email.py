"""Email notifications (SPEC §5.4, rule 17) through a real SMTP server on 127.0.0.1.

Each test starts an ``aiosmtpd`` server in its own event loop and mails through it with
``EmailChannel``: recipients follow the review's roles and the tokens that are live; the
mail links to the review page, whose GET decides nothing; nothing in a tool name, an
argument or a thread id reaches a header; long arguments are folded; a 4xx is retried
and a 5xx is not; a redelivery keeps its Message-ID.
"""

from __future__ import annotations

import asyncio
import email
import re
import socket
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import served_agent
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from conftest import Service
from handrail.notify._email import EmailChannel
from handrail.notify._mail import ARGS_LIMIT
from handrail.notify.channels import Delivery, Endpoint, Sent
from handrail.notify.events import TEST_EVENT, event_of
from handrail.server import ServerDB
from handrail.server.tokens import TokenStore

PUBLIC = "http://handrail.test"
BASE_HEADERS = {"subject", "from", "to", "date", "message-id", "auto-submitted", "x-handrail-event"}
BASE_HEADERS |= {"mime-version", "content-type"}


# A local SMTP server ---------------------------------------------------------------------------
class Inbox:
    """An aiosmtpd handler that keeps every message it is given. ``rcpt`` and ``data`` are
    answers to give instead of accepting, in turn (then it accepts); ``refuse`` answers RCPT
    for these addresses, every time."""

    def __init__(self, *, rcpt: list[str] | None = None, data: list[str] | None = None) -> None:
        self.rcpt = list(rcpt or [])
        self.data = list(data or [])
        self.refuse: dict[str, str] = {}
        self.accepted: list[Envelope] = []
        self.attempts: list[EmailMessage] = []  # every message offered, accepted or not
        self.logins: list[tuple[bytes, bytes]] = []

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if address in self.refuse:
            return self.refuse[address]
        if self.rcpt:
            return self.rcpt.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes)
        self.attempts.append(parse(envelope.content))
        if self.data:
            return self.data.pop(0)
        self.accepted.append(envelope)
        return "250 OK"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        self.logins.append((data.login, data.password))
        return AuthResult(success=data.password == b"s3cret", handled=False)

    @property
    def messages(self) -> list[EmailMessage]:
        return [parse(e.content) for e in self.accepted if isinstance(e.content, bytes)]


def parse(raw: bytes) -> EmailMessage:
    found = email.message_from_bytes(raw, policy=default_policy)
    assert isinstance(found, EmailMessage)
    return found


@asynccontextmanager
async def smtp_server(inbox: Inbox, **settings: Any) -> AsyncIterator[int]:
    """aiosmtpd on 127.0.0.1 (a free port) in this test's loop; yields the port."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(inbox, hostname="mail.test", loop=loop, **settings), "127.0.0.1", 0
    )
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


class Receipts:
    """The outbox's receipts, as the tests keep them."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str, str], Mapping[str, Any]] = {}

    def receipt(self, endpoint_id: str, interrupt_id: str, event: str) -> Mapping[str, Any] | None:
        return self.kept.get((endpoint_id, interrupt_id, event))

    def keep(self, delivery: Delivery, sent: Sent) -> None:
        assert sent.receipt is not None and delivery.interrupt_id is not None
        self.kept[(delivery.endpoint_id, delivery.interrupt_id, delivery.event)] = sent.receipt


def endpoint(port: int, addresses: Mapping[str, str], **options: Any) -> Endpoint:
    settings = {"host": "127.0.0.1", "port": port, "from": "handrail@example.com", "timeout": 5.0}
    settings.update(options, addresses=dict(addresses))
    return Endpoint("file:email", "email", "", ("review.requested",), (), settings, "file")


def delivery(event: str, data: Mapping[str, Any], delivery_id: str | None = None) -> Delivery:
    """A delivery made by hand, with the payload's shape (``handrail.notify.events``)."""
    body = orjson.dumps({"type": event, "timestamp": "2026-01-01T00:00:00.000Z", "data": data})
    interrupt = data.get("interrupt_id") if event.startswith("review.") else None
    return Delivery(
        delivery_id or f"msg_{uuid.uuid4().hex}",
        "file:email",
        event,
        str(data.get("thread_id", "")),
        interrupt,
        body,
        created_at=1767225600.0,
    )


def review(thread: str = "T1", interrupt: str = "I1", **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "thread_id": thread,
        "interrupt_id": interrupt,
        "agent": "support",
        "tools": ["refund"],
        "action_requests": [{"name": "refund", "args": {"payment": "p1", "cents": 500}, "description": "d"}],
        "allowed_decisions": {"refund": ["approve", "reject"]},
        "reviewers": {"refund": ["support"]},
        "links": {
            "review": f"{PUBLIC}/inbox/reviews/{thread}/{interrupt}",
            "api": f"{PUBLIC}/handrail/threads/{thread}/interrupts/{interrupt}/answer",
            "thread": f"{PUBLIC}/inbox/threads/{thread}",
        },
    }
    data.update(extra)
    return data


def text_of(message: EmailMessage) -> str:
    part = message.get_body(("plain",))
    assert part is not None
    return str(part.get_content())


def html_of(message: EmailMessage) -> str:
    part = message.get_body(("html",))
    assert part is not None
    return str(part.get_content())


@pytest.fixture
def db(tmp_path: Path) -> Iterator[ServerDB]:
    found = ServerDB.open(db_path=tmp_path / "h.db")
    yield found
    found.close()


ADDRESSES = {
    "dana": "dana@example.com",
    "dora": "dora@example.com",
    "olga": "olga@example.com",
    "erin": "erin@example.com",
    "sam": "support-team@example.com",
    "sue": "support-team@example.com",
    "ghost": "ghost@example.com",  # no token at all
}


# Recipients ----------------------------------------------------------------------------------
async def test_recipients_are_the_identities_whose_live_tokens_may_decide(db: ServerDB) -> None:
    tokens = TokenStore(db)
    tokens.create("dana", ["support"])
    tokens.create("dora", ["support"], ["run"])  # may not review at all
    tokens.create("olga", ["ops"])
    tokens.create("erin", ["support", "ops"])
    tokens.create("sam", ["support"])
    tokens.create("sue", ["support"])  # the same address as sam: mailed once
    channel, inbox = EmailChannel(db), Inbox()
    async with smtp_server(inbox) as port:
        target = endpoint(port, ADDRESSES)
        sent = await channel.send(target, delivery("review.requested", review()), Receipts())
        assert sent.ok, sent
        expected = ["dana@example.com", "erin@example.com", "support-team@example.com"]
        assert sent.receipt is not None and sent.receipt["recipients"] == expected
        assert inbox.accepted[-1].rcpt_tos == expected
        assert inbox.messages[-1]["To"] == ", ".join(expected)

        tokens.revoke("erin")  # a revoked token is nobody's
        sent = await channel.send(target, delivery("review.requested", review()), Receipts())
        assert sent.ok and inbox.accepted[-1].rcpt_tos == ["dana@example.com", "support-team@example.com"]

        tokens.create("erin", ["support", "ops"])  # two tools: one token must hold a role of each
        both = review(reviewers={"refund": ["support"], "close": ["ops"]}, tools=["refund", "close"])
        sent = await channel.send(target, delivery("review.requested", both), Receipts())
        assert sent.ok and inbox.accepted[-1].rcpt_tos == ["erin@example.com"]

        anyone = review(reviewers={})  # no roles: every identity with a live review token
        sent = await channel.send(target, delivery("review.requested", anyone), Receipts())
        everyone = ["dana@example.com", "erin@example.com", "olga@example.com", "support-team@example.com"]
        assert inbox.accepted[-1].rcpt_tos == everyone

        nobody = review(reviewers={"refund": ["legal"]})
        before = len(inbox.attempts)
        sent = await channel.send(target, delivery("review.requested", nobody), Receipts())
        assert (sent.ok, sent.retry) == (False, False)
        assert sent.error is not None and "no reviewer of roles ['legal'] has an address" in sent.error
        assert len(inbox.attempts) == before  # nothing was sent


async def test_run_events_and_the_test_mail_go_to_everyone_with_an_address(db: ServerDB) -> None:
    tokens = TokenStore(db)
    tokens.create("dana", ["support"])
    tokens.create("olga", ["ops"], ["run"])
    tokens.create("erin", ["support"])
    tokens.revoke("erin")
    channel, inbox = EmailChannel(db), Inbox()
    async with smtp_server(inbox) as port:
        target = endpoint(port, ADDRESSES)
        failed: dict[str, Any] = {"thread_id": "T9", "agent": "support", "run_id": "R1", "status": "error"}
        failed["links"] = {"thread": f"{PUBLIC}/inbox/threads/T9", "api": f"{PUBLIC}/threads/T9/state"}
        sent = await channel.send(target, delivery("run.failed", failed), Receipts())
        assert sent.ok, sent
        assert inbox.accepted[-1].rcpt_tos == ["dana@example.com", "olga@example.com"]
        mail = inbox.messages[-1]
        assert mail["Subject"] == "[handrail] Run failed on thread T9 (support)"
        assert f"Open the thread: {PUBLIC}/inbox/threads/T9" in text_of(mail)

        sent = await channel.send(target, delivery(TEST_EVENT, {"message": "hi"}), Receipts())
        assert sent.ok and inbox.accepted[-1].rcpt_tos == sorted(set(ADDRESSES.values()))
        assert inbox.messages[-1]["Subject"] == "[handrail] Test mail"

        sent = await channel.send(target, delivery("review.unheard_of", review()), Receipts())
        assert (sent.ok, sent.retry) == (False, False)


# From a real review, and the link ------------------------------------------------------------
async def ask(client: httpx.AsyncClient, headers: dict[str, str], query: str) -> tuple[str, str]:
    thread = (await client.post("/threads", json={}, headers=headers)).json()["thread_id"]
    reply = await client.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": query}]}},
        headers=headers,
    )
    assert reply.status_code == 200, reply.text
    return thread, reply.json()["__interrupt__"][0]["id"]


async def signed_in(service: Service, name: str, *roles: str) -> httpx.AsyncClient:
    _, token = service.tokens.create(name, list(roles), ["review"])
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=service.app), base_url=PUBLIC)
    page = await client.get("/inbox/signin")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    reply = await client.post("/inbox/signin", data={"csrf": found.group(1), "token": token})
    assert reply.status_code == 303, reply.text
    return client


async def feed_delivery(service: Service, event: str) -> Delivery:
    """The delivery of the last ``event`` in the store's feed, as the deliverer would make it."""
    entries = await service.agent.checkpointer.aread_feed(None)
    events = [e for e in (event_of(entry, PUBLIC) for entry in entries) if e is not None and e.type == event]
    assert events, [entry.kind for entry in entries]
    found = events[-1]
    made = f"msg_{uuid.uuid4().hex}"
    return Delivery(made, "file:email", found.type, found.thread_id, found.interrupt_id, found.body)


async def test_a_paused_review_mails_its_reviewers_a_link_whose_get_decides_nothing(
    service: Service, client: httpx.AsyncClient
) -> None:
    app = service.token("app", scopes=("run",))
    reviewer = await signed_in(service, "dana", "dba")
    service.tokens.create("olga", ["ops"], ["review"])
    thread, interrupt = await ask(client, app, "VACUUM")
    channel, inbox, receipts = EmailChannel(service.db), Inbox(), Receipts()
    addresses = {"dana": "dana@example.com", "olga": "olga@example.com", "app": "app@example.com"}
    async with smtp_server(inbox) as port:
        target = endpoint(port, addresses)
        asked = await feed_delivery(service, "review.requested")
        sent = await channel.send(target, asked, receipts)
        assert sent.ok, sent
        receipts.keep(asked, sent)
        assert inbox.accepted[-1].rcpt_tos == ["dana@example.com"]  # execute_sql is the dba's
        mail = inbox.messages[-1]
        assert mail["Subject"] == f"[handrail] Review requested: execute_sql on thread {thread}"
        link = f"{PUBLIC}/inbox/reviews/{thread}/{interrupt}"
        text, page = text_of(mail), html_of(mail)
        assert f"Open the review: {link}" in text and f'<a href="{link}">' in page
        assert '"query": "VACUUM"' in text and "Who may decide execute_sql: role dba" in text
        assert "Opening the link decides nothing" in text

        # what a link preview, a scanner or the reviewer's click does: GET the page
        for visitor, status in ((reviewer, 200), (client, 303)):  # signed in, and not (sent to sign in)
            shown = await visitor.get(link.removeprefix(PUBLIC))
            assert shown.status_code == status, shown.text[:500]
            await visitor.head(link.removeprefix(PUBLIC))
        trail = await service.agent.aget_audit_trail({"configurable": {"thread_id": thread}})
        assert [e for e in trail if e.event == "answered"] == [] and served_agent.RAN == []
        assert "VACUUM" in (await reviewer.get(link.removeprefix(PUBLIC))).text  # the page shows it

        dana = service.token("dana2", "dba")
        answered = await client.post(
            f"/handrail/threads/{thread}/interrupts/{interrupt}/answer?wait=true",
            json={"answer": {"decisions": [{"type": "approve"}]}},
            headers=dana,
        )
        assert answered.status_code == 200, answered.text  # still open: the GETs decided nothing
        assert served_agent.RAN == [("execute_sql", {"query": "VACUUM"})]

        decided = await feed_delivery(service, "review.decided")
        sent = await channel.send(target, decided, receipts)
        assert sent.ok, sent
        mail = inbox.messages[-1]
        assert (
            mail["Subject"] == f"[handrail] Review decided: execute_sql on thread {thread}, approved by dana2"
        )
        assert "decided by dana2 (through http)" in text_of(mail) and "execute_sql: approve" in text_of(mail)
        first = receipts.receipt("file:email", interrupt, "review.requested")
        assert first is not None and mail["In-Reply-To"] == first["message_id"]
    await reviewer.aclose()


# What reaches the headers, and how much of the arguments ------------------------------------
HOSTILE = "\r\nBcc: evil@example.net\r\nX-Injected: yes"


async def test_nothing_from_a_review_can_add_a_header_or_a_recipient(db: ServerDB) -> None:
    TokenStore(db).create("dana", ["support"])
    channel, inbox, receipts = EmailChannel(db), Inbox(), Receipts()
    data = review(
        thread=f"T1{HOSTILE}",
        agent=f"sup\u2028port\nX-Agent: 1{HOSTILE}",
        tools=[f"refund{HOSTILE}", "<script>alert(1)</script>"],
        action_requests=[
            {"name": f"refund{HOSTILE}", "args": {f"k{HOSTILE}": f"v{HOSTILE}\r\n\r\nbody?"}},
            {"name": "<script>alert(1)</script>", "args": {"html": "<b onclick='x'>&amp;</b>"}},
        ],
        reviewers={f"refund{HOSTILE}": ["support"]},
        decided_by={"id": f"dana{HOSTILE}", "channel": f"web{HOSTILE}"},
        decision={"decisions": [{"type": "reject", "message": f"no{HOSTILE}"}, {"type": f"x{HOSTILE}"}]},
    )
    data["links"]["review"] = f"{PUBLIC}/inbox/reviews/T1%0D%0ABcc/I1"
    async with smtp_server(inbox) as port:
        for event in ("review.requested", "review.decided", "review.expired", "run.failed"):
            sent = await channel.send(endpoint(port, ADDRESSES), delivery(event, data), receipts)
            assert sent.ok, sent
            assert inbox.accepted[-1].rcpt_tos == ["dana@example.com"]
            raw = inbox.accepted[-1].content
            assert isinstance(raw, bytes)
            head = raw.split(b"\r\n\r\n", 1)[0]
            mail = parse(raw)
            assert {k.lower() for k in mail} == BASE_HEADERS, mail.keys()
            assert re.search(rb"^(Bcc|X-Injected|X-Agent|Cc):", head, re.M | re.I) is None
            assert "\n" not in str(mail["Subject"]) and "\r" not in str(mail["Subject"])
            page = html_of(mail)
            assert "<script>" not in page and "<b onclick" not in page
            if event != "run.failed":  # a run's mail names no tool
                assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    subject = str(inbox.messages[0]["Subject"])
    assert subject.startswith("[handrail] Review requested: refund Bcc: evil@example.net X-Injected")
    assert len(subject) <= 250


async def test_long_arguments_are_folded_and_the_mail_stays_small(db: ServerDB) -> None:
    TokenStore(db).create("dana", ["support"])
    channel, inbox = EmailChannel(db), Inbox()
    calls = [{"name": "refund", "args": {"note": "x" * 100_000, "items": list(range(5000))}}] * 30
    data = review(action_requests=calls, description="ignored")
    async with smtp_server(inbox) as port:
        sent = await channel.send(endpoint(port, ADDRESSES), delivery("review.requested", data), Receipts())
        assert sent.ok, sent
    raw = inbox.accepted[-1].content
    assert isinstance(raw, bytes) and len(raw) < 120_000  # a few KB a call, ten calls at most
    text = text_of(inbox.messages[-1])
    assert "[folded: 100000 characters in all]" in text
    assert "[cut: the review page shows all of them]" in text
    assert "… and 20 more calls: the review page shows them." in text
    first = text.split("Call 1: refund", 1)[1].split("Call 2:", 1)[0]
    assert len(first) < ARGS_LIMIT * 1.5  # with each row's indent and line break
    assert all(len(line) <= 998 for line in raw.split(b"\r\n"))  # SMTP's line limit


# SMTP answers ------------------------------------------------------------------------------------
async def test_a_4xx_is_retried_with_the_same_message_id_and_then_delivered(db: ServerDB) -> None:
    TokenStore(db).create("dana", ["support"])
    channel, inbox = EmailChannel(db), Inbox(data=["451 4.3.0 Try again later"], rcpt=["450 4.2.1 Busy"])
    one = delivery("review.requested", review(), "msg_0123456789abcdef0123456789abcdef")
    async with smtp_server(inbox) as port:
        target = endpoint(port, ADDRESSES)
        busy = await channel.send(target, one, Receipts())
        assert (busy.ok, busy.retry, busy.code) == (False, True, 450), busy
        later = await channel.send(target, one, Receipts())
        assert (later.ok, later.retry, later.code) == (False, True, 451), later
        assert "Try again later" in str(later.error)
        done = await channel.send(target, one, Receipts())
        assert done.ok, done
        other = await channel.send(target, delivery("review.requested", review()), Receipts())
    ids = [str(m["Message-ID"]) for m in inbox.attempts]
    assert ids[0] == ids[1] == "<msg_0123456789abcdef0123456789abcdef@example.com>" != ids[2]
    assert done.receipt == {"recipients": ["dana@example.com"], "message_id": ids[0]}
    assert other.receipt is not None and other.receipt["message_id"] == ids[2]
    assert len(inbox.accepted) == 2


def asked() -> Delivery:
    return delivery("review.requested", review())


async def test_a_5xx_is_not_retried(db: ServerDB) -> None:
    tokens = TokenStore(db)
    tokens.create("dana", ["support"])
    tokens.create("erin", ["support"])
    refused = Inbox()
    refused.refuse = {"dana@example.com": "550 5.1.1 No such user", "erin@example.com": "550 5.1.1 Gone"}
    async with smtp_server(refused) as port:
        sent = await EmailChannel(db).send(endpoint(port, ADDRESSES), asked(), Receipts())
    assert (sent.ok, sent.retry, sent.code) == (False, False, 550), sent
    assert "every recipient was refused" in str(sent.error) and "dana@example.com" in str(sent.error)

    rejected = Inbox(data=["554 5.7.1 Message rejected"])
    async with smtp_server(rejected) as port:
        sent = await EmailChannel(db).send(endpoint(port, ADDRESSES), asked(), Receipts())
    assert (sent.ok, sent.retry, sent.code) == (False, False, 554), sent

    some = Inbox()
    some.refuse = {"erin@example.com": "550 5.1.1 Gone"}
    async with smtp_server(some) as port:
        sent = await EmailChannel(db).send(endpoint(port, ADDRESSES), asked(), Receipts())
    assert sent.ok and sent.receipt is not None
    assert sent.receipt["refused"] == {"erin@example.com": "550 5.1.1 Gone"}
    assert some.accepted[-1].rcpt_tos == ["dana@example.com"]


async def test_a_server_that_is_down_or_silent_is_a_failure_to_retry_not_an_exception(db: ServerDB) -> None:
    TokenStore(db).create("dana", ["support"])
    channel = EmailChannel(db)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    sent = await channel.send(endpoint(closed, ADDRESSES), delivery("review.requested", review()), Receipts())
    assert (sent.ok, sent.retry) == (False, True) and sent.error, sent

    stop = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await stop.wait()  # accepts the connection, never greets
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        target = endpoint(port, ADDRESSES, timeout=0.5)
        sent = await asyncio.wait_for(
            channel.send(target, delivery("review.requested", review()), Receipts()), 10
        )
        assert (sent.ok, sent.retry) == (False, True) and sent.error, sent
    finally:
        stop.set()
        server.close()
        await server.wait_closed()
    broken = Endpoint("file:email", "email", "", ("review.requested",), (), {"host": "", "from": "x"})
    sent = await channel.send(broken, delivery("review.requested", review()), Receipts())
    assert (sent.ok, sent.retry) == (False, False), sent
    garbled = Delivery("msg_1", "file:email", "review.requested", "T", "I", b"{not json")
    sent = await channel.send(endpoint(closed, ADDRESSES), garbled, Receipts())
    assert (sent.ok, sent.retry) == (False, False), sent


async def test_the_login_uses_the_password_the_environment_holds(
    db: ServerDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    TokenStore(db).create("dana", ["support"])
    inbox = Inbox()
    monkeypatch.setenv("HANDRAIL_TEST_SMTP_PASSWORD", "s3cret")
    async with smtp_server(inbox, authenticator=inbox.authenticate, auth_require_tls=False) as port:
        target = endpoint(port, ADDRESSES, username="handrail", password_env="HANDRAIL_TEST_SMTP_PASSWORD")
        sent = await EmailChannel(db).send(target, delivery("review.requested", review()), Receipts())
        assert sent.ok, sent
        assert inbox.logins == [(b"handrail", b"s3cret")]
        monkeypatch.setenv("HANDRAIL_TEST_SMTP_PASSWORD", "wrong")
        sent = await EmailChannel(db).send(target, delivery("review.requested", review()), Receipts())
        assert (sent.ok, sent.retry) == (False, True) and "login" in str(sent.error), sent
        monkeypatch.delenv("HANDRAIL_TEST_SMTP_PASSWORD")
        sent = await EmailChannel(db).send(target, delivery("review.requested", review()), Receipts())
        assert (sent.ok, sent.retry) == (False, False) and "HANDRAIL_TEST_SMTP_PASSWORD" in str(sent.error)


# What each mail says -------------------------------------------------------------------------
async def test_each_review_event_has_its_own_mail(db: ServerDB) -> None:
    TokenStore(db).create("dana", ["support"])
    channel, inbox, receipts = EmailChannel(db), Inbox(), Receipts()
    async with smtp_server(inbox) as port:
        target = endpoint(port, ADDRESSES)
        asked = delivery("review.requested", review(expires_at=1767229200.0))
        sent = await channel.send(target, asked, receipts)
        receipts.keep(asked, sent)
        unknown = review(interrupt="I2", allowed_decisions={"refund": ["approve", "respond", "reject"]})
        await channel.send(target, delivery("review.outcome_unknown", unknown), receipts)
        decided = {"id": "dana", "channel": "web"}
        answer = {"decisions": [{"type": "reject", "message": "not this one"}]}
        await channel.send(
            target, delivery("review.decided", review(decided_by=decided, decision=answer)), receipts
        )
        expired = review(
            decided_by={"id": None, "channel": "expiry"}, decision={"decisions": [{"type": "reject"}]}
        )
        await channel.send(target, delivery("review.expired", expired), receipts)
        vote = review(decided_by={"id": "dana", "channel": "slack"}, decision={"type": "approve"})
        await channel.send(target, delivery("review.approved", vote), receipts)
    requested, outcome, rejected, lapsed, approved = inbox.messages
    assert requested["Subject"] == "[handrail] Review requested: refund on thread T1"
    assert "Expires unanswered at 2026-01-01 01:00:00 UTC." in text_of(requested)
    assert "Decisions allowed for refund: approve, reject" in text_of(requested)
    assert requested["In-Reply-To"] is None
    assert outcome["Subject"] == "[handrail] Outcome unknown: refund on thread T1"
    assert "nobody knows whether it took effect" in text_of(outcome)
    assert rejected["Subject"] == "[handrail] Review decided: refund on thread T1, rejected by dana"
    assert "refund: reject, saying 'not this one'" in text_of(rejected)
    assert rejected["In-Reply-To"] == rejected["References"] == requested["Message-ID"]
    assert lapsed["Subject"] == "[handrail] Review expired: refund on thread T1"
    assert "expired unanswered" in text_of(lapsed) and "On expiry:" in text_of(lapsed)
    assert lapsed["Auto-Submitted"] == "auto-generated" and lapsed["X-Handrail-Event"] == "review.expired"
    assert approved["Subject"] == "[handrail] Approval recorded: refund on thread T1"
    assert "dana approved refund on thread T1; the review waits for more approvals." in text_of(approved)
    assert {str(m["Date"]) for m in inbox.messages} == {"Thu, 01 Jan 2026 00:00:00 +0000"}  # when made
