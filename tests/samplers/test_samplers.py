"""The sampler protocol: every built-in sampler run on a context made of plain functions (no model), the Knapsack
allocation against an independent exact solver, the selector's mapping of the older switches, and a user's sampler
file trained through `trl-ada-train` as docs/samplers.md writes it."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import ROOT
from tests.helpers.data import make_recording_reward, pass_rate_dataset
from tests.helpers.trainers import SMALL, recording_trainer, tiny_args
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
from trl_ada.core.memory import PromptMemory
from trl_ada.core.sampling import PromptResult
from trl_ada.integration import estimators
from trl_ada.integration.context import check_pools, sample_request
from trl_ada.integration.rollouts import StepSampling, positive_rewards
from trl_ada.samplers import BUILT_IN, SamplingContext, Selection, check_selection, load_sampler
from trl_ada.samplers.est import Est as BuiltInEst
from trl_ada.samplers.knapsack import allocate, group_advantages, value
from trl_ada.samplers.reinforce_ada import Rounds as BuiltInRounds


BASE = dict(SMALL, shuffle_dataset=False)


def config(tmp_path, **kwargs) -> AdaGRPOConfig:
    return AdaGRPOConfig(output_dir=str(tmp_path / "out"), **{**BASE, **kwargs})


class Simulated:
    """A context from plain functions: prompt p passes with probability rates[p % len(rates)]; it counts every
    sample it was asked for."""

    def __init__(self, rates, target, world_size=1, memory=None, seed=0):
        self.rates, self.rng, self.drawn, self.generated = rates, random.Random(seed), target, 0
        self.pools: dict[int, list[float]] = {}
        self.memory = memory
        self.batches = 0

    def sample(self, prompts, k):
        prompts, counts = sample_request(prompts, k, self.drawn)  # the trainer's context checks the same
        out = []
        for p, count in zip(prompts, counts):
            new = [float(self.rng.random() < self.rates[p % len(self.rates)]) for _ in range(count)]
            self.pools.setdefault(p, []).extend(new)
            self.generated += count
            out.append(new)
        return out

    def draw(self, count):
        first, self.drawn = self.drawn, self.drawn + count
        return list(range(first, self.drawn))

    def posterior(self, p):
        if self.memory is None:
            return 1.0, 1.0, 0
        return self.memory.posterior(p)

    def begin_batch(self):
        self.batches += 1
        return self.batches - 1

    def context(self, n=4, world_size=1, step=0):
        return SamplingContext(
            num_generations=n,
            world_size=world_size,
            global_step=step,
            seed=0,
            sample=self.sample,
            draw=self.draw,
            row=lambda p: {"prompt": f"q{p}"},
            prompt_key=lambda p: p,
            pass_rate_posterior=self.posterior,
            begin_batch=self.begin_batch,
            trained_rewards=lambda p: self.pools[p],
            memory=self.memory,
        )


BUILT_IN_CONFIGS = {
    "grpo": dict(sampler="grpo"),
    "reinforce_ada": dict(sampler="reinforce_ada"),
    "dapo": dict(sampler="dapo"),
    "budget": dict(sampler="budget", prompt_memory=True),
    "est": dict(sampler="est"),
    "knapsack": dict(sampler="knapsack"),
    "retire_solved": dict(sampler="retire_solved"),
}


@pytest.mark.parametrize("name", sorted(BUILT_IN_CONFIGS))
@pytest.mark.parametrize("world_size", [1, 2])
def test_every_built_in_sampler_decides_a_batch_from_the_context_alone(name, world_size, tmp_path):
    assert set(BUILT_IN_CONFIGS) == set(BUILT_IN)
    args = config(tmp_path, **BUILT_IN_CONFIGS[name])
    memory = PromptMemory(0.9, 1.0, 1.0)
    rates = [0.0, 1.0, 0.5, 0.25]  # remembered: Est and Knapsack allocate unequally
    memory.update(list(range(4)), [8] * 4, [round(8 * rate) for rate in rates], step=0)
    sim = Simulated([0.0, 1.0, 0.5, 0.25], target=4, memory=memory)
    selection = load_sampler(args).sample(sim.context(world_size=world_size), 4)
    check_selection(selection, 4, 4, world_size)  # target distinct prompts, n rows a prompt on each rank
    assert sim.generated == sum(len(r.pool_rewards) for r in selection.results.values())  # counted where made
    for p, result in selection.results.items():  # the pools are what the context handed out, in order
        assert result.pool_rewards == sim.pools[p]
    sizes = [len(selection.results[p].selected) for p in selection.chosen]
    if name in ("est", "knapsack"):
        assert len(set(sizes)) > 1 and all(
            s == len(selection.results[p].pool_rewards) for s, p in zip(sizes, selection.chosen)
        )
    else:
        assert sizes == [4] * 4
    if name in ("est", "knapsack"):  # round one is every sample: prompts weighed equally, as GRPO's n per prompt
        means = [sum(selection.results[p].pool_rewards) / len(selection.results[p].pool_rewards) for p in range(4)]
        assert selection.metrics["sampling/iid_reward"] == pytest.approx(sum(means) / 4)
    if name == "dapo":  # the all-wrong and all-right prompts were dropped and refilled
        assert not {0, 1} & set(selection.chosen) and selection.metrics["sampling/refill_batches"] >= 1


def test_retire_solved_skips_a_prompt_a_visit_showed_solved_and_replaces_it(tmp_path):
    """Prompt 1 (always right) is retired after its first visit; in the next batch it is skipped and a fresh prompt
    takes its place; prompt 2 (right half the time) is never retired; the retired set survives a state_dict round
    trip (what a checkpoint keeps)."""
    args = config(tmp_path, sampler="retire_solved")
    sampler = load_sampler(args)
    sim = Simulated([0.0, 1.0, 0.5, 0.0], target=4)
    first = sampler.sample(sim.context(), 4)
    assert first.chosen == [0, 1, 2, 3] and first.skipped == 0
    assert sampler.retired == {1} and first.metrics["sampling/retire_solved/retired_now"] == 1.0

    sim.drawn = 4  # the next batch: the same four questions come back; a drawn one is new (keys 4, 5, ...)
    second = sampler.sample(sim.context(step=1), 4)
    assert 1 not in second.chosen and len(second.chosen) == 4 and second.skipped == 1
    assert [p for p in second.chosen if p >= 4] == [4]  # one refill, drawn from the stream
    restored = load_sampler(args)
    restored.load_state_dict(json.loads(json.dumps(sampler.state_dict())))
    assert restored.retired == sampler.retired


def test_retire_solved_trains_retired_prompts_when_the_stream_has_no_others(tmp_path):
    """Every prompt solved and the stream exhausted within max_refill_batches: the step still trains target prompts
    (retired ones), and says how many."""
    args = config(tmp_path, sampler="retire_solved", max_refill_batches=1)
    sampler = load_sampler(args)
    sim = Simulated([1.0], target=2)
    sampler.sample(sim.context(), 2)
    sim.drawn = 2
    context = sim.context(step=1)
    context.prompt_key = lambda p: p % 2  # every drawn prompt is a question already retired
    selection = sampler.sample(context, 2)
    assert sorted(selection.chosen) == [0, 1] and selection.metrics["sampling/retire_solved/retired_trained"] == 2
    with pytest.raises(ValueError, match="threshold=1.5 must be a pass rate in"):
        load_sampler(config(tmp_path, sampler="retire_solved", sampler_kwargs={"threshold": 1.5}))


def test_a_selection_the_trainer_cannot_train_is_named():
    whole = {p: PromptResult(pool_rewards=[1.0] * 4, selected=[0, 1, 2, 3]) for p in range(4)}
    check_selection(Selection(results=whole, chosen=[0, 1, 2, 3]), 4, 4, 2)
    with pytest.raises(ValueError, match="chose 3 prompts"):
        check_selection(Selection(results=whole, chosen=[0, 1, 2]), 4, 4, 2)
    uneven = {
        **whole,
        0: PromptResult(pool_rewards=[1.0] * 6, selected=list(range(6))),
        2: PromptResult(pool_rewards=[1.0] * 2, selected=[0, 1]),
    }
    with pytest.raises(ValueError, match="kept 10 samples for rank 0"):  # 6 + 4 on rank 0, 2 + 4 on rank 1
        check_selection(Selection(results=uneven, chosen=[0, 1, 2, 3]), 4, 4, 2)
    check_selection(Selection(results=uneven, chosen=[0, 2, 1, 3]), 4, 4, 2)  # 6 + 2 and 4 + 4: fine
    # GRPO's group statistics read groups of num_generations: unequal groups need their own advantages
    with pytest.raises(ValueError, match="groups of other sizes than num_generations"):
        check_selection(Selection(results=uneven, chosen=[0, 2, 1, 3]), 4, 4, 2, groups_of_n=True)
    given = {p: [0.0] * len(uneven[p].selected) for p in range(4)}
    check_selection(Selection(results=uneven, chosen=[0, 2, 1, 3], advantages=given), 4, 4, 2, groups_of_n=True)
    with pytest.raises(ValueError, match="one value per kept sample"):
        check_selection(
            Selection(results=whole, chosen=[0, 1, 2, 3], advantages={p: [0.0] for p in range(4)}), 4, 4, 1
        )
    # kept indices: distinct ints into the pool, at least one (a repeated index trains one completion twice)
    for selected in ([0, 0, 0, 0], [0.0, 1.0, 2.0, 3.0], [True, 1, 2, 3]):
        with pytest.raises(ValueError, match="at least one distinct int index"):
            check_selection(
                Selection(results={**whole, 0: PromptResult([1.0] * 4, selected)}, chosen=[0, 1, 2, 3]), 4, 4, 1
            )
    lopsided = {**whole, 0: PromptResult([1.0] * 8, list(range(8))), 1: PromptResult([1.0] * 4, [])}
    with pytest.raises(ValueError, match="at least one distinct int index"):
        check_selection(Selection(results=lopsided, chosen=[0, 1, 2, 3]), 4, 4, 1)
    # an infinite advantage would reach the loss as the largest float; NaN (unscorable) trains as 0
    for bad in (math.inf, -math.inf, "0.5", True):
        advantages = {p: [0.0, 0.0, 0.0, 0.0] for p in range(4)} | {2: [0.0, bad, 0.0, 0.0]}
        with pytest.raises(ValueError, match="advantages of prompt 2 holds"):
            check_selection(Selection(results=whole, chosen=[0, 1, 2, 3], advantages=advantages), 4, 4, 1)
    nan = {p: [0.0, math.nan, np.float32(1.0), 2] for p in range(4)}
    check_selection(Selection(results=whole, chosen=[0, 1, 2, 3], advantages=nan), 4, 4, 1)


@pytest.mark.parametrize(
    "prompts, k, match",
    [
        ([0, 0], 4, "distinct prompt numbers in 0..3"),  # one pool slot for two samples
        ([0, 4], 4, "distinct prompt numbers in 0..3"),  # never drawn
        ([0, 1.0], 4, "distinct prompt numbers in 0..3"),
        ([0, 1], [4], "one int >= 0 per prompt"),  # zip would drop prompt 1's samples
        ([0, 1], [4, 2.0], "one int >= 0 per prompt"),
        ([0, 1], 4.0, "an int >= 0"),
        ([0, 1], -1, "an int >= 0"),
    ],
)
def test_context_sample_refuses_a_request_it_cannot_make_naming_the_mistake(prompts, k, match):
    with pytest.raises(ValueError, match=match):
        sample_request(prompts, k, 4)


def test_context_sample_takes_any_sequence_of_counts_and_nothing_at_all():
    assert sample_request((2, np.int64(0)), (3, np.int64(1)), 4) == ([2, 0], [3, 1])
    assert sample_request(iter([1]), np.array([2]), 4) == ([1], [2])
    assert sample_request([], 4, 4) == ([], [])


def pools_step(pools: dict[int, list[float]], rows: int = 4) -> StepSampling:
    """A step whose prompts got these rewards from one reward function (weight 1)."""
    step = StepSampling(rows=[{"prompt": f"q{p}"} for p in range(rows)])
    step.pool_rewards_per_func = [[torch.tensor([r]) for r in pools.get(p, [])] for p in range(rows)]
    return step


def test_pools_that_are_not_what_the_samples_got_are_refused():
    made = {0: [1.0, 0.0, math.nan, 1.0], 1: [0.0, 0.0, 1.0, 1.0, 0.5, 0.0]}

    def weights(rewards_per_func):  # the reward that decides a positive: one function, weight 1
        return positive_rewards(rewards_per_func, torch.ones(1), None)

    whole = {p: PromptResult(list(pool), [0, 1, 2, 3]) for p, pool in made.items()}
    check_pools(pools_step(made), Selection(results=whole, chosen=[0, 1]), weights)  # NaN where NaN: the same
    later = {**whole, 1: PromptResult(made[1][2:], [0, 1, 2, 3])}  # a sampler keeping only its top-up's rewards
    with pytest.raises(ValueError, match=r"results\[1\].pool_rewards \(4 rewards: \[1, 1, 0.5, 0\]\).*\(6 rewards: "):
        check_pools(pools_step(made), Selection(results=later, chosen=[0, 1]), weights)
    swapped = {**whole, 0: PromptResult([0.0, 1.0, math.nan, 1.0], [0, 1, 2, 3])}  # same length, other order
    with pytest.raises(ValueError, match=r"results\[0\].*\[0, 1, nan, 1\].*\[1, 0, nan, 1\]"):  # the values shown
        check_pools(pools_step(made), Selection(results=swapped, chosen=[0, 1]), weights)
    with pytest.raises(ValueError, match="every prompt sampled is in Selection.results"):  # prompt 1 left out
        check_pools(pools_step(made), Selection(results={0: whole[0]}, chosen=[0]), weights)
    with pytest.raises(ValueError, match="keyed by prompt numbers"):
        check_pools(pools_step(made), Selection(results={**whole, 7: whole[0]}, chosen=[0, 1]), weights)


def test_reinforce_rej_reads_each_prompts_kept_group_whatever_its_size(tmp_path):
    from trl_ada.core.advantages import reinforce_rej_advantages

    args = config(tmp_path, advantage_estimator="reinforce_rej")
    kept = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0]  # a uniform group of 6, then a mixed group of 2
    results = [PromptResult(kept[:6], list(range(6))), PromptResult(kept[6:], [0, 1])]
    got = estimators.step_advantages(args, kept, 4, results)
    assert got == [reinforce_rej_advantages(kept[:6]), reinforce_rej_advantages(kept[6:])]
    assert got != [reinforce_rej_advantages(kept[:4]), reinforce_rej_advantages(kept[4:])]  # blocks of n mix them


def test_a_users_advantage_function_returning_infinity_is_named(tmp_path, monkeypatch):
    (tmp_path / "bad_advantages.py").write_text(
        "def infinite(pool_rewards, selected, positive_threshold):\n    return [float('inf')] * len(selected)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    args = config(tmp_path, advantage_estimator="bad_advantages.infinite")
    with pytest.raises(ValueError, match="advantage_estimator='bad_advantages.infinite'.s return value holds inf"):
        estimators.step_advantages(args, [1.0, 0.0, 1.0, 0.0], 4, None)


# ---------------------------------------------------------------------------------------------------------------------
# Knapsack RL's allocation against an exact dynamic program over every feasible allocation.


def exact_best_dp(rates, budget, low, high) -> float:
    table = {0: 0.0}
    for p in rates:
        nxt: dict[int, float] = {}
        for spent, total in table.items():
            for n in range(low, high + 1):
                if spent + n <= budget:
                    nxt[spent + n] = max(nxt.get(spent + n, -math.inf), total + value(n, p))
        table = nxt
    return table[budget]


@settings(max_examples=150, deadline=None)
@given(
    rates=st.lists(st.floats(0.01, 0.99), min_size=1, max_size=6),
    n=st.integers(2, 6),
    low=st.integers(1, 3),
    extra=st.integers(0, 10),
)
def test_knapsack_allocation_reaches_the_exact_optimum(rates, n, low, extra):
    low = min(low, n)
    high = n + extra
    budget = n * len(rates)
    counts = allocate(rates, budget, low, high)
    assert sum(counts) == budget and all(low <= c <= high for c in counts)
    achieved = sum(value(c, p) for c, p in zip(counts, rates))
    assert achieved == pytest.approx(exact_best_dp(rates, budget, low, high), rel=1e-9, abs=1e-12)


def test_knapsack_gives_hard_prompts_more_than_solved_ones_and_refuses_an_impossible_budget():
    counts = allocate([0.05, 0.3, 0.5, 0.95], 16, 2, 32)  # p (1 - p)^2 is largest near p = 1/3
    assert counts[1] > counts[3] and counts[2] > counts[3] and sum(counts) == 16
    assert allocate([0.05, 0.95], 16, 2, 32) == [14, 2]  # beside a solved prompt, a hard one takes the budget
    assert allocate([0.5] * 4, 16, 2, 32) == [4, 4, 4, 4]  # alike prompts: GRPO's allocation
    with pytest.raises(ValueError, match="cannot give 2 prompts"):
        allocate([0.5, 0.5], 8, 5, 8)


@settings(max_examples=100, deadline=None)
@given(
    rewards=st.lists(st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.just(math.nan)), min_size=1, max_size=12),
    scale=st.booleans(),
)
def test_knapsack_advantages_are_grpos_within_the_group(rewards, scale):
    values = torch.tensor(rewards, dtype=torch.float64)
    finite = values[~torch.isnan(values)]
    got = torch.tensor(group_advantages(rewards, scale), dtype=torch.float64)
    if finite.numel() < 2:
        assert (got == 0).all()
        return
    expected = (values - finite.mean()) / ((finite.std() + 1e-4) if scale else 1.0)  # torch.std: unbiased, as TRL
    expected[torch.isnan(values)] = 0.0
    assert torch.allclose(got, expected, atol=1e-9)


def test_knapsack_checks_its_own_fields_before_the_model_loads(tmp_path):
    with pytest.raises(ValueError, match=r"min_samples \(5\) <= num_generations \(4\)"):
        AdaGRPOTrainer(
            model="no/such-model",
            reward_funcs=make_recording_reward(),
            train_dataset=pass_rate_dataset([0.5]),
            args=config(tmp_path, sampler="knapsack", sampler_kwargs={"min_samples": 5}),
        )
    for kwargs in ({"min_samples": 2.0}, {"min_samples": 1}, {"max_samples": 16.0}):  # a group of one: no baseline
        with pytest.raises(ValueError, match="integer sampler_kwargs 2 <= min_samples"):
            load_sampler(config(tmp_path, sampler="knapsack", sampler_kwargs=kwargs))
    with pytest.raises(ValueError, match="advantage_estimator='reinforce_ada' would not be used"):
        load_sampler(config(tmp_path, sampler="knapsack", advantage_estimator="reinforce_ada"))
    with pytest.raises(ValueError, match="sampler_kwargs=.*do not fit sampler='est'"):
        AdaGRPOTrainer(
            model="no/such-model",
            reward_funcs=make_recording_reward(),
            train_dataset=pass_rate_dataset([0.5]),
            args=config(tmp_path, sampler="est", sampler_kwargs={"min_samples": 2}),
        )


@pytest.mark.slow
def test_knapsack_trains_counts_what_it_generates_and_resumes_exactly(tiny_model, tmp_path):
    dataset = pass_rate_dataset([0.0, 1.0, 1.0, 0.5], repeat=2)

    def run(folder, **kwargs):
        return recording_trainer(tiny_model, dataset, tiny_args(folder, sampler="knapsack", max_steps=4, **kwargs))

    uninterrupted = run(tmp_path / "a", save_strategy="steps", save_steps=2)
    uninterrupted.train()
    logs = [h for h in uninterrupted.state.log_history if "loss" in h]
    # GRPO's generation per step (4 prompts x 4), whatever the allocation; the counter saw every sample
    assert all(h["sampling/total_samples"] == 16 for h in logs)
    assert logs[-1]["sampling/generated_completions_total"] == 16 * 4
    assert max(h["sampling/knapsack/samples_max"] for h in logs) > 4  # remembered prompts allocated unequally
    checkpoint = tmp_path / "a" / "out" / "checkpoint-2"
    resumed = run(tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    a, b = uninterrupted.prompt_memory.state_dict(), resumed.prompt_memory.state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    tails = [[h for h in r.state.log_history if "loss" in h][-2:] for r in (uninterrupted, resumed)]
    for key in ("loss", "sampling/knapsack/samples_max", "sampling/generated_completions_total"):
        assert [h[key] for h in tails[0]] == [h[key] for h in tails[1]], key


def test_retire_solved_trains_skips_solved_prompts_and_resumes_with_its_retired_set(tiny_model, tmp_path):
    """Questions of pass rate 1.0 retire after their first visit and are not trained again; the retired set goes into
    every checkpoint, so a run resumed at step 2 skips what the uninterrupted run skips."""
    from datasets import Dataset

    from tests.helpers.data import make_prompt

    rates = [1.0, 0.5, 0.0, 0.25]  # each question four times in the data: it comes back
    dataset = Dataset.from_list(
        [{"prompt": make_prompt(f"q{i % 4} r{rates[i % 4]}"), "pass_rate": rates[i % 4]} for i in range(16)]
    )

    def run(folder, **kwargs):
        args = tiny_args(folder, sampler="retire_solved", max_steps=4, shuffle_dataset=True, **kwargs)
        trainer = recording_trainer(tiny_model, dataset, args)
        trainer.reward_log = trainer.reward_funcs[0].log
        return trainer

    uninterrupted = run(tmp_path / "a", save_strategy="steps", save_steps=2)
    uninterrupted.train()
    logs = [h for h in uninterrupted.state.log_history if "loss" in h]
    assert logs[-1]["sampling/retire_solved/retired_total"] >= 1
    assert sum(h["sampling/retire_solved/skipped"] for h in logs) >= 1  # a retired question came back and was skipped
    # Once retired, an always-right question is never sampled again: its samples all come from one visit.
    solved = [prompt for prompt, _, _ in uninterrupted.reward_log if "r1.0" in prompt]
    assert solved and all(solved.count(prompt) == 4 for prompt in set(solved))
    checkpoint = tmp_path / "a" / "out" / "checkpoint-2"
    saved = json.loads((checkpoint / "ada_sampler_state.json").read_text())
    assert saved["retired"]
    resumed = run(tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed._sampler.retired == uninterrupted._sampler.retired
    tails = [[h for h in r.state.log_history if "loss" in h][-2:] for r in (uninterrupted, resumed)]
    for key in ("loss", "sampling/retire_solved/retired_total", "sampling/retire_solved/skipped"):
        assert [h[key] for h in tails[0]] == [h[key] for h in tails[1]], key


STATEFUL_SAMPLER = """from trl_ada.core.sampling import PromptResult
from trl_ada.samplers import Selection


