"""Unscorable completions (every reward function returned None: NaN reward) have TRL 1.16's meaning everywhere.

GRPOTrainer leaves an unscorable completion out of its group's baseline and std and gives it advantage 0. Here: it is
neither positive nor negative in the pools and exit rules, a group takes it only when the scorable samples run out,
the pooled baseline leaves it out, its advantage is 0, and the memory does not count it as a trial. With finite
rewards nothing changes (tests/core/test_sampling.py holds the reference's worked examples and brute force).
"""

import math
import random
import re
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ada.core.advantages import pool_statistics, pooled_advantages, raft_advantages, reinforce_rej_advantages
from trl_ada.core.budget import run_budgeted_sampling
from trl_ada.core.dynamic import has_signal
from trl_ada.core.memory import GroupPrior, PromptMemory, observe_step
from trl_ada.core.sampling import (
    EliminationRule,
    count_signs,
    exit_rule,
    run_adaptive_sampling,
    select_at_exit,
    select_fallback,
    selection_rng,
)


NAN = float("nan")


def isnan(x):
    return isinstance(x, float) and math.isnan(x)


# ---------------------------------------------------------------------------------------------------------------------
# Pools and exit rules.


def test_unscorable_is_neither_positive_nor_negative():
    assert count_signs([1.0, NAN, 0.0, NAN, 0.7, 0.71], 0.7) == (2, 2)
    assert count_signs([NAN] * 8, 0.7) == (0, 0)


def test_a_balanced_prompt_does_not_retire_on_negatives_never_scored():
    """Two positives and six unscorable samples: before, the six counted as negatives and the prompt retired with a
    group ++ plus two unscorable "negatives". Now it samples on, and retires when real negatives come."""
    prompt = EliminationRule(4, 8, 4, "balanced", 0.7).prompt(0)
    assert not prompt.add_round([1.0, 1.0] + [NAN] * 6)
    assert not prompt.add_round([NAN] * 7 + [0.0])  # one negative: not yet
    assert prompt.add_round([NAN, 0.0] + [NAN] * 6)
    assert prompt.result.finished and prompt.result.rounds == 3
    assert prompt.result.selected == [0, 1, 15, 17]


def test_a_prompt_whose_samples_are_all_unscorable_is_sampled_to_the_end_and_gets_a_fallback_group():
    for choice in ("balanced", "positive_focused"):
        (result,) = run_adaptive_sampling(
            1, lambda active, k: [[NAN] * k for _ in active], EliminationRule(4, 8, 4, choice)
        )
        assert (result.rounds, result.finished, result.selected) == (4, False, [0, 1, 2, 3])
        assert pooled_advantages(result.selected_rewards, result.pool_rewards) == [0.0] * 4


def test_unscorable_samples_fill_a_group_only_when_scorable_ones_run_out():
    pool = [NAN, 1.0, NAN, 0.0, NAN, NAN, 1.0, NAN]
    # exit (positive_focused, one positive is enough): 2 positives, 1 negative, then the earliest unscorable one
    assert select_at_exit(pool, 4, 0.7) == [1, 6, 3, 0]
    # fallback, balanced: the same; positive_focused: the share of positives is over the scorable samples (2 of 3)
    assert select_fallback(pool, 4, 0.7, "balanced") == [1, 6, 3, 0]
    assert select_fallback(pool, 4, 0.7, "positive_focused") == [1, 6, 3, 0]
    # enough scorable samples: no unscorable one is taken, whatever its position
    pool = [NAN, 0.0, 0.0, NAN, 0.0, 0.0, 1.0, NAN]
    assert select_fallback(pool, 4, 0.7, "balanced") == [6, 1, 2, 4]
    assert select_fallback(pool, 4, 0.7, "positive_focused") == [6, 1, 2, 4]


def _scorable_only(pool):
    index = [i for i, r in enumerate(pool) if not math.isnan(r)]
    return index, [pool[i] for i in index]


