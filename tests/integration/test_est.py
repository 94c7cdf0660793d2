"""Reinforce-Ada-Est (trl_ada.core.est): the allocation against a brute-force reference, the advantage, the config's
refusals, and the real trainer end to end (rows per prompt = N_x, advantages, TRL's metrics, the memory, resume)."""

from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.data import hash_reward_value, make_recording_reward, pass_rate_dataset
from tests.helpers.trainers import recording_trainer, tiny_args
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
from trl_ada.core.est import allocate, allocation_metrics, allocation_weights, est_advantages


# ---------------------------------------------------------------------------------------------------------------------
# The allocation: a brute-force reference.


def exact_target(weights, total, low, high):
    """The real-valued allocation clip(c * w, low, high) whose sum is `total`, with c solved exactly: the clipped sum
    is piecewise linear in c, with kinks at low / w and high / w."""
    weights = [Fraction(w) for w in weights]
    high = None if high is None else Fraction(high)

    def clipped(c):
        return [min(max(c * w, low), high) if high is not None else max(c * w, low) for w in weights]

    kinks = sorted({Fraction(low) / w for w in weights} | ({high / w for w in weights} if high is not None else set()))
    previous = Fraction(0)
    for kink in kinks + [kinks[-1] * 2 + total]:
        if sum(clipped(kink)) >= total:  # the root lies in [previous, kink], where the sum is linear
            s0, s1 = sum(clipped(previous)), sum(clipped(kink))
            c = previous if s1 == s0 else previous + (kink - previous) * (total - s0) / (s1 - s0)
            return [float(v) for v in clipped(c)]
        previous = kink
    raise AssertionError("no root")


def closest_integer_allocation_distance(target, total, low, high):
    """Brute force: the least squared distance to `target` of any integer vector in [low, high] summing to `total`."""
    top = total if high is None else high
    best = math.inf
    for counts in itertools.product(range(low, top + 1), repeat=len(target)):
        if sum(counts) == total:
            best = min(best, sum((c - t) ** 2 for c, t in zip(counts, target)))
    return best


@settings(max_examples=150, deadline=None)
@given(
    rates=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4),
    n=st.integers(2, 5),
    low=st.integers(2, 3),
    cap=st.sampled_from([None, 0, 2]),
    exponent=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_allocation_is_the_closest_integer_vector_to_the_proportional_target(rates, n, low, cap, exponent):
    low = min(low, n)
    high = None if cap is None else n + cap
    total = n * len(rates)
    counts = allocate(rates, total, exponent=exponent, min_samples=low, max_samples=high)
    weights = [(p + 1e-6) ** -exponent for p in rates]
    target = exact_target(weights, total, low, high)
    assert sum(counts) == total and all(low <= c <= (high or total) for c in counts)
    distance = sum((c - t) ** 2 for c, t in zip(counts, target))
    assert distance <= closest_integer_allocation_distance(target, total, low, high) + 1e-6
    assert all(abs(c - t) < 1 for c, t in zip(counts, target))  # floor or ceiling of the target, never further


@settings(max_examples=200, deadline=None)
@given(
    rates=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40),
    n=st.integers(2, 16),
    exponent=st.floats(0.0, 1.0),
    cap=st.sampled_from([None, 0, 3, 100]),
)
def test_allocation_properties(rates, n, exponent, cap):
    high = None if cap is None else n + cap
    total = n * len(rates)
    counts = allocate(rates, total, exponent=exponent, min_samples=2, max_samples=high)
    assert sum(counts) == total and min(counts) >= 2 and (high is None or max(counts) <= high)
    # Monotone: a prompt predicted harder (a larger weight: rates closer than eps are one rate) never gets fewer.
    for (w, a), (v, b) in itertools.combinations(zip(allocation_weights(rates, exponent), counts), 2):
        if w > v:
            assert a >= b
        elif v > w:
            assert b >= a
    assert allocate(list(rates), total, exponent=exponent, min_samples=2, max_samples=high) == counts  # deterministic


