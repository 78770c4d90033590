"""What is notified and who may manage it (SPEC rule 17, §5.4): the events made from the
feed (``outcome_unknown`` and failed runs included), the ``[notifications]`` table of a
policy file, every notification route with every kind of credential, hostile bodies,
and a feed trim that never drops a notice an endpoint has not taken yet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import served_agent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_webhooks import Served, served_client

from conftest import Backend
from handrail import Command, HumanInTheLoopMiddleware, ScriptedModel, create_agent, tool
from handrail.checkpoint.sqlite import SqliteSaver
from handrail.notify.config import NotifyConfigError, notify_settings, parse_notifications
from handrail.notify.events import EVENT_TYPES, check_event_types, event_of
from handrail.review.policy_file import PolicyFileError, load_policy_file
from handrail.server.app import _trim, create_app

from _support import config, turn

SECRET = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="


class Crash(BaseException):
    """A run that stops inside a tool without saving its result."""


def test_a_call_cut_short_is_notified_as_outcome_unknown_and_a_failed_run_as_run_failed(
    tmp_path: Path,
) -> None:
    store = SqliteSaver(tmp_path / "h.db")
    ran: list[str] = []

    @tool
    def send(to: str) -> str:
        """Send money."""
        ran.append(to)
        if len(ran) == 1:
            raise Crash()
        return "sent"

    agent = create_agent(
        ScriptedModel([turn({"name": "send", "args": {"to": "ann"}, "id": "s1"}), {"content": "done"}]),
        [send],
        middleware=[HumanInTheLoopMiddleware({"send": True})],
        checkpointer=store,
        name="payer",
    )
    agent.invoke({"messages": "go"}, config())
    with pytest.raises(Crash):
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    agent.invoke(None, config())  # the recovery asks about the call cut short
    events = [e for e in (event_of(entry, "https://h.example") for entry in store.read_feed()) if e]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["review.requested", "run.finished"]
    assert "review.decided" in kinds and "run.failed" in kinds
    (unknown,) = [e for e in events if e.type == "review.outcome_unknown"]
    data = orjson.loads(unknown.body)["data"]
    assert data["agent"] == "payer" and data["tools"] == ["send"] and data["thread_id"] == unknown.thread_id
    assert data["links"]["review"].startswith("https://h.example/inbox/reviews/")
    assert ran == ["ann"]  # never run again on its own


def test_event_types_are_checked_by_name() -> None:
    assert check_event_types("review.requested, review.decided") == ("review.requested", "review.decided")
    assert check_event_types("*") == EVENT_TYPES
    for bad in ("", "review.nothing", ["review.requested", 3], {"a": 1}):
        with pytest.raises(ValueError, match=r"review\.requested"):
            check_event_types(bad)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "handrail.toml"
    path.write_text("[agents.sql.interrupt_on]\nexecute_sql = true\n\n" + text)
    return path


def test_a_policy_file_names_webhooks_slack_and_email(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPS_SECRET", SECRET)
    monkeypatch.setenv("SMTP_PASSWORD", "pw")
    path = write(
        tmp_path,
        """[notifications]
public_url = "https://handrail.example"

[notifications.webhooks.ops]
url = "https://hooks.example/handrail"
events = ["review.requested", "review.decided"]
secret_env = "OPS_SECRET"

[notifications.slack]
channel = "C0123456789"
[notifications.slack.users]
U0123ABCD = "alice"

