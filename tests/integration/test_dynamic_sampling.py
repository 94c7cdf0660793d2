"""Dynamic sampling, prompt refill and prompt memory in the real trainer, one process (tests/integration/test_multiprocess.py has
two): trains only on groups with signal, honours the cap, counts every completion, survives a resume exactly."""

import json
import math
import os

import numpy as np
import pytest
from datasets import Dataset

from tests.helpers.data import hash_reward_value, make_recording_reward, pass_rate_dataset
from tests.helpers.trainers import Recorder, decode_groups, tiny_args
from trl_ada import AdaGRPOTrainer
from trl_ada.core.memory import prompt_key


pytestmark = pytest.mark.slow
# Pass rates: an easy and a hard prompt, never with signal (all samples agree), and two that usually have it.
MIXED = [1.0, 0.0, 0.5, 0.3]


def train(tiny_model, tmp_path, rates, repeat=8, **kwargs):
    reward = make_recording_reward()
    trainer = Recorder(
        model=tiny_model,
        reward_funcs=reward,
        train_dataset=pass_rate_dataset(rates, repeat=repeat),
        args=tiny_args(tmp_path, **{"per_device_train_batch_size": 8, **kwargs}),
    )
    trainer.reward_log = reward.log
    trainer.train()
    return trainer, reward, [h for h in trainer.state.log_history if "loss" in h]


@pytest.mark.parametrize("adaptive", [False, True])
def test_dynamic_sampling_trains_only_on_groups_with_signal(tiny_model, tmp_path, adaptive):
    # Two prompts per step; easy (1.0) and hard (0.0) prompts never have signal, the 0.5 and 0.3 ones usually do.
    trainer, reward, logs = train(
        tiny_model, tmp_path, MIXED, max_steps=3, dynamic_sampling=True, multiround_adaptive_downsampling=adaptive
    )
    assert len(logs) == 3
    for end_output in trainer.recorded:
        for _, rate, texts, advantages in decode_groups(trainer, end_output[1]):
            rewards = [hash_reward_value(t, rate) for t in texts]
            assert len(set(rewards)) == 2 and rate in (0.5, 0.3)  # every trained group has both classes
            assert any(abs(a) > 0 for a in advantages)
    # Every generated completion, dropped or kept, was scored once and is counted.
    assert len(reward.log) == sum(h["sampling/total_samples"] for h in logs)
    for h in logs:
        assert h["sampling/groups_without_signal"] == 0 and h["sampling/effective_prompt_ratio"] == 1.0
        assert h["sampling/prompts_drawn"] == 2 + h["sampling/prompts_dropped"] and h["sampling/refill_batches"] >= 0
        per_prompt = 4 if not adaptive else None
        if per_prompt:  # DAPO exactly: n i.i.d. samples per drawn prompt
            assert h["sampling/total_samples"] == 4 * h["sampling/prompts_drawn"]
    assert sum(h["sampling/refill_batches"] for h in logs) > 0  # the hard and easy prompts had to be replaced
    # Refills come from the training set in the stream's order (unshuffled here: 0, 1, 2, ...), the same prompts
    # a resumed or parallel run draws.
    assert trainer.sampling_state.refill.state_dict()["drawn"] == sum(h["sampling/prompts_dropped"] for h in logs)


def test_steps_per_generation_above_one(tiny_model, tmp_path):
    # One generation batch of 2 prompts serves 2 optimizer steps of 1 group each.
    trainer, reward, logs = train(
        tiny_model,
        tmp_path,
        MIXED,
        max_steps=4,
        dynamic_sampling=True,
        per_device_train_batch_size=4,
        steps_per_generation=2,
        multiround_adaptive_downsampling=False,
    )
    assert len(logs) == 4 and len(trainer.recorded) == 2
    for _, output in trainer.recorded:
        groups = decode_groups(trainer, output)
        assert len(groups) == 2 and all(
            len({hash_reward_value(t, r) for t in texts}) == 2 for _, r, texts, _ in groups
        )


