"""``python -m handrail.cli``: the ``handrail`` command, as ``python -m handrail`` runs it."""

import sys

from handrail.cli import main

if __name__ == "__main__":
    sys.exit(main())
