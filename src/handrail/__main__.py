"""``python -m handrail``: the ``handrail`` command."""

import sys

from handrail.cli import main

sys.exit(main())