class Alternating:
    draws_prompts = False

    def __init__(self, args):
        self.batches = 0  # its state: which half of each pool the next batch keeps

    def state_dict(self):
        return {"batches": self.batches}

    def load_state_dict(self, state):
        self.batches = state["batches"]

    def sample(self, context, target):
        prompts = list(range(target))
        pools = context.sample(prompts, 2 * context.num_generations)
        half = (self.batches % 2) * context.num_generations
        self.batches += 1
        kept = list(range(half, half + context.num_generations))
        return Selection(results={p: PromptResult(pool, kept, 1, True) for p, pool in zip(prompts, pools)},
                         chosen=prompts, metrics={"sampling/alternating/half": float(half)})
"""


def test_a_users_sampler_with_state_resumes_into_the_uninterrupted_runs_decisions(tiny_model, tmp_path, monkeypatch):
    """Its state goes into the checkpoint and comes back: the resumed run keeps the same halves of its pools."""
    (tmp_path / "alternating.py").write_text(STATEFUL_SAMPLER)
    monkeypatch.chdir(tmp_path)
    dataset = pass_rate_dataset([0.5, 0.25], repeat=8)

    def run(folder, **kwargs):
        args = tiny_args(folder, sampler="alternating.Alternating", max_steps=3, **kwargs)
        return recording_trainer(tiny_model, dataset, args)

    uninterrupted = run(tmp_path / "a", save_strategy="steps", save_steps=1)
    uninterrupted.train()
    checkpoint = tmp_path / "a" / "out" / "checkpoint-1"
    assert json.loads((checkpoint / "ada_sampler_state.json").read_text()) == {"batches": 1}
    resumed = run(tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    tails = [[h for h in r.state.log_history if "loss" in h][-2:] for r in (uninterrupted, resumed)]
    assert [h["sampling/alternating/half"] for h in tails[1]] == [4.0, 0.0]  # batches 1 and 2, as uninterrupted
    for key in ("loss", "sampling/alternating/half", "reward"):
        assert [h[key] for h in tails[0]] == [h[key] for h in tails[1]], key


def notebook_class():
    """`Alternating` as a notebook defines it: a class of a module no import can find."""
    namespace = {"__name__": "a_notebook_cell"}
    exec(STATEFUL_SAMPLER, namespace)
    return namespace["Alternating"]


@pytest.mark.parametrize("form", ["class", "instance"])
def test_a_sampler_passed_as_an_object_trains_checkpoints_and_resumes(form, tiny_model, tmp_path):
    """From Python the sampler is the class itself or an instance, as TRL takes reward functions: no import path.
    It decides every batch, the config saves and logs its name, and its state resumes."""
    Alternating = notebook_class()
    dataset = pass_rate_dataset([0.5, 0.25], repeat=8)

    def run(folder, **kwargs):
        probe = tiny_args(folder, max_steps=3, sampler="grpo")  # the config an instance is built from
        sampler = Alternating if form == "class" else Alternating(probe)
        args = tiny_args(folder, max_steps=3, sampler=sampler, **kwargs)
        return recording_trainer(tiny_model, dataset, args), sampler

    uninterrupted, sampler = run(tmp_path / "a", save_strategy="steps", save_steps=1)
    assert uninterrupted.args.advantage_estimator == "grpo" and uninterrupted.args.sampling_active
    uninterrupted.train()
    if form == "instance":
        assert uninterrupted._sampler is sampler and sampler.batches == 3  # the very object, not a copy
    logs = [h for h in uninterrupted.state.log_history if "loss" in h]
    assert [h["sampling/alternating/half"] for h in logs] == [0.0, 4.0, 0.0]
    checkpoint = tmp_path / "a" / "out" / "checkpoint-1"
    saved = torch.load(checkpoint / "training_args.bin", weights_only=False)  # pickled: the sampler by its name
    assert saved.sampler == "a_notebook_cell.Alternating" == json.loads(uninterrupted.args.to_json_string())["sampler"]
    resumed, _ = run(tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    tail = [h for h in resumed.state.log_history if "loss" in h][-2:]
    assert [h["sampling/alternating/half"] for h in tail] == [4.0, 0.0]  # its state came back from the checkpoint
    with pytest.raises(ValueError, match="sampler_kwargs=.* with a sampler instance .*a_notebook_cell.Alternating"):
        AdaGRPOTrainer(
            model=tiny_model,
            reward_funcs=make_recording_reward(),
            train_dataset=dataset,
            args=tiny_args(tmp_path / "c", sampler=Alternating(None), sampler_kwargs={"x": 1}),
        )


def test_a_sampler_that_draws_on_a_stream_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    from datasets import IterableDataset

    (tmp_path / "drawing.py").write_text(
        "class Drawing:\n    draws_prompts = True\n\n    def __init__(self, args):\n        pass\n\n"
        "    def sample(self, context, target):\n        pass\n"
    )
    monkeypatch.chdir(tmp_path)
    stream = IterableDataset.from_generator(lambda: iter([{"prompt": "q", "pass_rate": 0.5}]))
    with pytest.raises(ValueError, match="sampler='drawing.Drawing' draws replacement prompts by index"):
        AdaGRPOTrainer(
            model=str(tmp_path / "no-model"),
            reward_funcs=make_recording_reward(),
            args=config(tmp_path, sampler="drawing.Drawing"),
            train_dataset=stream,
        )


# ---------------------------------------------------------------------------------------------------------------------
# One selector: the older switches map onto it; a conflict is refused, naming both.


@pytest.mark.parametrize(
    "fields, name",
    [
        ({}, "reinforce_ada"),
        ({"multiround_adaptive_downsampling": False}, "grpo"),
        ({"multiround_adaptive_downsampling": False, "dynamic_sampling": True}, "dapo"),
        ({"dynamic_sampling": True}, "reinforce_ada"),  # DAPO's refills on top of the rounds
        ({"sampling_budget": 4.0}, "budget"),
        ({"reinforce_ada_est": True}, "est"),
    ],
)
def test_the_older_switches_map_onto_the_selector(fields, name, tmp_path):
    args = config(tmp_path, **fields)
    assert args.sampler == name
    again = config(tmp_path, sampler=name, **{k: v for k, v in fields.items() if k == "dynamic_sampling"})
    for field in (
        "multiround_adaptive_downsampling",
        "dynamic_sampling",
        "reinforce_ada_est",
        "sampling_budget",
        "advantage_estimator",
        "prompt_memory",
    ):
        assert getattr(again, field) == getattr(args, field), field


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"sampler": "grpo", "reinforce_ada_est": True}, "sampler='grpo' conflicts with reinforce_ada_est=True"),
        ({"sampler": "est", "sampling_budget": 4.0}, "sampler='est' conflicts with sampling_budget=4.0"),
        ({"sampler": "knapsack", "reinforce_ada_est": True}, "which selects sampler='est'"),
        ({"sampler": "grpo", "dynamic_sampling": True}, "set sampler='dapo'"),
        ({"sampler": "thompson"}, r"sampler='thompson': use one of \['budget', 'dapo'"),
        ({"sampler": "no_such_module.Sampler"}, "cannot import 'Sampler' from 'no_such_module'"),
        ({"sampler_kwargs": "[1, 2]"}, "sampler_kwargs=.* must be a dict"),
        ({"sampler_kwargs": "{max_samples: 3}"}, "sampler_kwargs=.* is not JSON"),
        ({"sampler": "reinforce_ada", "multiround_adaptive_downsampling": False}, "which selects sampler='grpo'"),
        ({"sampler": "knapsack", "dynamic_sampling": True}, "dynamic_sampling=True extends Reinforce-Ada's rounds"),
        ({"sampler": "knapsack", "pipelined_rounds": True}, "pipelined_rounds=True extends Reinforce-Ada's rounds"),
        (
            {"prompt_memory_group_column": "kind", "prompt_memory": True},
            "only informs a sampler that reads the prompt",
        ),
        # A sampler's own settings, refused when the config is built, not once the model has loaded
        ({"sampler": "knapsack", "sampler_kwargs": {"max_sample": 32}}, "do not fit sampler='knapsack'"),
        ({"sampler": "knapsack", "advantage_estimator": "maxrl"}, "sampler='knapsack' gives its own advantages"),
        ({"sampler": "retire_solved", "sampler_kwargs": '{"threshold": 1.5}'}, "threshold=1.5 must be a pass rate"),
        ({"sampler": "grpo", "sampler_kwargs": {"threshold": 0.5}}, "do not fit sampler='grpo'"),
    ],
)
def test_a_conflicting_or_unknown_sampler_is_refused_naming_the_fix(fields, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        config(tmp_path, **fields)


class OwnRounds(BuiltInRounds):
    """A subclass of a built-in: a sampler of the user's."""