rewards = st.sampled_from([0.0, 1.0, 0.3, 0.7, 0.71, NAN])


@settings(max_examples=400, deadline=None)
@given(
    n=st.integers(2, 8),
    extra=st.integers(0, 12),
    data=st.data(),
    tau=st.sampled_from([0.0, 0.5, 0.7]),
    choice=st.sampled_from(["balanced", "positive_focused"]),
    random_selection=st.booleans(),
    seed=st.integers(0, 99),
)
def test_selection_is_the_reference_on_the_scorable_samples_then_unscorable_ones(
    n, extra, data, tau, choice, random_selection, seed
):
    """Whatever the pool: the group is full (n distinct indices), its scorable part is exactly what the reference
    rule selects from the pool without its unscorable samples, and unscorable samples come last, only as many as the
    scorable ones are short of n, earliest first under "earliest" selection."""
    pool = data.draw(st.lists(rewards, min_size=n + extra, max_size=n + extra))
    index, scorable = _scorable_only(pool)
    rng = (lambda: selection_rng("random", seed, 0)) if random_selection else (lambda: None)
    num_pos, num_neg = count_signs(pool, tau)
    for selected, reference in (
        (select_fallback(pool, n, tau, choice, rng()), select_fallback(scorable, n, tau, choice, rng())),
        *(
            [(select_at_exit(pool, n, tau, rng()), select_at_exit(scorable, n, tau, rng()))]
            if exit_rule(num_pos, num_neg, n, choice)
            else []
        ),
    ):
        assert len(selected) == len(set(selected)) == n
        kept_nan = [i for i in selected if math.isnan(pool[i])]
        assert selected[: n - len(kept_nan)] == [index[i] for i in reference]
        assert len(kept_nan) == max(0, n - len(scorable))
        if not random_selection:
            assert kept_nan == [i for i, r in enumerate(pool) if math.isnan(r)][: len(kept_nan)]


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 6),
    m_extra=st.integers(0, 4),
    max_rounds=st.integers(1, 4),
    prompts=st.integers(1, 8),
    choice=st.sampled_from(["balanced", "positive_focused"]),
    tau=st.sampled_from([0.0, 0.5, 0.7]),
    seed=st.integers(0, 10**6),
)
def test_rounds_count_only_scorable_samples(n, m_extra, max_rounds, prompts, choice, tau, seed):
    rng = random.Random(seed)
    pass_rate = [rng.choice([0.0, 0.1, 0.5, 1.0]) for _ in range(prompts)]
    nan_rate = [rng.choice([0.0, 0.3, 0.8, 1.0]) for _ in range(prompts)]

    def sample_round(active, k):
        return [
            [NAN if rng.random() < nan_rate[p] else float(rng.random() < pass_rate[p]) for _ in range(k)]
            for p in active
        ]

    m = n + m_extra
    results = run_adaptive_sampling(prompts, sample_round, EliminationRule(n, m, max_rounds, choice, tau))
    for r in results:
        assert len(r.selected) == len(set(r.selected)) == n  # full groups, always
        num_pos, num_neg = count_signs(r.pool_rewards, tau)
        assert r.finished == exit_rule(num_pos, num_neg, n, choice)
        earlier_pos, earlier_neg = count_signs(r.pool_rewards[: (r.rounds - 1) * m], tau)
        assert r.rounds == 1 or not exit_rule(earlier_pos, earlier_neg, n, choice)
        assert r.finished or r.rounds == max_rounds
        selected = r.selected_rewards
        nan_count = sum(map(math.isnan, selected))
        assert nan_count == max(0, n - num_pos - num_neg)  # unscorable only when the scorable ones run out
        assert all(math.isnan(x) for x in selected[n - nan_count :])  # ... and last
        advantages = pooled_advantages(selected, r.pool_rewards, tau)
        assert all(a == 0.0 for a, x in zip(advantages, selected) if math.isnan(x))
        assert not any(math.isnan(a) for a in advantages)


