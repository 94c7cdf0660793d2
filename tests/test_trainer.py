"""End to end on the tiny offline model, one process: the real AdaGRPOTrainer inside the real TRL."""

import math

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from tests.helpers.data import extra_column_mismatches, hash_reward_value, make_recording_reward, pass_rate_dataset
from tests.helpers.trainers import Recorder, decode_groups, tiny_args
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer


pytestmark = pytest.mark.slow


def test_adaptive_training_end_to_end(tiny_model, tmp_path):
    reward = make_recording_reward()
    rates = [0.0, 1.0, 0.5, 0.25]  # hard, easy, mixed, mostly wrong
    trainer = Recorder(
        model=tiny_model, reward_funcs=reward, args=tiny_args(tmp_path), train_dataset=pass_rate_dataset(rates)
    )
    trainer.reward_log = reward.log
    before = {k: v.clone() for k, v in trainer.model.named_parameters()}
    trainer.train()

    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.named_parameters())

    # Each generated completion was scored exactly once, and the metrics count them all.
    generated = sum(h["sampling/total_samples"] for h in logs)
    assert len(reward.log) == generated
    assert all(h["sampling/kept_samples"] == 16 and h["sampling/padding_samples"] == 0 for h in logs)
    # The completions table: a reward function's log_extra column stays next to its own (kept) completion.
    assert len(trainer._logs["completion"]) == 16 and extra_column_mismatches(trainer) == 0

    start = 0
    seen = set()
    for end, output in trainer.recorded:
        step_log = reward.log[start:end]
        start = end
        for tag, rate, texts, advantages in decode_groups(trainer, output):
            seen.add(rate)
            pool = [(c, r) for p, c, r in step_log if p.startswith(tag + " ")]
            assert len(pool) % 8 == 0 and 8 <= len(pool) <= 32  # whole rounds of round_repeat
            pool_rewards = [r for _, r in pool]
            rewards = [hash_reward_value(t, rate) for t in texts]
            num_pos = sum(pool_rewards)
            # Advantages are the pooled formula, from the whole pool.
            assert advantages == pytest.approx([r - num_pos / len(pool) for r in rewards], abs=1e-6)
            if num_pos >= 2 and len(pool) - num_pos >= 2:  # met the balanced exit rule: ++-- , earliest first
                assert rewards == [1.0, 1.0, 0.0, 0.0]
                assert texts[:2] == [c for c, r in pool if r == 1.0][:2]
                assert texts[2:] == [c for c, r in pool if r == 0.0][:2]
                # ... and it stopped sampling in the first round where that was true.
                first_ok = next(k for k in range(8, len(pool) + 1, 8) if 2 <= sum(pool_rewards[:k]) <= k - 2)
                assert first_ok == len(pool)
            else:
                assert len(pool) == 32  # never dropped: sampled all max_rounds, then the fallback group
            if rate == 0.0:
                assert rewards == [0.0] * 4 and advantages == [0.0] * 4
            if rate == 1.0:
                assert rewards == [1.0] * 4 and advantages == [0.0] * 4
    assert seen == set(rates)