def test_allocation_examples_and_errors():
    assert allocate([0.3] * 4, 16) == [4, 4, 4, 4]  # no history: GRPO's n per prompt
    assert allocate([0.05, 0.2, 0.5, 0.9], 32) == [15, 8, 5, 4]
    assert allocate([0.01, 0.9, 0.9, 0.9], 16, max_samples=6) == [6, 4, 3, 3]
    assert allocate([0.5, 0.5, 0.5], 10) == [4, 3, 3]  # ties: the earlier prompt takes the extra sample
    assert allocate([0.01, 0.5], 8, exponent=0.0) == [4, 4]  # exponent 0: uniform
    with pytest.raises(ValueError, match="between 8 and"):
        allocate([0.5] * 4, 6, min_samples=2)
    with pytest.raises(ValueError, match="between"):
        allocate([0.5] * 4, 40, max_samples=8)


# ---------------------------------------------------------------------------------------------------------------------
# The advantage.


def test_advantage_formula():
    a = est_advantages([1.0, 0.0, 0.0, 0.0], eps=0.0)  # mean 1/4: residual weight 1 / sqrt(1/4) = 2
    assert a == pytest.approx([1.5, -0.5, -0.5, -0.5])
    rewards = [1.0] + [0.0] * 31  # the paper's 5.7 at mean 1/32
    assert est_advantages(rewards, eps=0.0)[0] == pytest.approx((1 - 1 / 32) * math.sqrt(32))
    assert est_advantages([1.0, 0.0, 0.0, 0.0], residual_exponent=0.0) == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert est_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0] and est_advantages([0.0, 0.0]) == [0.0, 0.0]
    # An unscorable sample (NaN): out of the mean, advantage 0; all unscorable: 0.
    assert est_advantages([1.0, math.nan, 0.0], eps=0.0) == pytest.approx(
        [0.5 / math.sqrt(0.5), 0.0, -0.5 / math.sqrt(0.5)]
    )
    assert est_advantages([math.nan, math.nan]) == [0.0, 0.0]
    assert est_advantages([1.0, math.nan, 1.0]) == [0.0, 0.0, 0.0]


@given(st.lists(st.sampled_from([0.0, 1.0, math.nan]), min_size=1, max_size=32), st.sampled_from([0.0, 0.5, 1.0]))
def test_advantages_sum_to_zero_over_the_scored_samples(rewards, residual):
    advantages = est_advantages(rewards, residual_exponent=residual)
    assert len(advantages) == len(rewards) and abs(sum(advantages)) < 1e-6
    assert all(a == 0.0 for a, r in zip(advantages, rewards) if math.isnan(r))
    assert (
        all(a > 0 for a, r in zip(advantages, rewards) if r == 1.0)
        or len({r for r in rewards if not math.isnan(r)}) < 2
    )


def test_allocation_metrics():
    m = allocation_metrics([0.05, 0.5, 0.9, 0.08], [8, 3, 2, 3], [0.0, 0.5, 1.0, math.nan])
    assert (m["sampling/est/samples_min"], m["sampling/est/samples_median"], m["sampling/est/samples_max"]) == (
        2,
        3,
        8,
    )
    assert m["sampling/est/share_predicted_hard"] == 11 / 16
    assert m["sampling/est/samples_reward_corr"] < -0.9  # more samples where the reward was lower
    assert math.isnan(allocation_metrics([0.1, 0.1], [4, 4], [0.0, 1.0])["sampling/est/samples_reward_corr"])


# ---------------------------------------------------------------------------------------------------------------------
# The config.


def est_config(tmp_path, **kwargs):
    return tiny_args(tmp_path, **{"max_steps": 4, "reinforce_ada_est": True, **kwargs})


