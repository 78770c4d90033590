"""``handrail slack setup`` and ``handrail slack users``: reviews answered from Slack.

``handrail slack setup`` walks through the Slack app handrail needs (a bot token with
``chat:write``, interactivity pointed at the service), asks for the bot token and the
signing secret (or takes ``--bot-token`` / ``--signing-secret``; ``-`` reads one from
standard input), checks the token with Slack's ``auth.test`` and keeps both in the
service's tables (``handrail.notify.slack.SlackSettings``). ``handrail slack users add
SLACK_USER_ID IDENTITY`` says which handrail identity a Slack user answers as;
``users list`` and ``users remove`` show and undo that. Every command takes the store
flags of ``handrail tokens`` (``--db FILE`` or ``--postgres DSN [--schema NAME]``).
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from handrail.cli._flags import add_store_flags
from handrail.cli._review_display import clock, id_column, text_column, time_column
from handrail.cli._store import server_db

__all__ = ["COMMANDS", "add_commands", "run"]

COMMANDS = frozenset({"slack"})

_STEPS = """\
Reviews can be answered from Slack: a review posts a message with its calls and a button
per decision, and a click answers through this service with every rule applied.

1. Create a Slack app: https://api.slack.com/apps -> Create New App -> From scratch.
2. OAuth & Permissions -> Bot Token Scopes: add chat:write (and chat:write.public to post
   in channels the bot was not invited to). Install the app to the workspace and copy
   the Bot User OAuth Token (xoxb-...).
3. Basic Information -> App Credentials: copy the Signing Secret.
4. Interactivity & Shortcuts: turn Interactivity on; Request URL:
   {url}
5. Invite the bot to the reviewers' channel (/invite @your-app) and name the channel in
   the policy file: [notifications.slack] channel = "C0123456789".
"""


def add_commands(commands: Any) -> None:
    """Add ``handrail slack setup`` and ``handrail slack users add|list|remove``."""
    slack = commands.add_parser(
        "slack",
        help="answer reviews from Slack: set up the Slack app, link Slack users to identities",
        description="Slack approvals: 'handrail slack setup' keeps the Slack app's bot token and signing "
        "secret; 'handrail slack users add U0123ABCD alice' lets that Slack user answer as alice.",
    )
    actions = slack.add_subparsers(dest="slack_command", metavar="ACTION", title="actions")
    setup = actions.add_parser(
        "setup",
        help="keep the Slack app's bot token and signing secret (checked with Slack)",
        description="Explain the Slack app handrail needs, then keep its bot token and signing secret in "
        "the service's tables. Without --bot-token / --signing-secret it asks for them; '-' reads one "
        "from standard input. The token is checked with Slack's auth.test first.",
    )
    setup.add_argument(
        "--bot-token", metavar="TOKEN", help="the Bot User OAuth Token (xoxb-...), or - for stdin"
    )
    setup.add_argument("--signing-secret", metavar="SECRET", help="the app's Signing Secret, or - for stdin")
    setup.add_argument(
        "--public-url",
        metavar="URL",
        help="where Slack reaches this service (to print the exact interactivity Request URL)",
    )
    setup.add_argument(
        "--api-url",
        metavar="URL",
        help="the Slack Web API's root (default: Slack's own, https://slack.com/api/); kept for the service",
    )
    add_store_flags(setup)
    users = actions.add_parser(
        "users",
        help="which handrail identity each Slack user answers as",
        description="A Slack user answers reviews as the handrail identity linked here, with the roles of "
        "that identity's live review tokens ('handrail tokens create --name IDENTITY --role ROLE'). An "
        "unlinked Slack user answers nothing.",
    )
    which = users.add_subparsers(dest="users_command", metavar="ACTION", title="actions")
    add = which.add_parser("add", help="link a Slack user to a handrail identity")
    add.add_argument(
        "slack_user", metavar="SLACK_USER_ID", help="e.g. U0123ABCD (Slack: profile, ⋮, Copy member ID)"
    )
    add.add_argument("identity", metavar="IDENTITY", help="a handrail identity: the --name of its tokens")
    add_store_flags(add)
    listing = which.add_parser("list", help="the Slack users linked, and whether each can answer")
    add_store_flags(listing)
    remove = which.add_parser("remove", help="unlink a Slack user: its clicks answer nothing")
    remove.add_argument("slack_user", metavar="SLACK_USER_ID")
    add_store_flags(remove)
    for parser in (slack, setup, users, add, listing, remove):
        parser.set_defaults(usage=parser.error)


def run(args: argparse.Namespace, console: Console, failure: type[Exception]) -> int:
    """Run ``handrail slack ...``; return the exit code. A failure is raised as ``failure``
    with a one-line message."""
    command = getattr(args, "slack_command", None)
    if command not in ("setup", "users"):
        raise failure("choose an action: handrail slack setup | handrail slack users add|list|remove")
    if command == "users" and getattr(args, "users_command", None) not in ("add", "list", "remove"):
        raise failure("choose an action: handrail slack users add SLACK_USER_ID IDENTITY | list | remove ID")

    if command == "setup":
        try:
            import slack_sdk  # noqa: F401
        except ImportError:
            raise failure(
                "handrail slack setup needs the slack extra: pip install 'handrail[slack]'"
            ) from None
    try:
        db = server_db(args)
    except Exception as exc:  # a database that cannot be opened: say so in one line
        raise failure(f"cannot open the service's tables: {type(exc).__name__}: {exc}") from None
    try:
        if command == "setup":
            return _setup(db, args, console, failure)
        return _users(db, args, console, failure)
    finally:
        db.close()


def _setup(db: Any, args: argparse.Namespace, console: Console, failure: type[Exception]) -> int:
    from handrail.notify.slack import SlackSettings

    base = (args.public_url or "https://YOUR-SERVICE").rstrip("/")
    console.print(_STEPS.format(url=f"{base}/handrail/slack/actions"), soft_wrap=True, highlight=False)
    token = _secret(args.bot_token, "Bot User OAuth Token (xoxb-...): ", "--bot-token", failure)
    secret = _secret(args.signing_secret, "Signing Secret: ", "--signing-secret", failure)
    if not token.startswith("xox"):
        raise failure("a Slack bot token starts with xoxb- (OAuth & Permissions -> Bot User OAuth Token)")
    if len(secret) < 16 or len(secret) > 256 or not secret.isalnum():
        raise failure("a Slack signing secret is letters and digits (Basic Information -> App Credentials)")
    checked = _auth_test(token, args.api_url, failure)
    team = checked.get("team_id")
    SlackSettings.save(
        db,
        bot_token=token,
        signing_secret=secret,
        api_url=args.api_url or None,
        team_id=team if isinstance(team, str) else None,
    )
    who = checked.get("user") or checked.get("bot_id") or "the bot"
    console.print(
        f"Slack is set up: workspace {escape(str(checked.get('team') or team or '?'))} "
        f"({escape(str(team or '?'))}), bot {escape(str(who))}. Clicks from other workspaces are refused.",
        soft_wrap=True,
    )
    if not token.startswith("xoxb-"):
        console.print("Note: this is not a bot token (xoxb-); messages will be posted as its user.")
    for env in ("HANDRAIL_SLACK_BOT_TOKEN", "HANDRAIL_SLACK_SIGNING_SECRET", "HANDRAIL_SLACK_API_URL"):
        if os.environ.get(env):
            console.print(
                f"Note: {env} is set in this environment; where it is set it wins over what was kept."
            )
    console.print(
        "Next: link each reviewer, e.g. 'handrail slack users add U0123ABCD alice' (alice needs a live token "
        "with the review scope and her roles), then restart or reload 'handrail serve'.",
        soft_wrap=True,
    )
    return 0


def _secret(given: str | None, prompt: str, flag: str, failure: type[Exception]) -> str:
    if given == "-":
        value = sys.stdin.readline().strip()
    elif given is not None:
        value = given.strip()
    elif sys.stdin.isatty():
        value = getpass.getpass(prompt).strip()
    else:
        raise failure(f"give {flag} VALUE (or {flag} - to read it from standard input)")
    if not value:
        raise failure(f"{flag}: no value was given")
    if not value.isprintable() or any(c.isspace() for c in value):
        raise failure(f"{flag}: a Slack credential has no spaces or control characters")
    return value


def _auth_test(token: str, api_url: str | None, failure: type[Exception]) -> dict[str, Any]:
    """Slack's ``auth.test`` for ``token``: what it says of the workspace and the bot."""
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError, SlackClientError

    if api_url is not None and not api_url.startswith(("https://", "http://")):
        raise failure(f"--api-url must be an http(s) URL, got {api_url!r}")
    client = (
        WebClient(token=token, base_url=api_url, timeout=15)
        if api_url
        else WebClient(token=token, timeout=15)
    )
    try:
        answer = client.auth_test()
    except SlackApiError as exc:
        data = exc.response.data if isinstance(exc.response.data, dict) else {}
        raise failure(
            f"Slack refused the bot token: {data.get('error') or exc.response.status_code}"
        ) from None
    except (SlackClientError, OSError, ValueError) as exc:
        raise failure(f"could not reach Slack to check the token: {type(exc).__name__}: {exc}") from None
    return dict(answer.data) if isinstance(answer.data, dict) else {}


