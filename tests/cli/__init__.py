"""Tests of trl_ada.cli: the commands as users run them."""