def test_cap_is_honoured_and_training_goes_on(tiny_model, tmp_path):
    trainer, reward, logs = train(
        tiny_model,
        tmp_path,
        [0.0],
        repeat=16,
        max_steps=2,
        dynamic_sampling=True,
        max_refill_batches=2,
        multiround_adaptive_downsampling=False,
    )
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    for h in logs:  # nothing has signal: 2 refills of a whole batch each, then train on 2 uniform groups
        assert h["sampling/refill_batches"] == 2 and h["sampling/groups_without_signal"] == 2
        assert h["sampling/prompts_drawn"] == 6 and h["sampling/total_samples"] == 24
    assert len(reward.log) == 48


def test_adaptive_and_dynamic_drop_only_what_rounds_cannot_resolve(tiny_model, tmp_path):
    # positive_focused resolves a 0.3 prompt in the rounds; 1.0 exits with a uniform group and is dropped.
    trainer, reward, logs = train(
        tiny_model, tmp_path, [1.0, 0.3], max_steps=2, dynamic_sampling=True, reinforce_ada_choice="positive_focused"
    )
    for _, output in trainer.recorded:
        assert {rate for _, rate, _, _ in decode_groups(trainer, output)} == {0.3}
    assert all(h["sampling/prompts_dropped"] >= 1 for h in logs)


def test_budget_caps_every_step_and_screens_out_remembered_extremes(tiny_model, tmp_path):
    # 4 distinct prompts, 2 per step, 8 steps: every prompt is seen in the first 2 steps, then the memory knows that
    # the 1.0 and 0.0 prompts come back uniform.
    trainer, reward, logs = train(
        tiny_model, tmp_path, MIXED, repeat=1, max_steps=8, sampling_budget=6.0, prompt_memory=True
    )
    assert len(logs) == 8
    for h in logs:  # the hard cap: 6 per trained prompt, everything generated included
        assert h["sampling/total_samples"] + h["sampling/padding_samples"] <= 6 * 2
        assert h["sampling/kept_samples"] == 8
    assert len(reward.log) == sum(h["sampling/total_samples"] for h in logs)  # each completion scored once
    assert sum(h["sampling/prompts_skipped"] for h in logs[:2]) == 0  # nothing is remembered yet
    assert sum(h["sampling/prompts_skipped"] for h in logs[2:]) >= 6
    trained = [rate for _, output in trainer.recorded[2:] for _, rate, _, _ in decode_groups(trainer, output)]
    assert sum(rate in (0.5, 0.3) for rate in trained) >= 0.75 * len(trained)
    # Top-ups went to groups whose first 4 samples agreed: no pool beyond 4 samples is mixed within its first 4.
    assert any(h["sampling/top_up_rounds"] > 0 for h in logs)


def test_budget_with_lora_and_steps_per_generation(tiny_model, tmp_path):
    from peft import LoraConfig

    reward = make_recording_reward()
    trainer = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=reward,
        train_dataset=pass_rate_dataset(MIXED, repeat=1),
        args=tiny_args(
            tmp_path,
            per_device_train_batch_size=4,
            steps_per_generation=2,
            max_steps=4,
            sampling_budget=5.0,
            prompt_memory=True,
        ),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "sampling/total_samples" in h]
    assert len(logs) == 2 and all(h["sampling/total_samples"] <= 10 for h in logs)


def memory_run(tiny_model, tmp_path, **kwargs):
    return AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        train_dataset=pass_rate_dataset([1.0, 0.0, 0.5, 0.2], repeat=1),  # 4 prompts, 2 per step: revisited
        args=tiny_args(
            tmp_path,
            **{
                "per_device_train_batch_size": 8,
                "prompt_memory": True,
                "dynamic_sampling": True,
                "shuffle_dataset": True,
                **kwargs,
            },
        ),
    )


def test_group_prior_screens_prompts_never_seen_before(tiny_model, tmp_path):
    """64 distinct prompts, 4 per step at GRPO parity: the per-prompt memory has nothing to go on, but after a few
    steps the group prior (column `pass_rate`) knows the 1.0 group comes back uniform and screens its new prompts.
    The per-prompt memory is off: only the group prior can screen."""
    trainer, reward, logs = train(
        tiny_model,
        tmp_path,
        [1.0, 0.5],
        repeat=32,
        max_steps=8,
        per_device_train_batch_size=16,
        sampling_budget=4.0,
        prompt_memory_group_column="pass_rate",
    )
    assert len(logs) == 8 and len(reward.log) == sum(h["sampling/total_samples"] for h in logs)
    assert all(h["sampling/total_samples"] + h["sampling/padding_samples"] <= 16 for h in logs)  # parity holds
    assert logs[0]["sampling/prompts_skipped"] == 0  # no group known yet
    assert logs[-1]["sampling/groups_known"] == 2 and sum(h["sampling/prompts_skipped"] for h in logs[4:]) >= 6
    trained = [rate for _, output in trainer.recorded[4:] for _, rate, _, _ in decode_groups(trainer, output)]
    assert sum(rate == 0.5 for rate in trained) >= 0.75 * len(trained)
    exported = json.loads((tmp_path / "out" / "prompt_groups.json").read_text())
    assert exported["group"] == ["0.5", "1.0"] and exported["pass_rate"][1] > 0.9


