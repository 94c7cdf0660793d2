"""Shared fixtures: the tiny offline model and the packaged SmolLM2 (helpers to import: `tests.helpers`)."""

import importlib
import os

import pytest


os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tests.helpers.processes import freeze_loaded_objects  # noqa: E402
from trl_ada.examples.tiny import build_tiny_model  # noqa: E402


importlib.import_module("trl_ada.trainer")  # torch, transformers, accelerate, TRL: what the tests load anyway
freeze_loaded_objects()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    """SmolLM2-135M-Instruct materialised once per worker into a temporary folder (538 MB; tests using it carry
    xdist_group("smollm2") so one worker does it). No skip when the package is missing: `make test` installs it,
    and a missing package must fail CI loudly."""
    from trl_ada.examples.models import materialize

    return materialize("smollm2", str(tmp_path_factory.mktemp("models") / "SmolLM2-135M-Instruct"))
