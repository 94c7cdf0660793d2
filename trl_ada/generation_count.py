"""Moved to `trl_ada.integration.generation_count`; this old path warns and imports it."""

from trl_ada._moved import alias, run_moved

alias(__name__, "trl_ada.integration.generation_count")
