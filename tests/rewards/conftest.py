"""Make sure `import rewards` finds the package, not this test folder.

Under pytest's default import mode the tests/ folder can land on sys.path, and tests/rewards (no
__init__.py) would then shadow the real package as an empty namespace package.  Putting the repo
root first and importing the package here pins the real one in sys.modules for every test.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
_cached = sys.modules.get("rewards")
if _cached is not None and getattr(_cached, "__file__", None) is None:
    del sys.modules["rewards"]  # a namespace package picked up from tests/
import rewards  # noqa: E402,F401
