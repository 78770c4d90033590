"""One naming rule for the modules of ``handrail``'s packages (docs/architecture.md,
"Names"): a module that only its own package imports is private and its name starts with
``_``; a module another package imports has a plain name, and so has a module users import
by its path (the documented ones, :data:`DOCUMENTED`). Top-level modules are the
package's own rooms and are left to the layer contract (``test_layers.py``)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

DOCUMENTED = frozenset(
    {
        # import paths the docs and SPEC give users, kept plain whoever imports them
        "handrail.checkpoint.base",
        "handrail.checkpoint.filters",
        "handrail.checkpoint.memory",
        "handrail.checkpoint.seals",
        "handrail.checkpoint.stored",
        "handrail.cli.demo",
        "handrail.cli.terminal",
        "handrail.middleware.human_in_the_loop",
        "handrail.models.anthropic",
        "handrail.models.errors",
        "handrail.models.langchain",
        "handrail.models.openai",
        "handrail.models.scripted",
        "handrail.notify.webhooks",
        "handrail.review.policy_file",
    }
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "handrail").rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _importers(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Which modules import each module (``from x import y`` of a module ``x.y`` counts,
    and so does a module named in a string, as the lazy loaders name them)."""
    importers: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                targets += [base, *(f"{base}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("handrail.")
            ):
                targets.append(node.value.split(":")[0])
            importers.update({t: importers[t] | {name} for t in targets if t in modules and t != name})
    return importers


def _outside(name: str, importers: dict[str, set[str]]) -> set[str]:
    package = name.rsplit(".", 1)[0]
    return {i for i in importers.get(name, set()) if i != package and not i.startswith(package + ".")}


def _package_modules() -> list[tuple[str, Path]]:
    return [
        (name, path)
        for name, path in sorted(_modules().items())
        if name.count(".") >= 2 and path.name not in ("__init__.py", "__main__.py")
    ]


def test_a_private_module_is_imported_only_inside_its_package() -> None:
    importers = _importers(_modules())
    wrong = {
        name: sorted(_outside(name, importers))
        for name, path in _package_modules()
        if path.stem.startswith("_") and _outside(name, importers)
    }
    assert wrong == {}, f"private modules imported from other packages (give them a plain name): {wrong}"


def test_a_module_only_its_package_imports_is_named_private() -> None:
    importers = _importers(_modules())
    plain = [
        name
        for name, path in _package_modules()
        if not path.stem.startswith("_") and name not in DOCUMENTED and not _outside(name, importers)
    ]
    assert plain == [], f"only their own package imports these: name them with a leading _ : {plain}"


def test_every_documented_import_path_exists() -> None:
    assert set(_modules()) >= DOCUMENTED
