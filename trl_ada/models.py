"""Moved to `trl_ada.examples.models`; this old path warns and imports it."""

from trl_ada._moved import alias, run_moved

if __name__ == "__main__":
    run_moved("trl_ada.models", "trl_ada.examples.models")
else:
    alias(__name__, "trl_ada.examples.models")
