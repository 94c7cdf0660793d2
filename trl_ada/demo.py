"""Moved to `trl_ada.cli.demo`; this old path warns and imports it."""

from trl_ada._moved import alias, run_moved

if __name__ == "__main__":
    run_moved("trl_ada.demo", "trl_ada.cli.demo")
else:
    alias(__name__, "trl_ada.cli.demo")
