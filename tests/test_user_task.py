"""A user's own task, as a GRPOTrainer user brings it: their columns, their reward's signature, their mistakes.

What the reward functions receive is compared with what GRPOTrainer itself hands them for the same data; errors
are checked for the field they name and for coming before the model trains."""

import re

import pytest
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from conftest import hash_reward_value
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
from trl_ada.data import make_prompt

BASE = dict(num_generations=4, per_device_train_batch_size=8, max_completion_length=8, learning_rate=1e-2,
            shuffle_dataset=False, use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, seed=0,
            disable_tqdm=True)

# Prompts whose text names their pass rate: always-right and always-wrong ones come back uniform, so dynamic
# sampling and the budget must replace them from the refill stream. `answer` and `level` are extra columns, which
# `remove_unused_columns=True` strips from the dataloader's rows.
RATES = [1.0, 0.0, 0.5, 0.0, 1.0, 0.3]


def dataset(repeat=4):
    return Dataset.from_list([{"prompt": make_prompt(f"q{i} r{RATES[i % len(RATES)]}"), "answer": str(i),
                               "level": i % 3} for i in range(len(RATES) * repeat)])


def keys_reward(calls):
    def reward(prompts, completions, **kwargs):
        calls.append(frozenset(kwargs))
        rates = [float(re.search(r" r([0-9.]+)", p[-1]["content"]).group(1)) for p in prompts]
        return [hash_reward_value(c[0]["content"], rate) for c, rate in zip(completions, rates)]

    return reward


def reward_keys(trainer_class, config_class, tiny_model, tmp_path, **config):
    calls = []
    args = config_class(output_dir=str(tmp_path / "out"), **{**BASE, **config})
    trainer_class(model=tiny_model, reward_funcs=keys_reward(calls), args=args, train_dataset=dataset()).train()
    return calls


SAMPLERS = {
    "balanced-dynamic": dict(reinforce_ada_choice="balanced", round_repeat=4, max_rounds=2, dynamic_sampling=True,
                             max_refill_batches=2),
    "dapo": dict(multiround_adaptive_downsampling=False, dynamic_sampling=True, max_refill_batches=2),
    "budget-memory": dict(sampling_budget=8.0, prompt_memory=True, budget_top_up=2),
    "est": dict(reinforce_ada_est=True),
}


@pytest.mark.slow
@pytest.mark.parametrize("remove", [True, False], ids=["remove_unused_columns", "keep_columns"])
@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_every_row_reaches_the_reward_with_the_keys_grpo_trainer_hands(sampler, remove, tiny_model, tmp_path):
    steps = 10 if sampler == "budget-memory" else 4  # the budget's top-ups mix refilled and dataloader rows later on
    theirs = reward_keys(GRPOTrainer, GRPOConfig, tiny_model, tmp_path / "grpo", max_steps=2,
                         remove_unused_columns=remove)
    assert len(set(theirs)) == 1
    expected = theirs[0]
    assert ("answer" in expected) != remove and "trainer_state" in expected
    ours = reward_keys(AdaGRPOTrainer, AdaGRPOConfig, tiny_model, tmp_path / "ada", max_steps=steps,
                       remove_unused_columns=remove, **SAMPLERS[sampler])
    assert len(ours) > steps or sampler == "est"  # rounds and refills: more calls than steps
    assert set(ours) == {expected}
