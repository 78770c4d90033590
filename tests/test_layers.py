"""The layer contract (docs/architecture.md): each layer of ``handrail`` imports only the
layers below it, as ``[tool.importlinter]`` in pyproject.toml lists them. An import that
runs up the layers (lazy ones included) fails here, with the chain that does it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_import_runs_up_the_layers() -> None:
    beside = str(Path(sys.executable).parent)
    command = shutil.which("lint-imports", path=beside) or shutil.which("lint-imports")
    assert command is not None, "import-linter is part of the dev extra: pip install -e '.[dev]'"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [command, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "KEPT" in done.stdout


def test_every_top_level_module_and_package_has_a_layer() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = {
        part.strip()
        for contract in config["contracts"]
        for layer in contract["layers"]
        for part in layer.replace(":", "|").split("|")
    }
    package = ROOT / "src" / "handrail"
    found = {
        f"handrail.{path.stem}"
        for path in package.iterdir()
        if (path.suffix == ".py" and path.stem not in ("__init__", "__main__"))
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    assert found - named == set(), f"give these a layer in pyproject.toml: {sorted(found - named)}"
