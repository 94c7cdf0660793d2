"""Tests of the benchmark scripts and of the GPU kit: they drive the same trainer, on their own sets."""
