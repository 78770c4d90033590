#!/usr/bin/env bash
# Create bench/.venv-langgraph-server: LangGraph's own API server (`langgraph dev`, the
# in-memory runtime) and LangChain, for bench/service.py. A separate interpreter on
# purpose: none of these packages is a dependency of handrail, and handrail is not
# installed in it. py-spy is there for `bench/service.py --profile`.
#
#   bash bench/setup_langgraph_server.sh          # create or update the venv
#   PYTHON=python3.12 bash bench/setup_langgraph_server.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${LANGGRAPH_SERVER_VENV:-$here/.venv-langgraph-server}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet \
    "langgraph-cli[inmem]==0.4.40" \
    "langgraph-api==0.16.7" \
    "langgraph-runtime-inmem==0.36.7" \
    "langgraph==1.2.24" \
    "langchain==1.5.2" \
    "py-spy"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
for name in ("langgraph-cli", "langgraph-api", "langgraph-runtime-inmem", "langgraph",
             "langchain", "langchain-core", "uvicorn", "uvloop"):
    print(f"{name}=={version(name)}")
PY
