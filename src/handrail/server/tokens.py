"""Credentials: who a request comes from (SPEC rule 11).

``handrail tokens create --name alice --role dba`` prints a token once. The service
keeps only a keyed hash of it (HMAC-SHA256 under a random key made once per database,
in ``handrail_server_keys``): a token is 256 random bits, so the hash cannot be turned
back into it, and a copy of the tokens table alone does not let anyone check guesses.
A token reads ``hr_<id>_<secret>``: the id finds the row, the hash is compared in
constant time. A service process remembers a verified token for :data:`REMEMBER_SECONDS`
(a request then costs no query); a revoked token is refused at once by the process that
revoked it, and by every other one within that time.

Scopes (SPEC §5.3) say what a token may do besides answering within its roles:
``run`` (start threads and runs, send input, read and cancel the threads it started),
``review`` (the inbox, answers within its roles, read the threads it may decide or has
decided) and ``admin`` (everything: every thread, state updates, forks from a
checkpoint, deletion). A token made without ``--scope`` gets ``review`` only. No scope
lifts the gate: an admin answers as a reviewer, with its roles. A token made before
scopes existed is given ``run`` and ``review`` (what such tokens were used for) the first
time a service opens its tables, and ``tokens list`` says so.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import orjson

from handrail.server.db import ServerDB

__all__ = ["MIGRATED_SCOPES", "REMEMBER_SECONDS", "SCOPES", "Credential", "TokenStore", "database_key"]

SCOPES = ("run", "review", "admin")
"""What a token may do (SPEC §5.3); ``admin`` includes the other two."""

DEFAULT_SCOPES = ("review",)
"""The scopes of a token made without any: deny by default."""

MIGRATED_SCOPES = ("run", "review")
"""The scopes given to a token made before scopes existed."""

REMEMBER_SECONDS = 1.0
"""How long a service process trusts a token it verified before it reads the row again."""

_clock = time.monotonic  # what REMEMBER_SECONDS is measured by

_TOKEN = re.compile(r"^hr_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")


@dataclass(frozen=True, slots=True)
class Credential:
    """A token's identity: ``name`` is the reviewer id, ``roles`` what they may decide."""

    id: str
    name: str
    roles: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    migrated_at: datetime | None = None  # when a token made before scopes was given its scopes

    @property
    def reviewer(self) -> dict[str, object]:
        """The reviewer handrail records: ``{"id": name, "roles": [...]}``."""
        return {"id": self.name, "roles": list(self.roles)}

    def has(self, scope: str) -> bool:
        """Whether the token holds ``scope`` (``admin`` holds every scope)."""
        return scope in self.scopes or "admin" in self.scopes