def test_a_built_in_given_as_its_class_path_or_instance_is_that_built_in(tmp_path):
    """Est named, given as its class or its import path, or as an instance, gets Est's estimator and Ada-EMA memory
    (a name-only default would give GRPO's advantages to its groups of N_x); a subclass is the user's sampler."""
    for written in ("trl_ada.samplers.est.Est", BuiltInEst):
        args = config(tmp_path, sampler=written)
        assert (args.sampler, args.advantage_estimator, args.prompt_memory_decay) == ("est", "est", 0.9), written
        assert args.prompt_memory_prior_beta == 16.0 and args.reinforce_ada_est
    instance = BuiltInEst(config(tmp_path, sampler="est"))
    args = config(tmp_path, sampler=instance)
    assert args.sampler is instance and load_sampler(args) is instance
    assert (args.sampler_name, args.advantage_estimator, args.prompt_memory_decay) == ("est", "est", 0.9)
    with pytest.raises(ValueError, match="with a sampler instance"):
        config(tmp_path, sampler=instance, sampler_kwargs={"threshold": 0.5})
    assert config(tmp_path, sampler=BuiltInRounds).sampler == "reinforce_ada"
    own = config(tmp_path, sampler=OwnRounds)
    assert own.sampler is OwnRounds and own.sampler_name.endswith("OwnRounds") and own.advantage_estimator == "grpo"