# ---------------------------------------------------------------------------------------------------------------------
# Advantages and signal.


def test_pooled_baseline_leaves_unscorable_samples_out():
    pool = [1.0, NAN, 0.0, 0.0, NAN, 1.0, 0.0, NAN]  # 2 of 5 scorable samples right
    assert pool_statistics(pool) == pytest.approx((0.4, math.sqrt(0.3)))
    assert pool_statistics(pool, baseline="mean_reward") == pytest.approx((0.4, math.sqrt(0.3)))
    assert pooled_advantages([1.0, 0.0, NAN], pool) == pytest.approx([0.6, -0.4, 0.0])
    assert pooled_advantages([1.0, 0.0, NAN], pool, scale_by_std=True)[2] == 0.0


@pytest.mark.parametrize("ones", [1, 2, 4])
@pytest.mark.parametrize("baseline", ["threshold_fraction", "mean_reward"])
def test_a_group_of_ones_and_unscorable_samples_moves_no_weight(ones, baseline):
    """GRPOTrainer: nanmean of [1, nan, nan, nan] is 1, so the 1.0 gets 0 and the rest 0. Even with a single scorable
    sample in the pool (the reference's "pool of one" guard is about the pool, not its scorable part)."""
    pool = [1.0] * ones + [NAN] * (8 - ones)
    group = [1.0] * min(ones, 4) + [NAN] * (4 - min(ones, 4))
    for scale in (False, True):
        assert pooled_advantages(group, pool, 0.7, scale, baseline) == [0.0] * 4


def test_a_pool_without_a_scorable_sample_gives_zero_advantages():
    assert pool_statistics([NAN] * 8) == (0.0, 1.0)
    assert pooled_advantages([NAN] * 4, [NAN] * 8, scale_by_std=True) == [0.0] * 4


def test_finite_pools_keep_the_reference_guard():
    assert pool_statistics([]) == pool_statistics([1.0]) == pool_statistics([NAN]) == (0.0, 1.0)


def test_other_estimators_give_unscorable_samples_zero():
    assert reinforce_rej_advantages([1.0, NAN, 0.0, NAN]) == [1.0, 0.0, 0.0, 0.0]
    assert reinforce_rej_advantages([1.0, NAN, 1.0, NAN]) == [0.0] * 4
    assert raft_advantages([1.0, NAN, 0.5, -1.0]) == [1.0, 0.0, 0.5, 0.0]


def test_signal_is_read_on_scorable_rewards():
    assert not has_signal([1.0, NAN, NAN, NAN])
    assert not has_signal([1.0, NAN, 1.0, NAN])
    assert not has_signal([NAN] * 4)
    assert has_signal([1.0, NAN, 0.0, NAN])


# ---------------------------------------------------------------------------------------------------------------------
# Budget and memory.


def _budgeted(table, target, budget, top_up=2):
    drawn = dict.fromkeys(table, 0)

    def sample_round(prompts, k):
        out = [table[p][drawn[p] : drawn[p] + k] for p in prompts]
        for p in prompts:
            drawn[p] += k
        return out

    return run_budgeted_sampling(
        list(table),
        draw=lambda k: [],
        predict=lambda p: (1.0, 1.0, 0),
        coin=lambda p: 0.0,
        sample_round=sample_round,
        target=target,
        budget=budget,
        num_generations=4,
        top_up=top_up,
        positive_threshold=0.7,
    )