[notifications.email]
host = "smtp.example"
from = "handrail@example.com"
password_env = "SMTP_PASSWORD"
[notifications.email.addresses]
alice = "alice@example.com"
""",
    )
    settings_ = notify_settings(load_policy_file(path))
    assert settings_ is not None
    assert settings_.public_url == "https://handrail.example"
    assert [(e.id, e.kind, e.target) for e in settings_.endpoints] == [
        ("file:webhook:ops", "webhook", "https://hooks.example/handrail"),
        ("file:slack", "slack", "C0123456789"),
        ("file:email", "email", ""),
    ]
    assert settings_.endpoints[0].secrets == ((SECRET, None),)
    assert settings_.slack_users == {"U0123ABCD": "alice"}
    assert settings_.endpoints[2].options["addresses"] == {"alice": "alice@example.com"}


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ("[notifications]\nwebhook = 1\n", "notifications.webhook", "unknown key"),
        ('[notifications.webhooks.ops]\nurl = "ftp://x"\nsecret = "' + SECRET + '"\n', "url", "http"),
        ('[notifications.webhooks.ops]\nurl = "https://x.example"\n', "notifications.webhooks.ops", "secret"),
        ('[notifications.webhooks.ops]\nurl = "https://x.example"\nsecret = "abc"\n', "secret", "whsec_"),
        (
            '[notifications.webhooks.ops]\nurl = "https://x.example"\nsecret_env = "NOT_SET_HERE"\n',
            "secret_env",
            "not set",
        ),
        (
            '[notifications.webhooks.ops]\nurl = "https://x.example"\nsecret = "'
            + SECRET
            + '"\nevents = ["review.nope"]\n',
            "events",
            "unknown event",
        ),
        ('[notifications.slack]\nchannel = "general"\n', "channel", "channel id"),
        ('[notifications.email]\nhost = "smtp.example"\nfrom = "nobody"\n', "from", "address"),
        ('[notifications.email]\nhost = "smtp.example"\nfrom = "a@b.c"\nport = 0\n', "port", "port"),
    ],
)
def test_a_bad_notifications_table_is_refused_naming_its_line_and_key(
    tmp_path: Path, text: str, key: str, says: str
) -> None:
    with pytest.raises(PolicyFileError, match=says) as refused:
        notify_settings(load_policy_file(write(tmp_path, text)))
    assert key in (refused.value.key or "") and refused.value.line is not None and refused.value.line >= 4


toml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30) | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=15,
)
tables = st.dictionaries(
    st.sampled_from(["public_url", "webhooks", "slack", "email", "x"]),
    toml_values
    | st.dictionaries(
        st.sampled_from(["ops", "a b", ""]),
        st.dictionaries(st.sampled_from(["url", "events", "secret", "secret_env", "y"]), toml_values),
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(table=tables)
def test_any_notifications_table_is_used_or_refused_by_key_never_a_crash(table: dict[str, Any]) -> None:
    try:
        parsed = parse_notifications(table)
    except NotifyConfigError as exc:
        assert exc.key[0] == "notifications" and str(exc)
    else:
        assert all(e.events and set(e.events) <= set(EVENT_TYPES) for e in parsed.endpoints)


@pytest.fixture
async def served(backend: Backend) -> AsyncIterator[Served]:
    found = Served(backend, deliver_concurrency=0)
    async with found.app.router.lifespan_context(found.app):
        yield found


@pytest.fixture
async def client(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with served_client(served) as found:
        yield found


async def test_every_notification_route_needs_the_admin_scope(
    served: Served, client: httpx.AsyncClient
) -> None:
    admin = served.token("root", "dba", scopes=("admin",))
    made = (
        await client.post("/handrail/webhooks", json={"url": "https://x.example/h"}, headers=admin)
    ).json()
    endpoint = made["endpoint_id"]
    routes = [
        ("GET", "/handrail/webhooks", None),
        ("POST", "/handrail/webhooks", {"url": "https://y.example/h"}),
        ("POST", f"/handrail/webhooks/{endpoint}/test", None),
        ("POST", f"/handrail/webhooks/{endpoint}/rotate", {}),
        ("GET", "/handrail/deliveries", None),
        ("POST", "/handrail/deliveries/msg_" + "0" * 32 + "/retry", None),
        ("DELETE", f"/handrail/webhooks/{endpoint}", None),
    ]
    for headers, expected in (
        ({}, 401),
        ({"Authorization": "Bearer hr_0000000000000000_" + "x" * 43}, 401),
        (served.token("dana", "dba"), 403),
        (served.token("app", scopes=("run",)), 403),
    ):
        for method, path, body in routes:
            reply = await client.request(method, path, json=body, headers=headers)
            assert reply.status_code == expected, (method, path, reply.text)
            assert "secret" not in reply.text or expected != 200
    listed = (await client.get("/handrail/webhooks", headers=admin)).json()["items"]
    assert [e["endpoint_id"] for e in listed] == [endpoint]  # nothing was added or removed
    assert "secret" not in listed[0]  # shown once, when made


async def test_bad_webhook_bodies_are_4xx_naming_the_field(served: Served, client: httpx.AsyncClient) -> None:
    admin = served.token("root", scopes=("admin",))
    for body, says in (
        ({"url": "ftp://x"}, "http"),
        ({"url": "https://x.example", "events": ["nope"]}, "unknown event"),
        ({"url": "https://x.example", "events": []}, "at least one"),
        ({"url": "https://x.example", "secret": "whsec_short"}, "whsec_"),
        ({"url": "https://x.example", "extra": 1}, "extra"),
        ({"url": 5}, "url"),
    ):
        reply = await client.post("/handrail/webhooks", json=body, headers=admin)
        assert reply.status_code in (400, 422) and says in reply.text, (body, reply.text)
    assert (await client.delete("/handrail/webhooks/ep_nothing", headers=admin)).status_code == 404
    assert (await client.post("/handrail/webhooks/bad%00id/test", headers=admin)).status_code in (
        400,
        404,
        422,
    )


async def test_an_endpoint_of_the_policy_file_is_changed_in_the_file_only(backend: Backend) -> None:
    from handrail.notify.channels import Endpoint
    from handrail.notify.config import NotifySettings

    hook = Endpoint(
        "file:webhook:ops", "webhook", "https://x.example/h", ("review.requested",), ((SECRET, None),)
    )
    app = create_app(
        {"sql": served_agent.build(backend.saver())},
        db=backend.server_db(),
        sweep_every=None,
        deliver_concurrency=0,
        notifications=NotifySettings(endpoints=(hook,)),
    )
    _, token = app.state.service.tokens.create("root", [], ["admin"])
    admin = {"Authorization": f"Bearer {token}"}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
    ):
        listed = (await client.get("/handrail/webhooks", headers=admin)).json()["items"]
        assert [(e["endpoint_id"], e["source"]) for e in listed] == [("file:webhook:ops", "file")]
        removed = await client.delete("/handrail/webhooks/file:webhook:ops", headers=admin)
        assert removed.status_code == 409 and "policy file" in removed.text
        rotated = await client.post("/handrail/webhooks/file:webhook:ops/rotate", headers=admin)
        assert rotated.status_code == 409


async def test_the_feed_is_not_trimmed_past_a_notice_an_endpoint_has_not_taken(tmp_path: Path) -> None:
    import asyncio

    from handrail.checkpoint.sqlite import AsyncSqliteSaver
    from handrail.notify.outbox import Outbox
    from handrail.server.db import ServerDB

    store = AsyncSqliteSaver(tmp_path / "h.db")
    await store.setup()
    agent = served_agent.build(store)
    outbox = Outbox(ServerDB.open(db_path=tmp_path / "h.db"))
    outbox.add_endpoint(
        "webhook", "https://x.example/h", ["review.requested"], start_after=await store.afeed_end()
    )
    for n in range(3):
        await agent.ainvoke({"messages": f"SELECT {n}"}, {"configurable": {"thread_id": f"t{n}"}})
    before = len(await store.aread_feed())
    assert before >= 3
    trimming = asyncio.create_task(_trim([store], 0.0, outbox))  # everything is old enough to go
    await asyncio.sleep(0.3)
    trimming.cancel()
    assert len(await store.aread_feed()) == before  # the endpoint has not taken any of them
    await store.aclose()


@pytest.fixture(scope="module")
def hooks_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from fastapi.testclient import TestClient

    from handrail.server.db import ServerDB

    path = tmp_path_factory.mktemp("hooks") / "h.db"
    app = create_app(
        {"sql": served_agent.build(SqliteSaver(path))},
        db=ServerDB.open(db_path=path),
        sweep_every=None,
        deliver_concurrency=0,
        worker_concurrency=0,
    )
    _, token = app.state.service.tokens.create("root", [], ["admin"])
    with TestClient(app, raise_server_exceptions=True) as client:
        yield client, {"Authorization": f"Bearer {token}"}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.dictionaries(
        st.sampled_from(["url", "events", "secret", "x"]),
        st.none() | st.text(max_size=40) | st.lists(st.text(max_size=20), max_size=3) | st.integers(),
    )
)
def test_random_webhook_bodies_never_give_a_500(hooks_client: Any, body: Any) -> None:
    client, headers = hooks_client
    reply = client.post("/handrail/webhooks", json=body, headers=headers)
    assert reply.status_code in (201, 400, 422), reply.text


async def test_a_sighup_reload_puts_the_files_endpoints_in_use_and_drops_the_ones_it_no_longer_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from rich.console import Console

    from handrail.cli._reload import PolicyReload
    from handrail.server.db import ServerDB

    monkeypatch.setenv("HOOK_SECRET", SECRET)
    path = tmp_path / "handrail.toml"
    policy = "[agents.sql.interrupt_on]\nexecute_sql = true\n\n"

    def hook(name: str) -> str:
        return (
            f'[notifications.webhooks.{name}]\nurl = "https://{name}.example/h"\nsecret_env = "HOOK_SECRET"\n'
        )

    path.write_text(policy + hook("ops"))
    db_path = tmp_path / "h.db"
    agent = served_agent.build(SqliteSaver(db_path))
    app = create_app(
        {"sql": agent},
        db=ServerDB.open(db_path=db_path),
        sweep_every=None,
        deliver_concurrency=0,
        notifications=notify_settings(load_policy_file(path)),
    )
    service = app.state.service
    said = io.StringIO()
    reloading = PolicyReload(path, {"sql": agent}, Console(file=said), service.use_agents, notify=service)
    async with app.router.lifespan_context(app):
        assert [e.id for e in service.outbox.endpoints()] == ["file:webhook:ops"]
        path.write_text(policy + hook("audit"))
        assert reloading.reload()
        await asyncio.gather(*reloading._tasks)
        assert [e.id for e in service.outbox.endpoints()] == ["file:webhook:audit"]
        path.write_text(
            policy + '[notifications.webhooks.bad]\nurl = "ftp://x"\nsecret_env = "HOOK_SECRET"\n'
        )
        assert not reloading.reload()  # a bad file changes nothing
        assert [e.id for e in service.outbox.endpoints()] == ["file:webhook:audit"]
        assert "not reloaded" in said.getvalue() and "url" in said.getvalue()
        path.write_text(policy)
        assert reloading.reload()
        await asyncio.gather(*reloading._tasks)
        assert service.outbox.endpoints() == []
