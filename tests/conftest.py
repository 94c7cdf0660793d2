"""Shared fixtures: the tiny offline model and a deterministic reward with easy, hard and mixed prompts."""

import os
import zlib

import pytest
import yaml
from datasets import Dataset

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from trl_ada.data import make_prompt  # noqa: E402
from trl_ada.examples.tiny import build_tiny_model  # noqa: E402


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


def hash_reward_value(text: str, pass_rate: float) -> float:
    """1 with 'probability' pass_rate over completions, as a deterministic function of the completion text."""
    return 1.0 if zlib.crc32(text.encode()) % 1000 / 1000 < pass_rate else 0.0


EXTRA_COLUMN = "completion_crc"


def extra_value(text: str) -> int:
    return zlib.crc32(text.encode())


def extra_column_mismatches(trainer) -> int:
    """Rows of the completions table whose log_extra value was not computed from the completion next to it."""
    completions = list(trainer._logs["completion"])
    values = list(trainer._logs["extra"][EXTRA_COLUMN])
    assert len(values) == len(completions) > 0
    return sum(extra_value(c[0]["content"]) != v for c, v in zip(completions, values))


def make_recording_reward():
    """A real reward function (TRL calls it like any other) that records every (prompt, completion, reward)."""
    log = []

    def hash_reward(prompts, completions, pass_rate, log_extra=None, **kwargs):
        rewards = [hash_reward_value(c[0]["content"], p) for c, p in zip(completions, pass_rate)]
        log.extend((p[-1]["content"], c[0]["content"], r) for p, c, r in zip(prompts, completions, rewards))
        if log_extra is not None:  # a completions-table column that must stay next to its own completion
            log_extra(EXTRA_COLUMN, [extra_value(c[0]["content"]) for c in completions])
        return rewards

    hash_reward.log = log
    return hash_reward


def pass_rate_dataset(rates, repeat=8):
    """Prompt i has pass rate rates[i % len(rates)]; the prompt text names it so tests can find it again."""
    rows = [{"prompt": make_prompt(f"q{i} r{rates[i % len(rates)]}"), "pass_rate": rates[i % len(rates)]}
            for i in range(len(rates) * repeat)]
    return Dataset.from_list(rows)


def small_tiny_recipe(tmp_path, **overrides) -> str:
    """The demo's recipe (recipes/tiny/ada_balance.yaml) at toy size: 2 prompts per step; returns its path."""
    from trl_ada.cli.demo import DEFAULT_RECIPE

    with open(DEFAULT_RECIPE) as f:
        recipe = yaml.safe_load(f)
    recipe.update(per_device_train_batch_size=8, synthetic_num_examples=64, **overrides)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)
