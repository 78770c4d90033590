"""Scopes on credentials (SPEC §5.3): made, listed, and given to tokens made before them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import Backend
from handrail.cli import main
from handrail.server import ServerDB
from handrail.server.tokens import TokenStore


def test_a_token_made_without_a_scope_may_only_review(backend: Backend) -> None:
    tokens = TokenStore(backend.server_db())
    credential, token = tokens.create("alice", ["dba"])
    assert credential.scopes == ("review",)
    verified = tokens.verify(token)
    assert verified is not None and verified.scopes == ("review",)
    assert verified.has("review") and not verified.has("run") and not verified.has("admin")


def test_admin_holds_every_scope_and_scopes_are_kept_in_order(backend: Backend) -> None:
    tokens = TokenStore(backend.server_db())
    admin, token = tokens.create("root", [], ["admin"])
    assert all(admin.has(scope) for scope in ("run", "review", "admin"))
    both, _ = tokens.create("app", [], ["review", "run", "run"])
    assert both.scopes == ("run", "review")
    for bad in (["root"], [], ["admin", "everything"]):
        with pytest.raises(ValueError, match="scopes"):
            tokens.create("x", [], bad)
    assert tokens.verify(token) == admin


def _old_tokens_table(path: Path) -> None:
    """The tokens table as versions before scopes made it, with one token in it."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE handrail_server_tokens (id TEXT PRIMARY KEY, name TEXT NOT NULL, roles TEXT NOT NULL, "
        "digest TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, revoked_at DOUBLE PRECISION)"
    )
    conn.execute(
        "INSERT INTO handrail_server_tokens VALUES "
        "('0123456789abcdef', 'legacy', '[\"dba\"]', 'x', 1.0, NULL)"
    )
    conn.commit()
    conn.close()


def test_a_token_made_before_scopes_is_given_run_and_review_once(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_tokens_table(path)
    db = ServerDB.open(db_path=path)
    (legacy,) = TokenStore(db).all()
    assert legacy.scopes == ("run", "review") and legacy.migrated_at is not None
    first = legacy.migrated_at
    db.close()
    again = ServerDB.open(db_path=path)  # a second service process: nothing changes
    assert TokenStore(again).all()[0].migrated_at == first
    again.close()


def test_a_token_made_before_scopes_is_given_them_on_postgres(tmp_path: Path) -> None:
    backend = Backend("postgres", tmp_path)
    try:
        _migrate_on_postgres(backend)
    finally:
        backend.close()


def _migrate_on_postgres(backend: Backend) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(str(backend.dsn), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(backend.schema)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(backend.schema)))
        conn.execute(
            "CREATE TABLE handrail_server_tokens (id TEXT PRIMARY KEY, name TEXT NOT NULL, "
            "roles TEXT NOT NULL, digest TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, "
            "revoked_at DOUBLE PRECISION)"
        )
        conn.execute(
            "INSERT INTO handrail_server_tokens VALUES ('0123456789abcdef', 'legacy', '[]', 'x', 1.0, NULL)"
        )
    (legacy,) = TokenStore(backend.server_db()).all()
    assert legacy.scopes == ("run", "review") and legacy.migrated_at is not None


def test_the_tokens_command_takes_scopes_and_lists_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "h.db"
    _old_tokens_table(path)
    db = str(path)
    assert main(["tokens", "create", "--name", "ops", "--scope", "run", "--scope", "admin", "--db", db]) == 0
    assert "scopes: run, admin)" in capsys.readouterr().out
    assert main(["tokens", "create", "--name", "alice", "--role", "dba", "--db", db]) == 0
    assert "scopes: review)" in capsys.readouterr().out
    assert main(["tokens", "list", "--db", db]) == 0
    listing = capsys.readouterr().out
    assert "run, admin" in listing and "run, review *" in listing
    assert "made before tokens had scopes" in listing
    assert main(["tokens", "create", "--name", "x", "--scope", "root", "--db", db]) != 0
    assert "invalid choice: 'root'" in capsys.readouterr().err