def test_budget_tops_up_a_pool_whose_only_negatives_are_unscorable():
    """[1, nan, nan, nan] is not mixed (no scorable negative): it is topped up until a real negative comes. Before,
    the unscorable samples counted as negatives and it was never topped up."""
    table = {0: [1.0, NAN, NAN, NAN, NAN, 0.0] + [1.0] * 10, 1: [1.0, 0.0, 1.0, 0.0] + [0.0] * 12}
    out = _budgeted(table, target=2, budget=12)
    results = dict(out.sampled)
    assert results[0].pool_rewards[:6] == pytest.approx([1.0, NAN, NAN, NAN, NAN, 0.0], nan_ok=True)
    assert len(results[1].pool_rewards) == 4  # already mixed: never topped up
    assert results[0].finished and results[0].selected == [0, 5, 1, 2]
    assert pooled_advantages(results[0].selected_rewards, results[0].pool_rewards) == [0.5, -0.5, 0.0, 0.0]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), target=st.integers(1, 5), extra=st.integers(0, 20))
def test_budget_groups_are_full_and_mixed_means_scorable_positive_and_negative(seed, target, extra):
    rng = random.Random(seed)
    table = {p: [rng.choice([0.0, 1.0, NAN, NAN]) for _ in range(200)] for p in range(target)}
    out = _budgeted(table, target, 4 * target + extra)
    assert out.spent <= 4 * target + extra
    for _, r in out.sampled:
        num_pos, num_neg = count_signs(r.pool_rewards, 0.7)
        assert len(r.selected) == len(set(r.selected)) == 4
        assert r.finished == (num_pos > 0 and num_neg > 0)
        assert sum(math.isnan(x) for x in r.selected_rewards) == max(0, 4 - num_pos - num_neg)


def test_memory_visit_of_unscorable_completions_only_is_no_trial():
    memory = PromptMemory(decay=0.5)
    memory.update([7], [4], [2], step=0)
    metrics = observe_step(memory, [7], [0], [0], step=1)  # every completion unscorable: 0 trials, no error
    assert "sampling/memory_brier" not in metrics
    assert memory.posterior(7) == (1.0 + 1.0, 1.0 + 1.0, 2)  # the counts only decayed: 2 of 4 -> 1 of 2
    groups = GroupPrior(decay=1.0)
    groups.update([], [], [])  # a step whose visits all had fewer than two scorable samples ages and adds nothing
    assert groups.prior("any") is None


# ---------------------------------------------------------------------------------------------------------------------
# End to end: the real AdaGRPOTrainer, a reward returning None for some samples, a whole prompt, or all but one.

KINDS = ["partial", "ones", "none", "plain"]  # prompt kinds, one of each per step


def _none_reward():
    """partial: TRL's "not applicable" on every other completion, else 1 with probability 0.5; ones: 1.0 for the first
    completion of the prompt, None for every other (a pool of one 1.0 and unscorable samples); none: always None;
    plain: 1 with probability 0.3, never None. Records every (prompt, completion, reward) in order."""
    log, seen = [], {}

    def reward(prompts, completions, kind, **kwargs):
        out = []
        for prompt, completion, k in zip(prompts, completions, kind):
            tag, text = prompt[-1]["content"], completion[0]["content"]
            crc = zlib.crc32(text.encode())
            if k == "partial":
                value = None if crc % 2 else float(crc % 1000 < 500)
            elif k == "ones":
                value = 1.0 if tag not in seen else None
                seen[tag] = True
            elif k == "none":
                value = None
            else:
                value = float(crc % 1000 < 300)
            out.append(value)
            log.append((tag, text, NAN if value is None else value))
        return out

    reward.log = log
    return reward


def _grpo_group_advantages(rewards):
    """GRPOTrainer's advantages of one group (sum_then_normalize, scale_rewards="group"), NaN for unscorable."""
    import torch
    from trl.trainer.utils import nanstd

    r = torch.tensor(rewards)
    return torch.nan_to_num((r - torch.nanmean(r)) / (nanstd(r) + 1e-4), nan=0.0).tolist()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["balanced", "budget"])
