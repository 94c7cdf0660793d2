"""The checks of our benchmark scripts and studies (`make test-benchmarks`, the last part of `make test`): not the
product's suite, whose fixtures and helpers they share."""

from tests.conftest import smollm2, tiny_model  # noqa: F401