def test_a_group_column_informs_every_sampler_that_reads_the_memory(tmp_path):
    assert config(tmp_path, sampler="knapsack", prompt_memory_group_column="kind").prompt_memory_group_column == "kind"
    custom = config(tmp_path, sampler="trl_ada.samplers.est.Est", prompt_memory=True, prompt_memory_group_column="k")
    assert custom.prompt_memory_group_column == "k"


def test_a_sampler_with_unequal_groups_and_no_advantages_is_refused(tiny_model, tmp_path, monkeypatch, caplog):
    """TRL's group statistics read groups of num_generations rows: a sampler that keeps other sizes must give its
    advantages (or use an estimator that reads its pools)."""
    (tmp_path / "uneven_sampler.py").write_text(
        "from trl_ada.core.sampling import PromptResult\nfrom trl_ada.samplers import Selection\n\n"
        "class Uneven:\n    def __init__(self, args):\n        pass\n\n"
        "    def sample(self, context, target):\n"
        "        counts = [6, 2] * (target // 2)\n"
        "        pools = context.sample(list(range(target)), counts)\n"
        "        return Selection(results={p: PromptResult(pool, list(range(len(pool))), 1, True)\n"
        "                                  for p, pool in enumerate(pools)}, chosen=list(range(target)))\n\n"
        "class Given(Uneven):\n"
        "    def sample(self, context, target):\n"
        "        selection = super().sample(context, target)\n"
        "        selection.advantages = {p: [0.25] * len(r.selected) for p, r in selection.results.items()}\n"
        "        return selection\n"
    )
    monkeypatch.chdir(tmp_path)

    def trainer(folder, sampler, **kwargs):
        args = config(folder, sampler=f"uneven_sampler.{sampler}", max_steps=1, **kwargs)
        return recording_trainer(tiny_model, pass_rate_dataset([0.5, 0.25]), args)

    with pytest.raises(ValueError, match="gave no advantages"):
        trainer(tmp_path, "Uneven").train()
    pooled = trainer(tmp_path / "est", "Uneven", advantage_estimator="reinforce_ada")
    pooled.train()  # the pooled estimator reads groups of any size
    assert pooled.state.global_step == 1
    given = trainer(tmp_path / "given", "Given", advantage_estimator="reinforce_ada")
    with caplog.at_level(logging.WARNING):
        given.train()  # the sampler's own advantages win, and the unused estimator is named
    assert given._last_advantages.tolist() == [0.25] * 8
    assert "advantage_estimator='reinforce_ada''s, which is not used" in caplog.text


