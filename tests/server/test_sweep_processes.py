"""Two ``handrail sweep`` processes at once on one store (SPEC rule 15, ``handrail.sweep`` S1).

Reviews that expire one second after they are asked are left to lapse; two sweeper
processes then race over them. Each review resolves exactly once (one ``answered`` entry,
channel ``expiry``), and a worker's run of each thread runs its call once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import expiring_agent

from conftest import Backend

HERE = Path(__file__).resolve().parent
THREADS = 12


def test_two_sweeper_processes_resolve_each_lapsed_review_once(backend: Backend) -> None:
    agent = expiring_agent.build(backend.saver())
    for i in range(THREADS):
        paused = agent.invoke(
            {"messages": [f"UPDATE t SET n = {i}"]}, {"configurable": {"thread_id": f"s{i}"}}
        )
        assert paused["__interrupt__"]
    time.sleep(1.2)  # past every review's expires_after (1 s)
    command = [sys.executable, "-m", "handrail", "sweep", "expiring_agent:agent", *backend.store_flags()]
    sweepers = [
        subprocess.Popen(command, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=120) for process in sweepers]
    for process, (out, err) in zip(sweepers, outputs, strict=True):
        assert process.returncode == 0, err + out
    said = sum(out.count("expired: review") for out, _ in outputs)
    assert said == THREADS, outputs  # each resolution told by the sweeper that made it
    expiring_agent.RAN.clear()
    for i in range(THREADS):
        config = {"configurable": {"thread_id": f"s{i}"}}
        answered = [e for e in agent.get_audit_trail(config) if e.event == "answered"]
        assert [(e.channel, e.kind) for e in answered] == [("expiry", "expired")], answered
        agent.invoke(None, config)  # what a worker does: on_expiry="approve" runs the call
    assert sorted(expiring_agent.RAN) == sorted(f"UPDATE t SET n = {i}" for i in range(THREADS))
