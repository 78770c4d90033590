#!/usr/bin/env bash
# Create bench/.venv-reference: LangChain/LangGraph and their savers, for the side-by-side
# benchmark (bench/compare_langgraph.py). It is a separate interpreter on purpose: none of
# these packages is a dependency of handrail, and handrail is not installed in it.
#
#   bash bench/setup_reference.sh            # create or update the venv
#   PYTHON=python3.12 bash bench/setup_reference.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${REFERENCE_VENV:-$here/.venv-reference}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet \
    "langchain==1.5.2" \
    "langgraph==1.2.24" \
    "langgraph-checkpoint-sqlite" \
    "langgraph-checkpoint-postgres" \
    "aiosqlite" \
    "psycopg[binary]" \
    "psycopg-pool" \
    "matplotlib" \
    "py-spy"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
for name in ("langchain", "langchain-core", "langgraph", "langgraph-checkpoint",
             "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres", "psycopg"):
    print(f"{name}=={version(name)}")
PY