def test_end_to_end_unscorable_rows_get_trl_semantics(tiny_model, tmp_path, mode):
    from datasets import Dataset

    from tests.helpers.trainers import tiny_args
    from trl_ada import AdaGRPOTrainer
    from trl_ada.data import make_prompt

    class Recorder(AdaGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            self.recorded = getattr(self, "recorded", []) + [(len(reward.log), output)]
            return output

    reward = _none_reward()
    dataset = Dataset.from_list(
        [{"prompt": make_prompt(f"q{i} {KINDS[i % 4]}"), "kind": KINDS[i % 4]} for i in range(32)]
    )
    extra = (
        dict(sampling_budget=6.0, prompt_memory_group_column="kind")
        if mode == "budget"
        else dict(reinforce_ada_choice="balanced")
    )
    args = tiny_args(tmp_path, prompt_memory=True, **extra)
    trainer = Recorder(model=tiny_model, reward_funcs=reward, args=args, train_dataset=dataset)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)

    tok, start, seen_kinds, visits = trainer.processing_class, 0, set(), []
    for end, output in trainer.recorded:
        step_log, start = reward.log[start:end], end
        pools = {}
        for tag, text, value in step_log:
            pools.setdefault(tag, []).append((text, value))
        visits += [count_signs([v for _, v in pool], 0.7) for pool in pools.values()]
        for g in range(0, output["completion_ids"].shape[0], 4):
            prompt = tok.decode(output["prompt_ids"][g][output["prompt_mask"][g].bool()])
            number, kind = re.search(r"q(\d+) (\w+)", prompt).groups()
            [tag] = [t for t in pools if t.startswith(f"q{number} {kind} ")]
            seen_kinds.add(kind)
            pool = pools[tag]
            texts = [
                tok.decode(output["completion_ids"][i][output["completion_mask"][i].bool()], skip_special_tokens=True)
                for i in range(g, g + 4)
            ]
            kept = []
            for text in texts:  # each kept completion's own reward, from the log of its prompt's pool
                values = {repr(v) for t, v in pool if t == text}
                assert len(values) == 1, f"{text!r} was not generated for {tag!r}, or scored twice differently"
                kept.append(next(v for t, v in pool if t == text))
            advantages = output["advantages"][g : g + 4].tolist()
            num_pos, num_neg = count_signs([v for _, v in pool], 0.7)
            # Independent computation: unscorable rows 0; others r minus the positives' share of scorable samples.
            expected = [0.0 if isnan(r) else r - num_pos / (num_pos + num_neg) for r in kept]
            assert advantages == pytest.approx(expected, abs=1e-6)
            # Full groups; unscorable rows only when the scorable samples run out, and last.
            assert sum(map(isnan, kept)) == max(0, 4 - num_pos - num_neg)
            assert all(isnan(r) for r in kept[4 - sum(map(isnan, kept)) :])
            if mode == "balanced":
                finished = num_pos >= 2 and num_neg >= 2
                if finished:  # it stopped at the first round where the scorable counts met the exit rule
                    first = next(
                        k
                        for k in range(8, len(pool) + 1, 8)
                        if exit_rule(*count_signs([v for _, v in pool[:k]], 0.7), 4, "balanced")
                    )
                    assert first == len(pool)
                else:
                    assert len(pool) == 32  # sampled every round, never retired on samples never scored
            if kind == "ones":  # one 1.0 and unscorable samples: GRPOTrainer moves no weight, nor does Ada
                assert (num_pos, num_neg) == (1, 0) and kept[0] == 1.0 and all(map(isnan, kept[1:]))
                assert advantages == [0.0] * 4 == _grpo_group_advantages(kept)
            if kind == "none":
                assert all(map(isnan, kept)) and advantages == [0.0] * 4
    assert seen_kinds == set(KINDS)
    # The prompt memory counts only scorable samples as trials (each prompt was visited once).
    table = trainer.prompt_memory.table()
    assert sorted(zip(table["samples"], table["positives"])) == sorted((p + n, p) for p, n in visits)
    assert (0.0, 0.0) in zip(table["samples"], table["positives"])  # the prompts that were never scorable
