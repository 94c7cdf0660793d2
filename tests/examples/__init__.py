"""Tests of trl_ada.examples: the packaged real model and the offline tasks."""