def test_a_missing_group_column_is_named(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="prompt_memory_group_column='kind' is not a column of train_dataset"):
        AdaGRPOTrainer(
            model=tiny_model,
            reward_funcs=make_recording_reward(),
            train_dataset=pass_rate_dataset([0.5]),
            args=tiny_args(
                tmp_path,
                per_device_train_batch_size=8,
                sampling_budget=4.0,
                max_steps=1,
                prompt_memory_group_column="kind",
            ),
        )


@pytest.mark.parametrize(
    "mode",
    [
        {"dynamic_sampling": True},
        {"dynamic_sampling": False, "sampling_budget": 6.0},
        {"dynamic_sampling": False, "sampling_budget": 6.0, "prompt_memory_group_column": "pass_rate"},
    ],
)
def test_memory_and_refill_survive_a_resume_exactly(tiny_model, tmp_path, mode):
    uninterrupted = memory_run(tiny_model, tmp_path / "a", max_steps=4, save_strategy="steps", save_steps=2, **mode)
    uninterrupted.train()
    checkpoint = tmp_path / "a" / "out" / "checkpoint-2"
    assert (checkpoint / "prompt_memory.npz").exists() and (checkpoint / "ada_sampling_state.json").exists()

    resumed = memory_run(tiny_model, tmp_path / "b", max_steps=4, **mode)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    a, b = uninterrupted.prompt_memory.state_dict(), resumed.prompt_memory.state_dict()
    assert len(uninterrupted.prompt_memory) > 0 and max(a["visits"]) >= 2
    assert all(np.array_equal(a[k], b[k]) for k in a)  # the posterior after resume = the uninterrupted one
    assert uninterrupted.sampling_state.refill.state_dict() == resumed.sampling_state.refill.state_dict()
    assert uninterrupted.sampling_state.prompts_drawn == resumed.sampling_state.prompts_drawn
    if "prompt_memory_group_column" in mode:
        assert len(uninterrupted.group_prior) == 4
        assert uninterrupted.group_prior.state_dict() == resumed.group_prior.state_dict()
    # ...and so does the training itself: after the epoch boundary at step 2, TRL's sampler walks the prompts in the
    # uninterrupted order (AdaGRPOTrainer gives it set_epoch), so steps 3 and 4 are the same steps.
    losses = [[h["loss"] for h in run.state.log_history if "loss" in h][-2:] for run in (uninterrupted, resumed)]
    assert losses[0] == losses[1]

    # A resumed run must not silently start from an empty memory.
    fresh = memory_run(tiny_model, tmp_path / "c", max_steps=3, **mode)
    (checkpoint / "prompt_memory.npz").unlink()
    with pytest.raises(FileNotFoundError, match="prompt_memory"):
        fresh.train(resume_from_checkpoint=str(checkpoint))


