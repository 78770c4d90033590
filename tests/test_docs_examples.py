"""Run every Python example in README.md and docs/*.md, so the docs cannot drift.

Conventions for fenced code blocks in the docs:

``` ```python ```
    Runnable. The block is executed on its own: in a fresh module namespace, with an
    empty temporary directory as the working directory. It must not need a network, an
    API key or a database (use ``ScriptedModel`` instead of a real model).

``` ```python no-run ```
    Shown but not run (a real model, Postgres, a server). It is still compiled, so it
    must be valid Python.

``` ```python service ```
    Run against a real ``handrail serve`` by ``tests/server/test_docs_service_examples.py``
    (with ``TOKEN`` given and ``URL`` pointed at the service); here it is only compiled.

``` ```python xfail: REASON ```
    Runnable, but it shows behaviour that SPEC.md promises and the code does not have
    yet. It runs as a strict xfail: once the code is fixed the test fails and asks for
    the marker to be removed.

Expected output: comment lines starting with ``# -> `` list, in order, the lines the
block prints. When a block has any, its standard output must match them line for line;
``...`` inside an expected line matches any text (use it for ids and timestamps). A
block without ``# -> `` lines is only checked to run without error.

Any other fence (```text, ```bash, ```toml, ...) is ignored. Relative links between the
pages must point at files that exist (pages that other people are still writing are
listed in ``PAGES_BEING_WRITTEN``).
"""

from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Linked from docs/index.md before they exist; a link to one is fine while it is missing.
PAGES_BEING_WRITTEN: set[str] = set()

_FENCE = re.compile(r"^(?P<indent>[ ]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_EXPECTED = re.compile(r"^\s*# -> ?(?P<line>.*)$")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int  # 1-based line of the opening fence
    marker: str  # "", "no-run" or "xfail: REASON"
    source: str

    @property
    def label(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _examples(page: Path) -> list[Example]:
    found: list[Example] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        info = opening["info"].strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        language, _, marker = info.partition(" ")
        if language == "python":
            found.append(Example(page, i + 1, marker.strip(), "\n".join(body) + "\n"))
        i = j + 1
    return found


EXAMPLES = [example for page in PAGES if page.exists() for example in _examples(page)]


def _expected_output(source: str) -> list[str]:
    return [m["line"] for m in map(_EXPECTED.match, source.splitlines()) if m is not None]


def _matches(expected: str, actual: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, actual) is not None


def _run(example: Example) -> None:
    code = compile(example.source, example.label, "exec")
    name = f"docs_example_{abs(hash(example.label))}"
    module = types.ModuleType(name)
    module.__file__ = example.label
    sys.modules[name] = module  # so typing.get_type_hints can resolve the block's names
    try:
        exec(code, module.__dict__)
    finally:
        del sys.modules[name]


def _check_output(example: Example, printed: str) -> None:
    expected = _expected_output(example.source)
    if not expected:
        return
    actual = printed.splitlines()
    mismatch = len(actual) != len(expected) or not all(map(_matches, expected, actual))
    if mismatch:
        pytest.fail(
            f"{example.label}: the block printed something other than its '# -> ' lines\n"
            "expected:\n" + "\n".join(f"    {line}" for line in expected) + "\n"
            "printed:\n" + "\n".join(f"    {line}" for line in actual),
            pytrace=False,
        )


def test_there_are_examples() -> None:
    assert len(EXAMPLES) > 20, "the docs lost their examples, or the extractor broke"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.label)
def test_example(
    example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    if example.marker in ("no-run", "service"):
        compile(example.source, example.label, "exec")
        return
    if example.marker.startswith("xfail:"):
        reason = example.marker.removeprefix("xfail:").strip()
        try:
            _run(example)
        except Exception:
            pytest.xfail(f"known gap between SPEC.md and the code: {reason}")
        pytest.fail(
            f"{example.label} now runs: the gap it documents ({reason}) is fixed. "
            "Remove the 'xfail:' marker from its fence.",
            pytrace=False,
        )
    if example.marker:
        pytest.fail(
            f"{example.label}: unknown marker {example.marker!r} after ```python; "
            "use nothing, 'no-run' or 'xfail: REASON'",
            pytrace=False,
        )
    _run(example)
    _check_output(example, capsys.readouterr().out)


_LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", [p for p in PAGES if p.exists()], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for match in _LINK.finditer(page.read_text(encoding="utf-8")):
        target = match["target"]
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        resolved = (page.parent / target).resolve()
        relative = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else target
        if not resolved.exists() and relative not in PAGES_BEING_WRITTEN:
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"
