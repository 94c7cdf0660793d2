"""Deterministic rewards and datasets with known pass rates, and the demo's recipe at toy size."""

import zlib

import yaml
from datasets import Dataset

from trl_ada.data import make_prompt


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
    rows = [
        {"prompt": make_prompt(f"q{i} r{rates[i % len(rates)]}"), "pass_rate": rates[i % len(rates)]}
        for i in range(len(rates) * repeat)
    ]
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