def test_a_checkpoint_inside_a_generation_batch_resumes_on_its_rest(tiny_model, tmp_path):
    """GRPOTrainer trains each generation batch over steps_per_generation steps: resumed from inside one, a run
    trains on the rest of that batch, as the uninterrupted run does, rather than generating, counting and remembering
    it a second time."""
    mode = dict(steps_per_generation=2, max_steps=4)  # batches generated for steps 1-2 and 3-4
    uninterrupted = memory_run(tiny_model, tmp_path / "a", save_strategy="steps", save_steps=1, **mode)
    uninterrupted.train()
    checkpoint = tmp_path / "a" / "out" / "checkpoint-3"  # inside the second batch
    assert (checkpoint / "ada_generation_buffer_0.pt").exists()
    assert not (tmp_path / "a" / "out" / "checkpoint-2" / "ada_generation_buffer_0.pt").exists()  # at a boundary

    resumed = memory_run(tiny_model, tmp_path / "b", **mode)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    a, b = uninterrupted.prompt_memory.state_dict(), resumed.prompt_memory.state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)  # no prompt visited twice
    counts = [{**run.generation_count.state_dict(), "seconds": None} for run in (uninterrupted, resumed)]
    assert counts[0] == counts[1]  # nor counted twice (the clocks differ: wall time)
    assert uninterrupted.sampling_state.refill.state_dict() == resumed.sampling_state.refill.state_dict()
    assert uninterrupted.sampling_state.prompts_drawn == resumed.sampling_state.prompts_drawn
    losses = [[h["loss"] for h in run.state.log_history if "loss" in h][-1] for run in (uninterrupted, resumed)]
    assert losses[0] == losses[1]  # step 4 trained on the same samples


def test_the_sampling_state_is_in_a_checkpoint_before_trl_writes_its_own(tiny_model, tmp_path):
    """Once TRL's part of a checkpoint is written, transformers deletes older checkpoints (save_total_limit): the
    sampling state must be in it by then, or a run stopped in between has no checkpoint it can resume from."""
    present = []

    class Watching(AdaGRPOTrainer):
        def _save_rng_state(self, output_dir, *args, **kwargs):  # before the trainer state and the rotation
            present.append(sorted(os.listdir(output_dir)))
            return super()._save_rng_state(output_dir, *args, **kwargs)

    saving = dict(save_strategy="steps", save_steps=1, save_total_limit=1)
    args = tiny_args(tmp_path, per_device_train_batch_size=8, prompt_memory=True, dynamic_sampling=True, **saving)
    trainer = Watching(
        model=tiny_model, reward_funcs=make_recording_reward(), train_dataset=pass_rate_dataset([1.0, 0.5]), args=args
    )
    trainer.train()
    assert len(present) == 2
    for files in present:
        assert {"ada_sampling_state.json", "prompt_memory.npz", "ada_generation_count.json"} <= set(files)


def test_memory_learns_the_pass_rates_and_is_exported(tiny_model, tmp_path):
    trainer = memory_run(tiny_model, tmp_path, max_steps=6, dynamic_sampling=False)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert all(0 <= h["sampling/memory_seen_before"] <= 1 for h in logs)
    assert any("sampling/memory_brier" in h for h in logs)
    table = Dataset.from_parquet(str(tmp_path / "out" / "prompt_memory.parquet"))
    assert len(table) == len(trainer.prompt_memory) > 0
    rows = {row["prompt"]: row for row in table}
    assert all(text is not None for text in rows)  # every remembered prompt was found in the training set
    for text, row in rows.items():
        rate = float(text.split()[1][1:])
        assert row["visits"] >= 1 and row["samples"] > 0
        if rate == 1.0:
            assert row["pass_rate"] > 0.8
        if rate == 0.0:
            assert row["pass_rate"] < 0.2
    # The exported hash is the one the trainer keys the prompt by.
    ids = trainer._tokenize([trainer.train_dataset[0]])[0]
    assert f"{prompt_key(ids):016x}" in set(table["prompt_hash"])


def test_dynamic_sampling_needs_an_indexable_dataset(tiny_model, tmp_path):
    stream = pass_rate_dataset([0.5]).to_iterable_dataset()
    with pytest.raises(ValueError, match="sampler=.reinforce_ada. draws replacement prompts by index .* map-style"):
        AdaGRPOTrainer(
            model=tiny_model,
            reward_funcs=make_recording_reward(),
            train_dataset=stream,
            args=tiny_args(tmp_path, per_device_train_batch_size=8, dynamic_sampling=True, max_steps=1),
        )


def test_a_missing_train_dataset_is_named_before_the_model_loads(tmp_path):
    """TRL's own check comes first (not the map-style one), and before anything is loaded (no model there)."""
    args = tiny_args(tmp_path, per_device_train_batch_size=8, sampling_budget=4.0, prompt_memory=True, max_steps=1)
    with pytest.raises(ValueError, match="`train_dataset` is required") as error:
        AdaGRPOTrainer(model=str(tmp_path / "no-model"), reward_funcs=make_recording_reward(), args=args)
    assert "map-style" not in str(error.value)
