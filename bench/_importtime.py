"""Time one import in this fresh interpreter (stdlib only: runs in either venv).

``compare_langgraph.py`` starts it once a sample, ``import handrail`` in handrail's venv
and ``import langchain.agents`` in the reference venv::

    .venv/bin/python bench/_importtime.py handrail

It prints one JSON line: the seconds of the import (``time.perf_counter()`` around it),
and which of :data:`HEAVY` (``checked``) are in ``sys.modules`` after it (``loaded``).
Only ``sys`` and ``time`` (built in) are imported before it, so it finds nothing else
loaded for it.
"""

import sys
import time

HEAVY = ("rich", "zstandard", "psycopg", "openai", "anthropic", "pydantic")


def main(name: str) -> None:
    start = time.perf_counter()
    __import__(name)
    seconds = time.perf_counter() - start
    loaded = [module for module in HEAVY if module in sys.modules]
    import json

    print(json.dumps({"module": name, "seconds": seconds, "loaded": loaded, "checked": list(HEAVY)}))


if __name__ == "__main__":
    main(sys.argv[1])
