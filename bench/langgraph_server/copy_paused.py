"""Copies of one paused thread, written into a stopped ``langgraph dev`` server's saved state.

Runs ONLY in ``bench/.venv-langgraph-server``; ``bench/service.py`` calls it. Building
100,000 paused threads through the API is not feasible in a bounded time (the dev
server starts about one queued run a second), so the benchmark pauses one thread for
real, stops the server (which saves its in-memory state under ``.langgraph_api/`` in its
working folder), and this script adds N copies of that thread, the way the server's own
``threads.copy`` copies one (``langgraph_runtime_inmem.ops.Threads.copy``: the
checkpoints and pending writes with the thread id replaced, the channel blobs under the
new id) except that a copy keeps the thread row's status, values and interrupts, so it
is ``interrupted`` with its review pending, as the original. Each copy is created and
updated a microsecond after the one before. No run rows are copied (a server that had
paused them by runs would also hold one run row per thread). The server loads it all
when it starts again.

Run::

    bench/.venv-langgraph-server/bin/python bench/langgraph_server/copy_paused.py FOLDER \\
        --thread THREAD_ID --copies 100000 --out copies.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pickle
import time
import uuid
from datetime import timedelta
from pathlib import Path

# langgraph_api reads these when imported (unpickling the state imports it); these are the
# values ``langgraph dev`` itself sets for the in-memory runtime.
for name, value in {
    "DATABASE_URI": ":memory:",
    "REDIS_URI": "fake",
    "MIGRATIONS_PATH": "__inmem",
    "LANGSMITH_LANGGRAPH_API_VARIANT": "local_dev",
    "N_JOBS_PER_WORKER": "1",
}.items():
    os.environ.setdefault(name, value)

from langgraph_runtime_inmem.ops import _replace_thread_id  # noqa: E402

OPS = Path(".langgraph_api/.langgraph_ops.pckl")
# InMemorySaver's three PersistentDicts, in the order it creates them.
STORAGE, WRITES, BLOBS = (Path(f".langgraph_api/.langgraph_checkpoint.{i}.pckl") for i in (1, 2, 3))


def load(path: Path) -> dict:
    with path.open("rb") as f:
        return pickle.load(f)


def save(path: Path, data: dict) -> None:
    temp = path.with_suffix(".tmp")
    with temp.open("wb") as f:
        pickle.dump(data, f, 2)  # as PersistentDict.dump
    temp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the stopped server's working folder")
    parser.add_argument("--thread", required=True, help="the paused thread to copy")
    parser.add_argument("--copies", type=int, required=True)
    parser.add_argument("--out", type=Path, help="write [[thread_id, interrupt_id], ...] here")
    args = parser.parse_args()
    os.chdir(args.folder)
    started = time.perf_counter()
    ops, storage, writes, blobs = load(OPS), load(STORAGE), load(WRITES), load(BLOBS)
    original = uuid.UUID(args.thread)
    template = next(t for t in ops["threads"] if t["thread_id"] == original)
    assert template["status"] == "interrupted", template["status"]
    (interrupts,) = template["interrupts"].values()
    interrupt_id = interrupts[0]["id"]
    old = str(original)
    checkpoints = storage[old]
    thread_writes = {key: value for key, value in writes.items() if key[0] == old}
    thread_blobs = {key: value for key, value in blobs.items() if key[0] == old}
    base = template["updated_at"]
    made = []
    for i in range(args.copies):
        new = uuid.uuid4()
        row = copy.deepcopy(template)
        stamp = base + timedelta(microseconds=i + 1)
        row.update(thread_id=new, created_at=stamp, updated_at=stamp, state_updated_at=stamp)
        ops["threads"].append(row)
        storage[str(new)] = _replace_thread_id(checkpoints, new, original)
        for (_, ns, checkpoint_id), pending in thread_writes.items():
            writes[(str(new), ns, checkpoint_id)] = {
                key: _replace_thread_id(value, new, original) for key, value in pending.items()
            }
        for key, value in thread_blobs.items():
            blobs[(str(new), *key[1:])] = value
        made.append([str(new), interrupt_id])
    for path, data in ((OPS, ops), (STORAGE, storage), (WRITES, writes), (BLOBS, blobs)):
        save(path, data)
    if args.out is not None:
        args.out.write_text(json.dumps(made))
    print(f"{args.copies} copies of {old} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