def test_a_sampler_returning_no_selection_is_named(tiny_model, tmp_path, monkeypatch):
    (tmp_path / "forgetful.py").write_text(
        "class Forgetful:\n    def __init__(self, args):\n        pass\n\n"
        "    def sample(self, context, target):\n        context.sample(list(range(target)), 4)\n"
    )
    monkeypatch.chdir(tmp_path)
    args = config(tmp_path, sampler="forgetful.Forgetful", max_steps=1)
    trainer = recording_trainer(tiny_model, pass_rate_dataset([0.5]), args)
    with pytest.raises(
        TypeError, match=r"sampler='forgetful.Forgetful''s sample\(\) returned NoneType: it must return"
    ):
        trainer.train()


def test_iid_reward_is_each_prompts_first_call_when_calls_differ_in_size(tiny_model, tmp_path, monkeypatch):
    """A sampler asking 2 samples of every prompt, then 6 more: `sampling/iid_reward` is the mean reward of the first
    call (what the reward function scored first), not an equal share of the pool per reported round."""
    (tmp_path / "two_then_six.py").write_text(
        "from trl_ada.core.sampling import PromptResult\nfrom trl_ada.samplers import Selection\n\n"
        "class TwoThenSix:\n    def __init__(self, args):\n        pass\n\n"
        "    def sample(self, context, target):\n"
        "        prompts = list(range(target))\n"
        "        first, more = context.sample(prompts, 2), context.sample(prompts, 6)\n"
        "        results = {p: PromptResult(a + b, [0, 1, 2, 3], rounds=2, finished=True)\n"
        "                   for p, a, b in zip(prompts, first, more)}\n"
        "        return Selection(results=results, chosen=prompts)\n"
    )
    monkeypatch.chdir(tmp_path)
    trainer = recording_trainer(
        tiny_model, pass_rate_dataset([0.5, 0.25]), config(tmp_path, sampler="two_then_six.TwoThenSix", max_steps=1)
    )
    trainer.train()
    target = 2  # prompts a step: per_device_train_batch_size 8 / num_generations 4
    scored = [reward for _, _, reward in trainer.reward_funcs[0].__wrapped__.log]  # in the order scored
    assert len(scored) == 8 * target
    first_call = sum(scored[: 2 * target]) / (2 * target)
    pools = [scored[2 * p : 2 * p + 2] + scored[2 * target + 6 * p : 2 * target + 6 * p + 6] for p in range(target)]
    equal_share = sum(sum(pool[:4]) for pool in pools) / (4 * target)  # len(pool) // rounds, the pool's first half
    assert first_call != equal_share, "the test's rewards cannot tell the two readings apart"
    logged = next(h["sampling/iid_reward"] for h in trainer.state.log_history if "sampling/iid_reward" in h)
    assert logged == pytest.approx(first_call)