def test_config_defaults_follow_the_authors_estimator(tmp_path):
    args = est_config(tmp_path)
    assert args.prompt_memory and args.advantage_estimator == "est" and args.sampling_active
    assert (args.prompt_memory_decay, args.prompt_memory_prior_alpha, args.prompt_memory_prior_beta) == (
        0.9,
        1.0,
        16.0,
    )
    assert (args.est_exponent, args.est_min_samples, args.est_max_samples) == (0.5, 2, None)
    plain = AdaGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", prompt_memory=True)
    assert (plain.prompt_memory_decay, plain.prompt_memory_prior_alpha, plain.prompt_memory_prior_beta) == (0.5, 1, 1)
    mine = est_config(tmp_path, prompt_memory_decay=0.5, prompt_memory_prior_beta=4.0)
    assert (mine.prompt_memory_decay, mine.prompt_memory_prior_beta) == (0.5, 4.0)
    # GRPO's n=16 with Est builds: round_repeat (a rounds-only field) follows it.
    assert est_config(tmp_path, num_generations=16).round_repeat == 16


@pytest.mark.parametrize(
    "fields,words",
    [
        ({"sampling_budget": 6.0, "prompt_memory": True}, ["sampling_budget", "reinforce_ada_est=False"]),
        ({"dynamic_sampling": True}, ["dynamic_sampling", "cannot be combined"]),
        ({"est_exponent": 1.5}, ["est_exponent=1.5", "[0, 1]"]),
        ({"est_min_samples": 1}, ["est_min_samples=1", "est_min_samples=2"]),
        ({"est_min_samples": 5}, ["est_min_samples=5", "num_generations=4"]),
        ({"est_max_samples": 3}, ["est_max_samples=3", ">= num_generations"]),
        ({"est_epsilon": 0.0}, ["est_epsilon=0.0", "> 0"]),
        ({"advantage_estimator": "grpo"}, ["advantage_estimator='grpo'", "unset"]),
        ({"multi_objective_aggregation": "normalize_then_sum"}, ["normalize_then_sum", "sum_then_normalize"]),
    ],
)
def test_config_refuses_what_cannot_hold(tmp_path, fields, words):
    with pytest.raises(ValueError) as error:
        est_config(tmp_path, **fields)
    assert all(word in str(error.value) for word in words), str(error.value)


def test_est_warns_of_rewards_outside_zero_one(tmp_path, caplog):
    """Est's weight takes the mean reward for a pass rate: a mean at or below 0 gets (est_epsilon) ** -0.5 = 1000, so
    rewards outside [0, 1] are named in a warning (with the weight and the fix); pass rates in [0, 1] are not."""
    from accelerate import PartialState

    from trl_ada.core.sampling import PromptResult
    from trl_ada.integration.estimators import warn_if_not_binary

    PartialState()  # accelerate's logger logs once a state exists, as in a trainer
    args = est_config(tmp_path)
    assert est_advantages([-1.0, -1.0, -1.0, 1.0]) == pytest.approx([-500.0, -500.0, -500.0, 1500.0])
    with caplog.at_level("WARNING", logger="trl_ada.integration.estimators"):
        assert not warn_if_not_binary(args, [PromptResult(pool_rewards=[0.0, 0.25, 1.0, math.nan])])
        assert not caplog.records
        assert warn_if_not_binary(
            args, [PromptResult(pool_rewards=[0.0, 1.0]), PromptResult(pool_rewards=[-1.0, 1.0])]
        )
    message = caplog.records[-1].getMessage()
    assert "advantage_estimator='est'" in message and "-1.0" in message and "1e+03" in message and "[0, 1]" in message


def test_est_estimator_needs_est(tmp_path):
    with pytest.raises(ValueError, match="advantage_estimator='est' with reinforce_ada_est=False"):
        AdaGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", advantage_estimator="est")


# ---------------------------------------------------------------------------------------------------------------------
# The real trainer, one process.

PROMPT_TAG = re.compile(r"q(\d+) r([\d.]+)")


class EstRecorder(AdaGRPOTrainer):
    """Observes each step: the memory before it, and the batch TRL trains on (nothing replaced)."""

    def _generate_and_score_completions(self, inputs):
        before = self.prompt_memory.state_dict() if self.model.training else None
        output = super()._generate_and_score_completions(inputs)
        if before is not None:
            self.steps = getattr(self, "steps", []) + [(before, output, self.prompt_memory.state_dict())]
        return output