def test_adaptive_off_is_exactly_grpo(tiny_model, tmp_path):
    dataset = pass_rate_dataset([0.5, 0.25])
    common = dict(
        output_dir=str(tmp_path / "o"),
        num_generations=4,
        per_device_train_batch_size=8,
        max_completion_length=10,
        use_cpu=True,
        report_to="none",
        shuffle_dataset=False,
        seed=0,
    )
    ada = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        train_dataset=dataset,
        args=AdaGRPOConfig(multiround_adaptive_downsampling=False, **common),
    )
    grpo = GRPOTrainer(
        model=tiny_model, reward_funcs=make_recording_reward(), train_dataset=dataset, args=GRPOConfig(**common)
    )
    batch = [dataset[i // 4] for i in range(8)]
    outputs = []
    for trainer in (ada, grpo):
        trainer.model.train()
        torch.manual_seed(123)
        outputs.append(trainer._generate_and_score_completions([dict(row) for row in batch]))
    assert torch.equal(outputs[0]["completion_ids"], outputs[1]["completion_ids"])
    assert torch.equal(outputs[0]["advantages"], outputs[1]["advantages"])
    assert outputs[0]["advantages"].abs().sum() > 0


@pytest.mark.parametrize("estimator", ["reinforce_rej", "raft", "grpo"])
def test_other_estimators_on_the_kept_group(tiny_model, tmp_path, estimator):
    reward = make_recording_reward()
    trainer = Recorder(
        model=tiny_model,
        reward_funcs=reward,
        train_dataset=pass_rate_dataset([0.5, 1.0, 0.0, 0.3]),
        args=tiny_args(tmp_path, max_steps=1, advantage_estimator=estimator),
    )
    trainer.reward_log = reward.log
    trainer.train()
    ((_, output),) = trainer.recorded
    for _, rate, texts, advantages in decode_groups(trainer, output):
        rewards = [hash_reward_value(t, rate) for t in texts]
        if estimator == "reinforce_rej":
            expected = rewards if len(set(rewards)) > 1 else [0.0] * 4
        elif estimator == "raft":
            expected = rewards
        else:  # TRL's group statistics: (r - mean) / (std + 1e-4)
            t = torch.tensor(rewards)
            expected = ((t - t.mean()) / (t.std() + 1e-4)).tolist()
        assert advantages == pytest.approx(expected, abs=1e-5)


def test_positive_focused_keeps_one_positive_when_that_is_all_there_is(tiny_model, tmp_path):
    reward = make_recording_reward()
    trainer = Recorder(
        model=tiny_model,
        reward_funcs=reward,
        train_dataset=pass_rate_dataset([0.1, 1.0]),
        args=tiny_args(tmp_path, max_steps=1, per_device_train_batch_size=8, reinforce_ada_choice="positive-focused"),
    )
    trainer.reward_log = reward.log
    trainer.train()
    ((end, output),) = trainer.recorded
    for tag, rate, texts, advantages in decode_groups(trainer, output):
        pool = [r for p, _, r in reward.log if p.startswith(tag + " ")]
        rewards = [hash_reward_value(t, rate) for t in texts]
        if rate == 1.0:  # exits in round 1 with 8 positives: a uniform group of 4, no signal
            assert len(pool) == 8 and rewards == [1.0] * 4 and advantages == [0.0] * 4
        elif 1.0 in pool:  # stopped in the first round with a positive: 1 positive, 3 negatives
            assert rewards == [1.0, 0.0, 0.0, 0.0]
            assert sum(pool[:-8]) == 0


def test_lora_num_iterations_and_kl(tiny_model, tmp_path):
    from peft import LoraConfig

    trainer = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        train_dataset=pass_rate_dataset([0.5, 0.3]),
        args=tiny_args(tmp_path, per_device_train_batch_size=8, num_iterations=2, beta=0.1, max_steps=4),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    lora_before = {k: v.clone() for k, v in trainer.model.named_parameters() if "lora_B" in k}
    base_before = {k: v.clone() for k, v in trainer.model.named_parameters() if "base_layer" in k}
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 4 and all(math.isfinite(h["loss"]) and math.isfinite(h["kl"]) for h in logs)
    params = dict(trainer.model.named_parameters())
    assert any(not torch.equal(v, params[k]) for k, v in lora_before.items())
    assert all(torch.equal(v, params[k]) for k, v in base_before.items())
    # num_iterations=2: one generation batch serves two optimizer steps.
    assert sum("sampling/total_samples" in h for h in logs) == 2


def test_resume_from_checkpoint(tiny_model, tmp_path):
    dataset = pass_rate_dataset([0.5, 0.3])
    first = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        train_dataset=dataset,
        args=tiny_args(tmp_path, per_device_train_batch_size=8, save_strategy="steps", save_steps=2, max_steps=2),
    )
    first.train()
    assert (tmp_path / "out" / "checkpoint-2").is_dir()
    second = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        train_dataset=dataset,
        args=tiny_args(tmp_path, per_device_train_batch_size=8, max_steps=3),
    )
    second.train(resume_from_checkpoint=True)
    assert second.state.global_step == 3
    steps = [h["step"] for h in second.state.log_history if "loss" in h]
    assert steps == [1, 2, 3]  # the history before the checkpoint is restored, then step 3 runs