# ---------------------------------------------------------------------------------------------------------------------
# Your own advantages: a function from the pool to one advantage per kept sample.


class KeepsResults(AdaGRPOTrainer):
    def _replace_advantages(self, output, results):
        super()._replace_advantages(output, results)
        if results is not None:
            self.kept_results = [list(r.pool_rewards) for r in results], [list(r.selected) for r in results]
            self.installed = self._last_advantages.tolist()


@pytest.mark.slow
def test_an_advantage_function_of_the_users_gives_the_advantages(tiny_model, tmp_path, monkeypatch):
    page = open(os.path.join(ROOT, "docs", "samplers.md")).read()
    code = re.search(r"## Your own advantages.*?```python\n(.*?)```", page, re.S).group(1)
    (tmp_path / "my_advantages.py").write_text(code)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(code, namespace)
    trainer = KeepsResults(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        train_dataset=pass_rate_dataset([0.5, 0.25]),
        args=config(tmp_path, max_steps=1, round_repeat=4, advantage_estimator="my_advantages.leave_one_out"),
    )
    trainer.train()
    pools, selected = trainer.kept_results
    expected = [a for pool, kept in zip(pools, selected) for a in namespace["leave_one_out"](pool, kept, 0.7)]
    assert trainer.installed == pytest.approx(expected)
    assert any(len(pool) > 4 for pool in pools)  # a pool larger than the group: the function saw it whole
    with pytest.raises(ValueError, match="advantage_estimator='my_advantages.nothing': cannot import 'nothing'"):
        config(tmp_path, advantage_estimator="my_advantages.nothing")


