"""``python -m handrail``: the ``handrail`` command, for when its script is not on the PATH."""

import sys

from handrail.cli import main

if __name__ == "__main__":
    sys.exit(main())
