"""Which handrail identity a Slack user answers as: the mapping table, and the reviewer it makes.

A click in Slack names a Slack user (``U0123ABCD``); handrail records answers by
identity (SPEC rule 11). ``handrail_server_slack_users`` maps one to the other: rows
added by ``handrail slack users add`` (source ``cli``) and the policy file's
``[notifications.slack.users]`` (source ``file``, kept in step by
:meth:`SlackUsers.keep_file`). An unmapped Slack user answers nothing.

The identity answers with the roles of its live tokens that hold the ``review`` scope
(``handrail tokens create --name alice --role dba``): no such token, no answer. So
revoking an identity's tokens also stops its Slack clicks, and a Slack user never has
roles its identity lacks (rule 12).
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from handrail.server.db import ServerDB
from handrail.server.tokens import Credential, TokenStore

__all__ = ["SLACK_USER", "SlackUser", "SlackUsers", "slack_reviewer"]

SLACK_USER = re.compile(r"[UW][A-Z0-9]{2,32}")
"""What a Slack user id looks like (``U...``, or ``W...`` on Enterprise Grid)."""
_IDENTITY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,99}")  # a token's name (``tokens.py``)

_SCHEMA = """CREATE TABLE IF NOT EXISTS handrail_server_slack_users (
    slack_user TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
)"""
_READY: weakref.WeakSet[ServerDB] = weakref.WeakSet()  # databases whose table this process made


@dataclass(frozen=True, slots=True)
class SlackUser:
    """One row: the Slack user, the identity it answers as, where the row came from, since when."""

    slack_user: str
    identity: str
    source: str
    created_at: float


class SlackUsers:
    """The mapping of Slack users to handrail identities, in the service's tables.

    Example::

        users = SlackUsers(ServerDB.open(db_path="handrail.db"))
        users.add("U0123ABCD", "alice")
        users.lookup("U0123ABCD")          # 'alice'
    """

    def __init__(self, db: ServerDB) -> None:
        self.db = db
        if db not in _READY:
            db.execute(_SCHEMA)
            _READY.add(db)

    def add(self, slack_user: str, identity: str, *, source: str = "cli") -> SlackUser:
        """Map ``slack_user`` to ``identity`` (replacing what it was mapped to); ``ValueError``
        for an id or a name that is not one."""
        check_slack_user(slack_user)
        if not isinstance(identity, str) or not _IDENTITY.fullmatch(identity):
            raise ValueError(
                f"{identity!r} is not a handrail identity: 1-100 letters, digits or . _ @ - (a token's name)"
            )
        now = time.time()
        self.db.execute(
            "INSERT INTO handrail_server_slack_users (slack_user, identity, source, created_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (slack_user) DO UPDATE SET identity = excluded.identity, "
            "source = excluded.source, created_at = excluded.created_at",
            (slack_user, identity, source, now),
        )
        return SlackUser(slack_user, identity, source, now)

    def remove(self, slack_user: str) -> bool:
        """Forget ``slack_user``'s mapping; whether there was one."""
        return (
            self.db.execute("DELETE FROM handrail_server_slack_users WHERE slack_user = ?", (slack_user,)) > 0
        )

    def all(self) -> list[SlackUser]:
        """Every mapping, by Slack user id."""
        rows = self.db.query(
            "SELECT slack_user, identity, source, created_at FROM handrail_server_slack_users "
            "ORDER BY slack_user"
        )
        return [SlackUser(str(u), str(i), str(s), float(c)) for u, i, s, c in rows]

    def lookup(self, slack_user: str) -> str | None:
        """The identity ``slack_user`` answers as, or None when it is not mapped."""
        if not isinstance(slack_user, str) or not SLACK_USER.fullmatch(slack_user):
            return None
        rows = self.db.query(
            "SELECT identity FROM handrail_server_slack_users WHERE slack_user = ?", (slack_user,)
        )
        return str(rows[0][0]) if rows else None

    def keep_file(self, mapping: Mapping[str, str]) -> None:
        """Make the rows of source ``file`` be the policy file's ``[notifications.slack.users]``:
        its entries are added (they win over a row the CLI added for the same user), and file
        rows it no longer names are removed."""
        for slack_user, identity in mapping.items():
            self.add(slack_user, identity, source="file")
        for row in self.all():
            if row.source == "file" and row.slack_user not in mapping:
                self.db.execute(
                    "DELETE FROM handrail_server_slack_users WHERE slack_user = ? AND source = 'file'",
                    (row.slack_user,),
                )


def check_slack_user(slack_user: object) -> str:
    """``slack_user`` if it is a Slack user id, else ``ValueError`` saying what one looks like."""
    if not isinstance(slack_user, str) or not SLACK_USER.fullmatch(slack_user):
        raise ValueError(
            f"{slack_user!r} is not a Slack user id: it looks like U0123ABCD (in Slack: a person's "
            "profile, the ⋮ menu, Copy member ID)"
        )
    return slack_user


def slack_reviewer(db: ServerDB, tokens: TokenStore, slack_user: str) -> tuple[Credential | None, str]:
    """The credential a Slack user answers with, or None and why not (said to the user).

    Its name is the mapped identity; its roles are those of the identity's live tokens with
    the ``review`` scope; its only scope is ``review``; its id is ``slack:USER``.
    """
    identity = SlackUsers(db).lookup(slack_user)
    if identity is None:
        return None, (
            f"Your Slack account ({slack_user}) is not linked to a handrail identity, so handrail "
            f"records no answer from it. An administrator links it with: "
            f"handrail slack users add {slack_user} IDENTITY"
        )
    live = [c for c in tokens.all() if c.name == identity and c.revoked_at is None and c.has("review")]
    if not live:
        return None, (
            f"Your Slack account is linked to {identity}, but {identity} has no live handrail token "
            "with the review scope, so handrail records no answer from it. An administrator creates "
            f"one with: handrail tokens create --name {identity} --role ROLE"
        )
    roles = tuple(dict.fromkeys(role for credential in live for role in credential.roles))
    credential = Credential(
        id=f"slack:{slack_user}",
        name=identity,
        roles=roles,
        created_at=datetime.now(UTC),
        revoked_at=None,
        scopes=("review",),
    )
    return credential, ""
