"""handrail's review service: ``handrail serve`` (SPEC §5.3).

An HTTP API that LangGraph's own SDK clients speak (assistants, threads, runs), plus
handrail's own paths for reviewers (the inbox, answers with identities, the audit
trail). Needs the ``server`` extra: ``pip install 'handrail[server]'``. See
``docs/service.md``.

Example::

    from handrail.server import ServerDB, create_app

    app = create_app({"agent": agent}, db=ServerDB.open(db_path="handrail.db"))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handrail.server.app import create_app
    from handrail.server.db import ServerDB
    from handrail.server.tokens import Credential, TokenStore

__all__ = ["Credential", "ServerDB", "TokenStore", "create_app"]

# Loaded on first use, so that `handrail --help` does not import FastAPI.
_WHERE = {
    "create_app": "handrail.server.app",
    "ServerDB": "handrail.server.db",
    "Credential": "handrail.server.tokens",
    "TokenStore": "handrail.server.tokens",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'handrail.server' has no attribute {name!r}")
