"""The CLI's own package: rich belongs to the ``cli`` extra, and ``cli/__init__.py`` maps it.

``pip install handrail`` does not install rich. The library and the service run without
it, and the ``handrail`` command without it says which extra to install. Each of those
checks runs a fresh interpreter in which a meta path hook makes rich missing, as it is on
such an install; a static check reads every module outside ``handrail/cli`` for an
import of rich or of the CLI. The map in ``cli/__init__.py`` names every module of the
package, so a newcomer finds each command's module there.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "handrail"

WITHOUT_RICH = """
import sys

class NoRich:
    def find_spec(self, name, path=None, target=None):
        if name == "rich" or name.startswith("rich."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoRich())
"""

A_SMALL_AGENT = """
from handrail import Command, HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool

@tool
def delete_rows(table: str) -> str:
    \"\"\"Delete the rows of a table.\"\"\"
    return f"deleted the rows of {table}"

model = ScriptedModel([
    {"content": "", "tool_calls": [{"name": "delete_rows", "args": {"table": "logs"}}]},
    {"content": "Done."},
])
agent = create_agent(
    model, [delete_rows], middleware=[HumanInTheLoopMiddleware({"delete_rows": True})],
    checkpointer=InMemorySaver(),
)
config = {"configurable": {"thread_id": "t"}}
paused = agent.invoke({"messages": ["clean up"]}, config, version="v2")
(pending,) = paused.interrupts
done = agent.invoke(Command(resume={pending.id: {"decisions": [{"type": "approve"}]}}), config, version="v2")
assert done.value["messages"][-1].content == "Done.", done.value
assert "deleted the rows of logs" in [m.content for m in done.value["messages"]]

from handrail.server import ServerDB, create_app

create_app({"agent": agent}, db=ServerDB.open(db_path=sys.argv[1]))
assert not [name for name in sys.modules if name == "rich" or name.startswith(("rich.", "handrail.cli"))]
print("ran without rich")
"""


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_RICH + code, *args], capture_output=True, text=True, timeout=120
    )


def test_the_library_and_the_service_run_an_agent_without_rich(tmp_path: Path) -> None:
    done = _run(A_SMALL_AGENT, str(tmp_path / "service.db"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "ran without rich"


def _imported(node: ast.AST) -> list[str]:
    """The modules an import statement names (``from handrail import cli``: ``handrail.cli``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return []


def _is_cli_or_rich(name: str) -> bool:
    return name.partition(".")[0] == "rich" or name == "handrail.cli" or name.startswith("handrail.cli.")


def test_no_module_outside_the_cli_imports_rich_or_the_cli() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        inside = path.relative_to(SRC)
        if inside.parts[0] == "cli" or inside == Path("__main__.py"):  # python -m handrail is the command
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found += [
                f"{inside}:{node.lineno} imports {name}" for name in _imported(node) if _is_cli_or_rich(name)
            ]
    assert found == []


def _says_which_extra(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "handrail: error: the handrail command needs the cli extra: pip install 'handrail[cli]'"
    ]


def test_the_command_without_rich_names_the_extra_in_one_line() -> None:
    for argv in ([], ["--help"], ["demo", "--yes"], ["inbox"]):
        _says_which_extra(_run(f"from handrail.cli import main\nsys.exit(main({argv!r}))"))


def test_python_m_handrail_without_rich_names_the_extra_in_one_line() -> None:
    as_python_m = (
        "import runpy\nsys.argv = ['handrail', 'demo']\nrunpy.run_module('handrail', run_name='__main__')"
    )
    _says_which_extra(_run(as_python_m))


def test_the_map_in_cli_init_names_every_module_of_the_cli() -> None:
    import handrail.cli

    mapped = set(re.findall(r"\b(\w+)\.py\b", handrail.cli.__doc__ or ""))
    modules = {path.stem for path in (SRC / "cli").glob("*.py")} - {"__init__", "__main__"}
    assert mapped == modules, (sorted(modules - mapped), sorted(mapped - modules))