class TokenStore:
    """Create, list, revoke and check tokens kept (hashed) in the service's tables.

    Example::

        tokens = TokenStore(ServerDB.open(db_path="handrail.db"))
        credential, token = tokens.create("alice", ["dba"])
        assert tokens.verify(token) == credential
    """

    def __init__(self, db: ServerDB) -> None:
        self._db = db
        self._key = database_key(db, "token_hmac")
        # verified tokens by their keyed hash: (credential, until when, by the monotonic clock)
        self._verified: dict[str, tuple[Credential, float]] = {}

    def _digest(self, token: str) -> str:
        return hmac.new(self._key, token.encode(), hashlib.sha256).hexdigest()

    def create(
        self,
        name: str,
        roles: list[str] | tuple[str, ...] = (),
        scopes: list[str] | tuple[str, ...] = DEFAULT_SCOPES,
    ) -> tuple[Credential, str]:
        """A new token for reviewer ``name`` with ``roles`` and ``scopes`` (``review`` when
        none is given); the token is returned only here."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"a token's name must be 1-100 letters, digits or . _ @ - (starting with a letter or "
                f"digit), got {name!r}"
            )
        for role in roles:
            if not isinstance(role, str) or not _NAME.match(role):
                raise ValueError(f"a role must be 1-100 letters, digits or . _ @ -, got {role!r}")
        unknown = [s for s in scopes if s not in SCOPES]
        if unknown or not scopes:
            raise ValueError(f"a token's scopes are some of {list(SCOPES)}, got {list(scopes)!r}")
        token_id = secrets.token_hex(8)
        token = f"hr_{token_id}_{secrets.token_urlsafe(32)}"
        now = time.time()
        unique_roles = tuple(dict.fromkeys(roles))
        unique_scopes = tuple(s for s in SCOPES if s in scopes)
        self._db.execute(
            "INSERT INTO handrail_server_tokens (id, name, roles, digest, created_at, scopes) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                token_id,
                name,
                orjson.dumps(list(unique_roles)).decode(),
                self._digest(token),
                now,
                orjson.dumps(list(unique_scopes)).decode(),
            ),
        )
        return Credential(token_id, name, unique_roles, _at(now), None, unique_scopes), token

    def all(self) -> list[Credential]:
        """Every token, revoked ones too, oldest first."""
        rows = self._db.query(
            "SELECT id, name, roles, created_at, revoked_at, scopes, migrated_at FROM handrail_server_tokens "
            "ORDER BY created_at, id"
        )
        return [_credential(row) for row in rows]

    def revoke(self, id_or_name: str) -> list[Credential]:
        """Revoke the token with this id, or every live token of this name; return them."""
        now = time.time()
        targets = [c for c in self.all() if c.revoked_at is None and id_or_name in (c.id, c.name)]
        for credential in targets:
            self._db.execute(
                "UPDATE handrail_server_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (now, credential.id),
            )
        self._verified.clear()
        return [replace(c, revoked_at=_at(now)) for c in targets]

    def remembered(self, token: str) -> Credential | None:
        """The credential of a token verified within :data:`REMEMBER_SECONDS`, if any (no query)."""
        if not isinstance(token, str) or len(token) > 80:
            return None
        found = self._verified.get(self._digest(token))
        if found is None or found[1] < _clock():
            return None
        return found[0]

    def by_id(self, token_id: str) -> Credential | None:
        """The live credential of the token with this id (None when unknown or revoked)."""
        rows = self._db.query(
            "SELECT id, name, roles, created_at, revoked_at, scopes, migrated_at FROM handrail_server_tokens "
            "WHERE id = ?",
            (token_id,),
        )
        if not rows or rows[0][4] is not None:
            return None
        return _credential(rows[0])

    def live(self, id_or_name: str) -> Credential | None:
        """The token with this id, or the newest live token of this name (None when there is none)."""
        found = [c for c in self.all() if c.revoked_at is None and id_or_name in (c.id, c.name)]
        return found[-1] if found else None

    def verify(self, token: str) -> Credential | None:
        """The live credential this token proves, or None (unknown, malformed or revoked)."""
        match = _TOKEN.match(token) if isinstance(token, str) else None
        if match is None:
            return None
        digest = self._digest(token)
        rows = self._db.query(
            "SELECT id, name, roles, created_at, revoked_at, scopes, migrated_at, digest "
            "FROM handrail_server_tokens WHERE id = ?",
            (match.group(1),),
        )
        if not rows:
            return None
        row = rows[0]
        if row[4] is not None or not hmac.compare_digest(str(row[7]), digest):
            return None
        credential = _credential(row[:7])
        if len(self._verified) > 10_000:
            self._verified.clear()
        self._verified[digest] = (credential, _clock() + REMEMBER_SECONDS)
        return credential


def database_key(db: ServerDB, name: str) -> bytes:
    """The random 256-bit key ``name`` of this database, made on first use and kept in
    ``handrail_server_keys`` (every service process on the database shares it)."""
    db.execute(
        "INSERT INTO handrail_server_keys (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
        (name, secrets.token_hex(32)),
    )
    (row,) = db.query("SELECT value FROM handrail_server_keys WHERE name = ?", (name,))
    return bytes.fromhex(str(row[0]))


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _credential(row: tuple[object, ...]) -> Credential:
    token_id, name, roles, created_at, revoked_at, scopes, migrated_at = row
    return Credential(
        id=str(token_id),
        name=str(name),
        roles=tuple(orjson.loads(str(roles))),
        created_at=_at(float(created_at)),  # type: ignore[arg-type]
        revoked_at=_at(float(revoked_at)) if revoked_at is not None else None,  # type: ignore[arg-type]
        # a row no service has opened since scopes came (migrate_scopes runs when one does)
        scopes=tuple(orjson.loads(str(scopes))) if scopes is not None else MIGRATED_SCOPES,
        migrated_at=_at(float(migrated_at)) if migrated_at is not None else None,  # type: ignore[arg-type]
    )
