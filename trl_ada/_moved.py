"""Old module paths, from before the package was split into `core`, `integration`, `cli` and `examples`.

Each old path (`trl_ada/sampling.py`, ...) is a two-line module: importing it warns with the new path and gives the new
module itself (the same objects, so `isinstance` and monkeypatching behave), as TRL deprecates a moved module.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType


def alias(old: str, new: str) -> ModuleType:
    """Make `old` an alias of the module `new` (importing it), with a FutureWarning naming the new path."""
    warnings.warn(f"`{old}` moved to `{new}`: import it from there; the old path will be removed in a later release.",
                  FutureWarning, stacklevel=3)
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module


def run_moved(old: str, new: str) -> None:
    """`python -m old`: warn, then run the new module's command."""
    module = alias(old, new)
    sys.modules.pop(old, None)  # only `python -m` ran it; an import of `old` later warns again
    raise SystemExit(module.main())
