"""Browser sessions, one-time sign-in links and the forms' CSRF tokens (the web inbox).

A reviewer signs in with their token, or with a one-time link that
``handrail tokens link NAME`` prints, and gets a session cookie: HttpOnly (no script
reads it), SameSite=Strict (no other site's page sends it) and Secure when the service
is reached over TLS. The session stands for the token it was made from: revoking the
token ends its sessions from the next request on (SPEC rule 12: deny by default).

What is kept, never the secrets themselves: a keyed hash (HMAC-SHA256 under a random
key of the database, as for tokens) of each session's cookie value and of each link's
secret, in ``handrail_server_sessions`` and ``handrail_server_links``. A link works
once, within its lifetime (15 minutes unless told otherwise): redeeming it is one
``UPDATE ... WHERE used_at IS NULL``, so two tabs racing for it get one session.

CSRF: every form of a signed-in page carries :meth:`SessionStore.csrf` of the session
(a keyed hash of its cookie value, which no other site can read or compute); the forms
of the sign-in pages, before there is a session, carry the hash of a random
``handrail_signin`` cookie set with the page (a signed double-submit cookie).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from handrail.server.db import ServerDB
from handrail.server.tokens import Credential, TokenStore, database_key

__all__ = [
    "LINK_SECONDS",
    "PRESESSION_COOKIE",
    "SESSION_COOKIE",
    "SESSION_SECONDS",
    "SessionStore",
    "SignInLink",
]

SESSION_COOKIE = "handrail_session"
PRESESSION_COOKIE = "handrail_signin"
SESSION_SECONDS = 12 * 3600
LINK_SECONDS = 15 * 60
_SECRET = re.compile(r"^[A-Za-z0-9_-]{43}$")


@dataclass(frozen=True, slots=True)
class SignInLink:
    """A one-time sign-in link's secret (the last part of its URL), who it signs in, until when."""

    secret: str
    credential: Credential
    expires_at: float

    def url(self, base: str) -> str:
        """The link on the service at ``base`` (e.g. ``http://127.0.0.1:8000``)."""
        return f"{base.rstrip('/')}/inbox/link/{self.secret}"


class SessionStore:
    """Start, check and end sessions; make and redeem sign-in links; make CSRF tokens.

    Example::

        sessions = SessionStore(db, tokens)
        cookie = sessions.start(credential)
        assert sessions.credential(cookie) == credential
        form_token = sessions.csrf(cookie)
    """

    def __init__(self, db: ServerDB, tokens: TokenStore, *, session_seconds: float = SESSION_SECONDS) -> None:
        self._db = db
        self._tokens = tokens
        self._key = database_key(db, "session_hmac")
        self.session_seconds = session_seconds

    def _digest(self, purpose: str, value: str) -> str:
        return hmac.new(self._key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    # Sessions -----------------------------------------------------------------------------------
    def start(self, credential: Credential) -> str:
        """A new session for ``credential``; returns the cookie's value (kept only as a hash)."""
        now = time.time()
        self._db.execute("DELETE FROM handrail_server_sessions WHERE expires_at < ?", (now,))
        secret = secrets.token_urlsafe(32)
        self._db.execute(
            "INSERT INTO handrail_server_sessions (digest, token_id, created_at, expires_at) "
            "VALUES (?, ?, ?, ?)",
            (self._digest("session", secret), credential.id, now, now + self.session_seconds),
        )
        return secret

    def credential(self, secret: str | None) -> Credential | None:
        """The live credential of the session with this cookie value (None: none, expired, revoked)."""
        if not secret or not _SECRET.match(secret):
            return None
        rows = self._db.query(
            "SELECT token_id FROM handrail_server_sessions WHERE digest = ? AND expires_at > ?",
            (self._digest("session", secret), time.time()),
        )
        return self._tokens.by_id(str(rows[0][0])) if rows else None

    def end(self, secret: str | None) -> None:
        """End the session with this cookie value (signing out); nothing when there is none."""
        if secret and _SECRET.match(secret):
            self._db.execute(
                "DELETE FROM handrail_server_sessions WHERE digest = ?", (self._digest("session", secret),)
            )

    # CSRF -----------------------------------------------------------------------------------------
    def csrf(self, secret: str) -> str:
        """The CSRF token of the forms of the session with this cookie value."""
        return self._digest("csrf", secret)

    def presession_csrf(self, cookie: str) -> str:
        """The CSRF token of the sign-in forms for the ``handrail_signin`` cookie's value."""
        return self._digest("signin", cookie)

    @staticmethod
    def matches(expected: str, sent: str | None) -> bool:
        """Whether a form's CSRF token is the expected one (compared in constant time)."""
        return bool(sent) and hmac.compare_digest(expected.encode(), str(sent).encode())

    # One-time links -------------------------------------------------------------------------------
    def link(self, credential: Credential, *, seconds: float = LINK_SECONDS) -> SignInLink:
        """A one-time sign-in link for ``credential``, valid for ``seconds``."""
        if not 0 < seconds <= 7 * 86400:
            raise ValueError(f"a sign-in link lasts more than 0 seconds and at most 7 days, got {seconds}")
        now = time.time()
        self._db.execute("DELETE FROM handrail_server_links WHERE expires_at < ?", (now,))
        secret = secrets.token_urlsafe(32)
        self._db.execute(
            "INSERT INTO handrail_server_links (digest, token_id, created_at, expires_at) "
            "VALUES (?, ?, ?, ?)",
            (self._digest("link", secret), credential.id, now, now + seconds),
        )
        return SignInLink(secret, credential, now + seconds)

    def link_credential(self, secret: str) -> Credential | None:
        """Who an unused, unexpired link signs in (without using it up), or None."""
        if not _SECRET.match(secret):
            return None
        rows = self._db.query(
            "SELECT token_id FROM handrail_server_links "
            "WHERE digest = ? AND used_at IS NULL AND expires_at > ?",
            (self._digest("link", secret), time.time()),
        )
        return self._tokens.by_id(str(rows[0][0])) if rows else None

    def redeem(self, secret: str) -> Credential | None:
        """Use a link up: the credential it signs in, or None (unknown, used, expired, revoked)."""
        if not _SECRET.match(secret):
            return None
        now = time.time()
        digest = self._digest("link", secret)
        used = self._db.execute(
            "UPDATE handrail_server_links SET used_at = ? "
            "WHERE digest = ? AND used_at IS NULL AND expires_at > ?",
            (now, digest, now),
        )
        if used != 1:
            return None
        rows = self._db.query("SELECT token_id FROM handrail_server_links WHERE digest = ?", (digest,))
        return self._tokens.by_id(str(rows[0][0])) if rows else None
