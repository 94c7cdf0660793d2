"""rollout_func's calling contract with sampling on (docs/agents.md): one row per sample, a completion per row.

GRPOTrainer hands a rollout_func `num_generations` consecutive copies of each prompt, and TRL's docs let it rely on
that. AdaGRPOTrainer hands it a round's rows: whole runs of `round_repeat` copies (a multiple of num_generations by
default), Est's N_x, budget top-ups. A function written against GRPO's grouping keeps working where the runs are
multiples of num_generations, and where they are not, the mistake is caught before anything is scored: a count
error, or completions placed on another prompt's rows.
"""

import pytest
from transformers import AutoTokenizer

from tests.helpers.data import make_recording_reward, pass_rate_dataset
from tests.helpers.trainers import tiny_args
from trl_ada import AdaGRPOTrainer


# lock_only: the contract is ours, over TRL 1.16 (the same in every CI set).
pytestmark = [pytest.mark.slow, pytest.mark.lock_only]


def grouped_rollout_func(tokenizer, n, calls):
    """Written against GRPOTrainer's grouping: one request per `prompts[::n]`, n completions each (as TRL's own vLLM
    server mode asks), so it is right exactly when a call's rows come in aligned runs of n copies of a prompt."""

    def rollout_func(prompts, trainer):
        calls.append(len(prompts))
        prompt_ids, completion_ids = [], []
        for prompt in prompts[::n]:
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
            for k in range(n):
                prompt_ids.append(ids)
                completion_ids.append(tokenizer.encode(str(k), add_special_tokens=False) + [tokenizer.eos_token_id])
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    return rollout_func


def train(tiny_model, tmp_path, **config):
    calls = []
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    trainer = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        rollout_func=grouped_rollout_func(tokenizer, 4, calls),
        train_dataset=pass_rate_dataset([0.0, 1.0], repeat=1),
        args=tiny_args(tmp_path, per_device_train_batch_size=8, max_steps=3, **config),
    )
    trainer.train()
    return trainer, calls


def test_grpo_grouped_rollout_func_works_in_the_rounds(tiny_model, tmp_path):
    """Rounds of round_repeat=8 (two runs of 4 per prompt): a GRPO-grouped function gets what it expects."""
    trainer, calls = train(tiny_model, tmp_path)
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 3 and calls[0] == 16 and all(c % 4 == 0 for c in calls)
    assert sum(calls) == sum(h["sampling/total_samples"] for h in logs)


def test_a_misplaced_completion_is_refused_before_it_is_scored(tiny_model, tmp_path):
    """Est gives the two prompts unequal N_x once they are remembered (step 2): the same function then puts
    completions of the first prompt on the second prompt's rows, with the right count. Refused, naming the fix."""
    with pytest.raises(ValueError, match="same prompt_ids for row 0 and row") as error:
        train(tiny_model, tmp_path, reinforce_ada_est=True)
    assert "one completion per row" in str(error.value) and "docs/agents.md" in str(error.value)


def test_a_short_count_is_refused_naming_the_contract(tiny_model, tmp_path):
    """round_repeat=6 is not a multiple of num_generations=4: `prompts[::4]` of 2 x 6 rows asks 3 x 4 = 12 for 12
    rows, but the second request straddles the two prompts: caught as a misplacement or, with other counts, as a
    count error; either way before any completion is scored."""
    with pytest.raises((ValueError, RuntimeError), match="rollout_func"):
        train(tiny_model, tmp_path, round_repeat=6)