# ---------------------------------------------------------------------------------------------------------------------
# docs/samplers.md's example, as written, trained through trl-ada-train from the user's folder.


def docs_example() -> tuple[str, str]:
    page = open(os.path.join(ROOT, "docs", "samplers.md")).read()
    code = re.search(r"`my_sampler.py`.*?```python\n(.*?)```", page, re.S).group(1)
    command = re.search(r"Train with it.*?```bash\n(.*?)```", page, re.S).group(1).replace("\\\n", " ")
    return code, command


@pytest.mark.slow
def test_the_docs_example_sampler_trains_from_a_users_file(tmp_path):
    """The page's file and command exactly as printed, run from a folder outside the clone (no recipes/ there: the
    recipe is the one shipped with the package), through the installed console script."""
    code, command = docs_example()
    (tmp_path / "my_sampler.py").write_text(code)
    assert shlex.split(command)[0] == "trl-ada-train" and not (tmp_path / "recipes").exists()
    bin_dir = os.path.dirname(sys.executable)
    done = subprocess.run(
        command,
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env={
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": "",
            "HF_HUB_OFFLINE": "1",
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "using the recipe shipped with trl-ada" in done.stdout
    assert "sampling/skip_solved/skipped" in done.stdout + done.stderr
    assert (tmp_path / "out" / "skip-solved" / "model.safetensors").exists()


def test_the_docs_table_names_every_built_in_sampler():
    page = open(os.path.join(ROOT, "docs", "samplers.md")).read()
    named = set(re.findall(r'^\| `"(\w+)"`', page, re.M))
    assert named == set(BUILT_IN)


class NeedsFourGenerations:
    """A user's sampler that checks a field when the config is built, as the built-ins check theirs."""

    @staticmethod
    def check_fields(args) -> None:
        if args.num_generations != 4:
            raise ValueError(f"num_generations={args.num_generations}: NeedsFourGenerations samples groups of 4.")

    def __init__(self, args):
        raise AssertionError("built: the check should have run at the config, before any trainer")

    def sample(self, context, target):
        raise AssertionError("sampled")


@pytest.mark.parametrize("given", ["class", "instance", "import path"])
def test_a_users_check_fields_runs_when_the_config_is_built(tmp_path, given):
    instance = object.__new__(NeedsFourGenerations)  # an instance, as a user could pass one, without its __init__
    sampler = {
        "class": NeedsFourGenerations,
        "instance": instance,
        "import path": "tests.samplers.test_samplers.NeedsFourGenerations",
    }[given]
    with pytest.raises(ValueError, match="num_generations=2: NeedsFourGenerations samples groups of 4"):
        config(tmp_path, sampler=sampler, num_generations=2, per_device_train_batch_size=4)
    assert (
        config(tmp_path, sampler=sampler, num_generations=4).sampler_name
        == "tests.samplers.test_samplers.NeedsFourGenerations"
    )


def test_a_users_sampler_that_does_not_take_the_config_is_named(tmp_path, monkeypatch):
    (tmp_path / "argless.py").write_text(
        "class Argless:\n    def __init__(self):\n        pass\n\n    def sample(self, context, target):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"sampler='argless.Argless' cannot be built as Argless\(args\)"):
        load_sampler(config(tmp_path, sampler="argless.Argless"))


class SeesTheResolvedConfig:
    """A user's sampler whose check reads fields the config resolves (None until then)."""

    seen: list[tuple] = []

    @staticmethod
    def check_fields(args) -> None:
        SeesTheResolvedConfig.seen.append((args.advantage_estimator, args.pool_baseline, args.prompt_memory_decay))

    def __init__(self, args):
        pass

    def sample(self, context, target):
        raise AssertionError("sampled")


def test_a_users_check_fields_sees_the_config_as_resolved(tmp_path):
    SeesTheResolvedConfig.seen.clear()
    config(tmp_path, sampler=SeesTheResolvedConfig)
    assert SeesTheResolvedConfig.seen == [("grpo", "threshold_fraction", 0.5)]  # the defaults a sampler of theirs gets


def test_a_sampler_given_as_module_colon_class_is_the_class(tmp_path, monkeypatch):
    """`module:Class`, as tools, environments and reward functions take it, also for a module of the current folder
    (a name without a dot)."""
    (tmp_path / "my_rule.py").write_text(
        "class Mine:\n    def __init__(self, args):\n        pass\n\n    def sample(self, context, target):\n        pass\n"
    )
    monkeypatch.chdir(tmp_path)
    assert config(tmp_path, sampler="my_rule:Mine").sampler_name == "my_rule:Mine"
    assert config(tmp_path, sampler="trl_ada.samplers.est:Est").sampler_name == "est"  # a built-in, by its class
    with pytest.raises(ValueError, match="num_generations=2: NeedsFourGenerations"):
        config(tmp_path, sampler="tests.samplers.test_samplers:NeedsFourGenerations", num_generations=2)


def test_a_sampler_instance_is_recorded_by_name_so_a_resume_sees_the_same_settings(tmp_path):
    """An instance's text holds its address: recorded as such, every resume would warn of a changed sampler."""
    from trl_ada.integration.resume import changed_settings, sampling_settings

    Alternating = notebook_class()
    saved, resumed = (sampling_settings(config(tmp_path, sampler=Alternating(None))) for _ in range(2))
    assert saved["sampler"] == "a_notebook_cell.Alternating"
    assert changed_settings(saved, resumed) == {}


class KeepsState:
    """A user's sampler whose state is `state` (set per test)."""

    state = None

    def __init__(self, args):
        pass

    def state_dict(self):
        return self.state

    def load_state_dict(self, state):
        pass

    def sample(self, context, target):
        raise AssertionError("sampled")


@pytest.mark.parametrize(
    "state, problem",
    [
        ({"retired": {3, 5}}, r"holds a value JSON cannot store .*set"),
        ({"pass_rate": {5: 0.5}}, r"has the key 5, which JSON hands back as text"),
        ({"count": np.int64(3)}, r"holds a value JSON cannot store .*int64"),
        ([1, 2], r"returned a list, not a dict"),
    ],
    ids=["a set", "an int key", "a numpy int", "a list"],
)
def test_a_sampler_state_a_checkpoint_cannot_hold_is_refused_when_the_trainer_is_built(
    state, problem, tiny_model, tmp_path, monkeypatch
):
    """Refused before training, naming the sampler's state_dict and the fix; a state that fits is written as is."""
    from trl_ada.integration.resume import SAMPLER_STATE_FILE, save_sampler_state

    monkeypatch.setattr(KeepsState, "state", state)
    dataset = pass_rate_dataset([0.5], repeat=8)
    with pytest.raises(TypeError, match=rf"test_samplers\.KeepsState\.state_dict\(\) {problem}.*a dict of JSON"):
        recording_trainer(tiny_model, dataset, tiny_args(tmp_path, sampler=KeepsState))
    assert not list(tmp_path.rglob(SAMPLER_STATE_FILE))
    monkeypatch.setattr(KeepsState, "state", {"retired": [3, 5], "pass_rate": {"5": 0.5}})
    save_sampler_state(str(tmp_path), KeepsState(None))
    assert json.loads((tmp_path / SAMPLER_STATE_FILE).read_text()) == KeepsState.state


DRAWS_NOTHING = """from trl_ada.samplers import Selection


class DrawsNothing:
    draws_prompts = False

    def __init__(self, args):
        pass

    def sample(self, context, target):
        context.draw(1)
"""


def test_a_sampler_that_declares_it_draws_nothing_and_draws_is_told_which_setting(tiny_model, tmp_path, monkeypatch):
    """A map-style training set and no refill stream: the sampler's own draws_prompts = False is what to change."""
    (tmp_path / "draws_nothing.py").write_text(DRAWS_NOTHING)
    monkeypatch.chdir(tmp_path)
    trainer = recording_trainer(
        tiny_model, pass_rate_dataset([0.5], repeat=8), tiny_args(tmp_path, sampler="draws_nothing.DrawsNothing")
    )
    with pytest.raises(
        ValueError, match="sampler='draws_nothing.DrawsNothing' called draw.. but declares draws_prompts"
    ):
        trainer.train()
