"""The test suite, laid out like the package: core/, integration/, cli/, examples/, packaging/, benchmarks/; the
trainer, config and rewards tests at the top, beside the conftest; shared helpers in tests.helpers."""
