"""Removing the working folders of finished demo threads, so they do not pile up.

Each demo thread started without ``--workdir`` gets a folder in
:func:`~handrail.cli._demo_agent.default_workdirs` (one folder in the temporary directory).
When a new thread starts, the folders of the threads that store shows as finished (no
review pending, nothing left to run) go: a finished thread is replayed from its log and
needs no files. Folders of waiting threads, of threads in other stores, and every folder
the person chose with ``--workdir`` are left alone.

Private to :mod:`handrail.cli.demo`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from handrail.checkpoint import BaseCheckpointSaver
from handrail.cli._demo_agent import default_workdirs

__all__ = ["remove_finished_workdirs"]


def remove_finished_workdirs(store: BaseCheckpointSaver, *, app: str) -> list[Path]:
    """Delete the default workdirs of ``store``'s finished demo threads; return the ones removed."""
    parent = default_workdirs()
    if not parent.is_dir():
        return []
    removed = []
    for folder in sorted(parent.iterdir()):
        if not folder.is_dir() or folder.is_symlink():
            continue
        record = store.get_thread(folder.name)
        if record is None or record.metadata.get("app") != app or record.pending:
            continue
        if record.status != "idle" or record.metadata.get("workdir") != str(folder.resolve()):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
