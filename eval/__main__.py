"""Entry point for ``python -m eval``; ``python -m eval code ...`` is the code-agent eval (eval/code.py)."""

import sys

from eval.cli import main

sys.exit(main())
