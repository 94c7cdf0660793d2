"""Moved to `trl_ada.examples.agents`; this old path warns and imports it."""

from trl_ada._moved import alias, run_moved

alias(__name__, "trl_ada.examples.agents")
