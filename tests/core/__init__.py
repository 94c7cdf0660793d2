"""Tests of trl_ada.core: the pure algorithm, exhaustively."""