def _users(db: Any, args: argparse.Namespace, console: Console, failure: type[Exception]) -> int:
    from handrail.server.slack_users import SlackUsers, check_slack_user
    from handrail.server.tokens import TokenStore

    users = SlackUsers(db)
    if args.users_command == "add":
        try:
            check_slack_user(args.slack_user)
            row = users.add(args.slack_user, args.identity)
        except ValueError as exc:
            raise failure(str(exc)) from None
        console.print(f"Slack user {row.slack_user} now answers as {escape(row.identity)}.")
        live = [
            c
            for c in TokenStore(db).all()
            if c.name == row.identity and c.revoked_at is None and c.has("review")
        ]
        if not live:
            console.print(
                f"Note: {escape(row.identity)} has no live token with the review scope yet, so its clicks "
                "are refused until one exists: "
                f"handrail tokens create --name {escape(row.identity)} --role ROLE",
                soft_wrap=True,
            )
        return 0
    if args.users_command == "remove":
        if not users.remove(args.slack_user):
            raise failure(f"Slack user {args.slack_user!r} is not linked (see 'handrail slack users list')")
        console.print(f"Slack user {args.slack_user} is no longer linked: its clicks answer nothing.")
        return 0
    rows = users.all()
    if not rows:
        console.print("No Slack user is linked: 'handrail slack users add SLACK_USER_ID IDENTITY' links one.")
        return 0
    tokens = TokenStore(db).all()
    table = Table(
        id_column("slack user"),
        text_column("identity"),
        text_column("answers with roles"),
        id_column("source"),
        time_column("added (UTC)"),
    )
    for row in rows:
        live = [c for c in tokens if c.name == row.identity and c.revoked_at is None and c.has("review")]
        roles = ", ".join(dict.fromkeys(r for c in live for r in c.roles)) or "(none)"
        table.add_row(
            row.slack_user,
            escape(row.identity),
            escape(roles) if live else "refused: no live review token",
            row.source,
            clock(row.created_at, seconds=False),
        )
    console.print(table)
    return 0