def groups_of(trainer, output):
    """Consecutive rows of one prompt: (memory key, pass rate, rewards recomputed from the completions, advantages)."""
    from trl_ada.core.memory import prompt_key

    tok = trainer.processing_class
    rows = []
    for i in range(output["completion_ids"].shape[0]):
        ids = output["prompt_ids"][i][output["prompt_mask"][i].bool()].tolist()
        rate = float(PROMPT_TAG.search(tok.decode(ids)).group(2))
        text = tok.decode(output["completion_ids"][i][output["completion_mask"][i].bool()], skip_special_tokens=True)
        rows.append((prompt_key(ids), rate, hash_reward_value(text, rate), output["advantages"][i].item()))
    groups = []
    for key, members in itertools.groupby(rows, key=lambda row: row[0]):
        members = list(members)
        groups.append((key, members[0][1], [m[2] for m in members], [m[3] for m in members]))
    return groups


def remembered_rate(state, key, alpha=1.0, beta=16.0):
    keys = state["keys"].tolist()
    if key not in keys:
        return alpha / (alpha + beta)
    slot = keys.index(key)
    return (state["positives"][slot] + alpha) / (state["samples"][slot] + alpha + beta)


@pytest.mark.slow
def test_est_trains_every_allocated_sample_with_its_advantage(tiny_model, tmp_path):
    reward = make_recording_reward()
    # 4 distinct prompts per step, each seen again from step 3 (8 rows): never right, always right (two), mixed.
    trainer = EstRecorder(
        model=tiny_model,
        reward_funcs=reward,
        args=est_config(tmp_path),
        train_dataset=pass_rate_dataset([0.0, 1.0, 1.0, 0.5], repeat=2),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 4 and len(trainer.steps) == 4
    assert len(reward.log) == sum(h["sampling/total_samples"] for h in logs) == 4 * 16  # one call, n per prompt

    unequal = False
    for (before, output, after), log in zip(trainer.steps, logs):
        groups = groups_of(trainer, output)
        counts = [len(g[2]) for g in groups]
        assert len(groups) == 4 and sum(counts) == 16 == output["advantages"].shape[0]
        unequal |= len(set(counts)) > 1
        for key, rate, rewards, advantages in groups:
            assert min(rewards) == max(rewards) or rate == 0.5  # the hash reward: rates 0 and 1 never mix
            mean = sum(rewards) / len(rewards)
            expected = (
                [0.0] * len(rewards)
                if max(rewards) == min(rewards)
                else [(r - mean) / math.sqrt(mean + 1e-6) for r in rewards]
            )
            assert advantages == pytest.approx(expected, abs=1e-5)
            # The memory took exactly this step's N_x samples and right answers, old counts decayed by 0.9.
            old = dict(zip(before["keys"].tolist(), zip(before["samples"], before["positives"])))
            slot = after["keys"].tolist().index(key)
            n_old, k_old = old.get(key, (0.0, 0.0))
            assert after["samples"][slot] == pytest.approx(0.9 * n_old + len(rewards))
            assert after["positives"][slot] == pytest.approx(0.9 * k_old + sum(r > 0.7 for r in rewards))
        # Allocation: of two prompts, the one remembered as harder never gets fewer samples.
        for (k1, _, r1, _), (k2, _, r2, _) in itertools.combinations(groups, 2):
            if remembered_rate(before, k1) < remembered_rate(before, k2):
                assert len(r1) >= len(r2)
        zero_std = sum(len(g[2]) for g in groups if max(g[2]) == min(g[2])) / 16
        assert log["frac_reward_zero_std"] == pytest.approx(zero_std)  # over N_x-row groups, not TRL's rows of 4
        assert log["sampling/kept_samples"] == 16 and log["sampling/est/samples_max"] == max(counts)
        assert log["sampling/effective_prompt_ratio"] == pytest.approx(sum(max(g[2]) != min(g[2]) for g in groups) / 4)
    assert unequal, "the revisited prompts should have been allocated unequally"
    assert [h["sampling/est/samples_max"] for h in logs[:2]] == [4, 4]  # nothing remembered yet: uniform


@pytest.mark.slow
@pytest.mark.lock_only  # Est end to end runs in every set once (the test above); these add our bookkeeping
def test_est_allocation_follows_the_remembered_rates(tiny_model, tmp_path):
    """The rows TRL trains on per prompt are exactly `allocate` of the pass rates remembered before the step."""
    from trl_ada.core.memory import prompt_key

    trainer = EstRecorder(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        args=est_config(tmp_path),
        train_dataset=pass_rate_dataset([0.0, 1.0, 1.0, 0.5], repeat=2),
    )
    trainer.train()
    tok = trainer.processing_class
    for before, output, _ in trainer.steps:
        prompts = [
            output["prompt_ids"][i][output["prompt_mask"][i].bool()].tolist()
            for i in range(output["prompt_ids"].shape[0])
        ]
        distinct = [ids for ids, _ in itertools.groupby(prompts)]
        counts = [len(list(rows)) for _, rows in itertools.groupby(prompts)]
        rates = [remembered_rate(before, prompt_key(ids)) for ids in distinct]
        assert counts == allocate(rates, 16), [tok.decode(ids)[-12:] for ids in distinct]


@pytest.mark.slow
@pytest.mark.lock_only  # as above
def test_est_allocates_prompts_never_seen_before_from_their_groups_prior(tiny_model, tmp_path):
    """With prompt_memory_group_column, a prompt met for the first time is allocated from its group's fitted pass
    rate: in a run that never revisits a prompt, those of the group never solved get more samples than those of the
    group always solved, once the groups have been seen (without the column every unseen prompt gets n)."""
    rates = [0.0, 1.0, 0.0, 1.0]
    dataset = pass_rate_dataset(rates, repeat=8)  # 32 distinct prompts; a 4-step run meets 16, each once
    dataset = dataset.add_column("kind", ["hard" if r == 0.0 else "easy" for r in dataset["pass_rate"]])
    trainer = EstRecorder(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        train_dataset=dataset,
        args=est_config(tmp_path, prompt_memory_group_column="kind"),
    )
    trainer.train()
    assert (
        trainer.group_prior is not None and trainer.group_prior.prior("hard")[0] < trainer.group_prior.prior("easy")[0]
    )
    for index, (before, output, _) in enumerate(trainer.steps):
        groups = groups_of(trainer, output)
        assert not set(before["keys"].tolist()) & {key for key, *_ in groups}  # never seen before
        hard = [len(r) for _, rate, r, _ in groups if rate == 0.0]
        easy = [len(r) for _, rate, r, _ in groups if rate == 1.0]
        if index == 0:
            assert hard == easy == [4, 4]  # no group seen yet: the flat prior, uniform
        else:
            assert min(hard) > max(easy), (index, hard, easy)


@pytest.mark.slow
@pytest.mark.lock_only  # as above
def test_est_resumes_exactly(tiny_model, tmp_path):
    dataset = pass_rate_dataset([0.0, 1.0, 1.0, 0.5], repeat=2)

    def run(folder, **kwargs):
        return recording_trainer(tiny_model, dataset, est_config(folder, **kwargs))

    uninterrupted = run(tmp_path / "a", save_strategy="steps", save_steps=2)
    uninterrupted.train()
    checkpoint = tmp_path / "a" / "out" / "checkpoint-2"
    assert (checkpoint / "prompt_memory.npz").exists()
    resumed = run(tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    a, b = uninterrupted.prompt_memory.state_dict(), resumed.prompt_memory.state_dict()
    assert max(a["visits"]) == 2 and all(np.array_equal(a[k], b[k]) for k in a)
    logs = [[h for h in run.state.log_history if "loss" in h][-2:] for run in (uninterrupted, resumed)]
    for key in ("loss", "sampling/est/samples_max", "sampling/est/samples_min", "reward"):
        assert [h[key] for h in logs[0]] == [h[key] for h in logs[1]], key
    assert logs[0][-1]["sampling/est/samples_max"] > 4  # the resumed steps allocated from the restored memory
    with pytest.raises(ValueError, match="prompt_memory"):  # resuming with another estimator is refused
        run(tmp_path / "c", prompt_memory_decay=0.5).train(resume_from_checkpoint=str(checkpoint))
