"""Resume a paused thread in a new process, with new MCP sessions (a test's helper).

    python resume_agent.py DB_PATH THREAD_ID INTERRUPT_ID LEDGER_PATH

Approves the interrupt and prints the thread's tool results as a JSON list.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from _mcp_support import Ledger, gated_agent, upstream_command

from handrail import Command
from handrail.checkpoint.sqlite import SqliteSaver
from handrail.mcp import load_tools_sync


def main() -> None:
    db, thread_id, interrupt_id, ledger_path = sys.argv[1:]
    ledger = Ledger(Path(ledger_path))
    saver = SqliteSaver(db)
    try:
        with load_tools_sync(command=upstream_command(), env=ledger.env, name="notes") as tools:
            agent = gated_agent(tools, [], saver)
            out = agent.invoke(
                Command(resume={interrupt_id: {"decisions": [{"type": "approve"}]}}),
                {"configurable": {"thread_id": thread_id}},
            )
    finally:
        saver.close()
    print(json.dumps([m.content for m in out["messages"] if m.type == "tool"]))


if __name__ == "__main__":
    main()
