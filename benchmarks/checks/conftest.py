"""The checks of our benchmark scripts and studies (`make test-benchmarks`): not the product's suite, which CI runs.
They share its fixtures and helpers."""

from tests.conftest import smollm2, tiny_model  # noqa: F401
