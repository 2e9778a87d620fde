"""Entry point for ``python -m eval``; ``python -m eval code ...`` is the code-agent eval (eval/code.py)."""

import sys

if len(sys.argv) > 1 and sys.argv[1] == "code":
    from eval.code import main as code_main

    sys.exit(code_main(sys.argv[2:]))

from eval.cli import main  # noqa: E402

sys.exit(main())
