"""The `nixl` package NIXL's own examples and tests import (nixl._api,
nixl._bindings, nixl._utils, nixl.logging), served by the package NIXL's
build installs (nixl_cu12), as NIXL's pip meta-package serves it. With this
folder on PYTHONPATH the upstream files run unchanged
(tests/nixl/test_nixl_single_agent.py)."""
import importlib
import sys

for _name in ("_bindings", "_utils", "logging", "_api"):
    _module = importlib.import_module("nixl_cu12." + _name)
    sys.modules[__name__ + "." + _name] = _module
    globals()[_name] = _module

from nixl_cu12 import *  # noqa: E402,F401,F403
