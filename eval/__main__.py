"""Entry point for ``python -m eval``."""

import sys

from eval.cli import main

sys.exit(main())