def test_needs_an_ada_config(tiny_model, tmp_path):
    with pytest.raises(TypeError, match="AdaGRPOConfig"):
        AdaGRPOTrainer(
            model=tiny_model,
            reward_funcs=make_recording_reward(),
            args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none"),
        )


def test_default_config_when_args_are_omitted(tiny_model, tmp_path, monkeypatch):
    # A drop-in for GRPOTrainer, which builds GRPOConfig("<model>-GRPO") when args is omitted.
    monkeypatch.chdir(tmp_path)  # the default output folder is relative
    dataset = pass_rate_dataset([0.5], repeat=8)
    # TRL's default config asks for bf16, which TrainingArguments refuses on a machine without a GPU: both
    # trainers fail the same way there (proof that AdaGRPOTrainer got as far as GRPOTrainer, not a TypeError) ...
    errors = []
    for trainer_class in (GRPOTrainer, AdaGRPOTrainer):
        with pytest.raises(ValueError) as error:
            trainer_class(model=tiny_model, reward_funcs=make_recording_reward(), train_dataset=dataset)
        errors.append(str(error.value))
    assert errors[0] == errors[1] and "bf16" in errors[0]
    # ... and with that check passed as on a GPU machine (bf16 autocast also runs on a CPU), both build a default.
    import transformers.training_args

    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    trainer = AdaGRPOTrainer(model=tiny_model, reward_funcs=make_recording_reward(), train_dataset=dataset)
    grpo = GRPOTrainer(model=tiny_model, reward_funcs=make_recording_reward(), train_dataset=dataset)
    assert type(trainer.args) is AdaGRPOConfig and trainer.args.output_dir == "model-AdaGRPO"
    assert grpo.args.output_dir == "model-GRPO"
    defaults = AdaGRPOConfig("x")
    assert trainer.args.multiround_adaptive_downsampling == defaults.multiround_adaptive_downsampling
    assert (
        trainer.args.reinforce_ada_choice == "balanced" and trainer.args.num_generations == grpo.args.num_generations
    )


def test_the_model_card_cites_reinforce_ada(tiny_model, tmp_path):
    trainer = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        args=tiny_args(tmp_path),
        train_dataset=pass_rate_dataset([0.5]),
    )
    trainer.create_model_card()
    card = (tmp_path / "out" / "README.md").read_text()
    assert "2510.04996" in card and "Reinforce-Ada: An Adaptive Sampling Framework" in card and "AdaGRPO" in card


def test_adaptive_rounds_take_an_iterable_dataset(tiny_model, tmp_path):
    """Adaptive rounds and prompt memory work on a stream; refills (dynamic sampling, budget) need an index."""
    reward = make_recording_reward()
    stream = pass_rate_dataset([0.0, 0.5]).to_iterable_dataset()
    trainer = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=reward,
        train_dataset=stream,
        args=tiny_args(tmp_path, per_device_train_batch_size=8, prompt_memory=True),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and len(reward.log) == sum(h["sampling/total_samples"] for h in logs) > 16
    with pytest.raises(ValueError, match="map-style datasets.Dataset"):
        AdaGRPOTrainer(
            model=tiny_model,
            reward_funcs=reward,
            train_dataset=stream,
            args=tiny_args(tmp_path, per_device_train_batch_size=8, dynamic_sampling=True),
        )


@pytest.mark.parametrize("resume", ["path", "latest"])
def test_a_damaged_checkpoint_is_named_when_train_resumes_from_python(tiny_model, tmp_path, resume):
    """`trainer.train(resume_from_checkpoint=...)` (a path, or True: the latest) checks the checkpoint before any
    library reads it: weights cut short are named with their file, not safetensors' bare "incomplete metadata"."""
    args = tiny_args(tmp_path, max_steps=1, save_strategy="steps", save_steps=1)
    first = AdaGRPOTrainer(
        model=tiny_model, reward_funcs=make_recording_reward(), args=args, train_dataset=pass_rate_dataset([0.5])
    )
    first.train()
    weights = tmp_path / "out" / "checkpoint-1" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    again = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        args=tiny_args(tmp_path, max_steps=2),
        train_dataset=pass_rate_dataset([0.5]),
    )
    with pytest.raises(ValueError, match=f"{weights}: not a complete safetensors file"):
        again.train(resume_from_checkpoint=str(weights.parent) if resume == "path" else True)
