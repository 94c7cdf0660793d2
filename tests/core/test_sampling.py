"""The elimination state machine against algorithm.md: worked examples, brute force, and properties."""

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ada.core.advantages import pooled_advantages
from trl_ada.core.sampling import (
    EliminationRule,
    exit_rule,
    normalize_choice,
    run_adaptive_sampling,
    select_at_exit,
    select_fallback,
)


def scripted(rounds_per_prompt):
    """sample_round that replays fixed rewards: rounds_per_prompt[p][r] is the list of rewards of round r."""
    calls = []

    def sample_round(active, k):
        calls.append((list(active), k))
        out = []
        for p in active:
            r = sum(1 for a, _ in calls if p in a) - 1
            out.append(rounds_per_prompt[p][r])
        return out

    return sample_round, calls


def round_with(num_correct, m=8):
    return [1.0] * num_correct + [0.0] * (m - num_correct)


# algorithm.md, "Worked examples (n=4, M=8, R=4, 0/1 rewards)": per row, the per-round correct counts, then for each
# choice: (rounds, (pos, neg), group signs, advantages).
WORKED = [
    (
        [3],
        {
            "balanced": (1, (3, 5), "++--", [0.625, 0.625, -0.375, -0.375]),
            "positive_focused": (1, (3, 5), "++--", [0.625, 0.625, -0.375, -0.375]),
        },
    ),
    (
        [1, 0, 0, 0],
        {
            "balanced": (4, (1, 31), "+---", [0.969, -0.031, -0.031, -0.031]),
            "positive_focused": (1, (1, 7), "+---", [0.875, -0.125, -0.125, -0.125]),
        },
    ),
    (
        [0, 2],
        {
            "balanced": (2, (2, 14), "++--", [0.875, 0.875, -0.125, -0.125]),
            "positive_focused": (2, (2, 14), "++--", [0.875, 0.875, -0.125, -0.125]),
        },
    ),
    (
        [0, 1, 1],
        {
            "balanced": (3, (2, 22), "++--", [0.917, 0.917, -0.083, -0.083]),
            "positive_focused": (2, (1, 15), "+---", [0.938, -0.063, -0.063, -0.063]),
        },
    ),
    (
        [8, 8, 8, 8],
        {"balanced": (4, (32, 0), "++++", [0, 0, 0, 0]), "positive_focused": (1, (8, 0), "++++", [0, 0, 0, 0])},
    ),
    (
        [8, 8, 8, 7],
        {
            "balanced": (4, (31, 1), "+++-", [0.031, 0.031, 0.031, -0.969]),
            "positive_focused": (1, (8, 0), "++++", [0, 0, 0, 0]),
        },
    ),
    (
        [0, 0, 0, 0],
        {"balanced": (4, (0, 32), "----", [0, 0, 0, 0]), "positive_focused": (4, (0, 32), "----", [0, 0, 0, 0])},
    ),
]


@pytest.mark.parametrize("choice", ["balanced", "positive_focused"])
@pytest.mark.parametrize("row", range(len(WORKED)))
def test_worked_examples(row, choice):
    counts, expected = WORKED[row]
    rounds, (pos, neg), signs, advantages = expected[choice]
    sample_round, _ = scripted([[round_with(c) for c in counts]])
    (result,) = run_adaptive_sampling(
        1, sample_round, EliminationRule(num_generations=4, round_repeat=8, max_rounds=4, choice=choice)
    )
    assert result.rounds == rounds
    assert sum(r > 0.7 for r in result.pool_rewards) == pos
    assert len(result.pool_rewards) - pos == neg
    assert "".join("+" if r > 0.7 else "-" for r in result.selected_rewards) == signs
    got = pooled_advantages(result.selected_rewards, result.pool_rewards)
    assert got == pytest.approx(advantages, abs=1e-3)


def test_worked_example_pools_are_shared_by_prompts_of_one_batch():
    """All rows at once: prompts leave at different rounds and each only samples while active."""
    sample_round, calls = scripted([[round_with(c) for c in counts] for counts, _ in WORKED])
    results = run_adaptive_sampling(len(WORKED), sample_round, EliminationRule(num_generations=4, choice="balanced"))
    assert [r.rounds for r in results] == [e["balanced"][0] for _, e in WORKED]
    assert [a for a, _ in calls] == [[0, 1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6], [1, 3, 4, 5, 6], [1, 4, 5, 6]]
    assert all(k == 8 for _, k in calls)


def test_earliest_positives_and_negatives_are_kept_in_order():
    rewards = [0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert select_at_exit(rewards, 4, 0.7) == [1, 4, 0, 2]


def test_threshold_is_strict():
    # 0.7 itself is negative: a pool of 0.7s never has a positive.
    assert select_at_exit([0.7, 0.71, 0.7, 0.7], 2, 0.7) == [1, 0]
    assert not exit_rule(0, 8, 4, "positive_focused")
    sample_round, _ = scripted([[[0.7] * 8] * 4])
    (result,) = run_adaptive_sampling(1, sample_round, EliminationRule(choice="positive_focused"))
    assert not result.finished and result.rounds == 4


def test_choice_spellings():
    assert normalize_choice("positive-focused") == "positive_focused"
    assert normalize_choice("balanced") == "balanced"
    with pytest.raises(ValueError, match="reinforce_ada_choice"):
        normalize_choice("greedy")


def test_positive_focused_fallback_rounding_uses_the_reference_formula():
    # With pos > 0 the fallback is unreachable from the driver, but the function is public: check the formula.
    pool = [1.0] * 3 + [0.0] * 29  # ceil(3/32*4) = 1 positive, 3 negatives
    assert select_fallback(pool, 4, 0.7, "positive_focused") == [0, 1, 2, 3][:1] + [3, 4, 5]
    pool = [1.0] * 20 + [0.0] * 12  # ceil(20/32*4) = 3
    assert len([i for i in select_fallback(pool, 4, 0.7, "positive_focused") if pool[i] > 0.7]) == 3
    pool = [1.0] * 32  # clamp to take-1 = 3 positives, no negatives: shortfall filled by positives
    assert select_fallback(pool, 4, 0.7, "positive_focused") == [0, 1, 2, 3]


def test_random_selection_is_seeded_and_still_balanced():
    rewards = [[float(i % 3 == 0) for i in range(8)]]
    picks = set()
    for seed in range(20):
        sample_round, _ = scripted([[rewards[0]]])
        (result,) = run_adaptive_sampling(1, sample_round, EliminationRule(selection="random", seed=seed))
        assert [r > 0.7 for r in result.selected_rewards] == [True, True, False, False]
        picks.add(tuple(result.selected))
    assert len(picks) > 1
    sample_round, _ = scripted([[rewards[0]]])
    again = run_adaptive_sampling(1, sample_round, EliminationRule(selection="random", seed=3))[0].selected
    sample_round, _ = scripted([[rewards[0]]])
    assert run_adaptive_sampling(1, sample_round, EliminationRule(selection="random", seed=3))[0].selected == again


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"round_repeat": 2, "num_generations": 4}, "round_repeat"),
        ({"max_rounds": 0}, "max_rounds"),
        ({"selection": "best"}, "selection"),
        ({"choice": "x"}, "reinforce_ada_choice"),
    ],
)
def test_rule_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EliminationRule(**kwargs)


def test_driver_rejects_a_callback_returning_the_wrong_shape():
    with pytest.raises(ValueError, match="sample_round must return"):
        run_adaptive_sampling(2, lambda a, k: [[0.0] * k])


# ---------------------------------------------------------------------------------------------------------------------
# Brute force: an independent statement of the rules, written as "sort by (sign, position) and count".


def reference_group(pool, n, tau, choice, finished):
    signs = [r > tau for r in pool]
    pos = [i for i in range(len(pool)) if signs[i]]
    neg = [i for i in range(len(pool)) if not signs[i]]
    if finished:
        want_pos = min(n // 2, len(pos))
        want_neg = min(n - want_pos, len(neg))
        if want_pos + want_neg < n and len(pos) > want_pos:
            want_pos = min(len(pos), n - want_neg)
        elif want_pos + want_neg < n:
            want_neg = min(len(neg), n - want_pos)
    else:
        take = min(n, len(pool))
        if choice == "balanced":
            want_pos, want_neg = n // 2, n - n // 2
        else:
            want_pos = min(max(math.ceil(len(pos) / len(pool) * n), 1), take - 1)
            want_neg = take - want_pos
        want_pos, want_neg = min(want_pos, len(pos)), min(want_neg, len(neg))
        while want_pos + want_neg < take and want_pos < len(pos):
            want_pos += 1
        while want_pos + want_neg < take and want_neg < len(neg):
            want_neg += 1
    return pos[:want_pos] + neg[:want_neg]


def reference_run(rounds, n, m, max_rounds, tau, choice):
    """Return (pool, rounds_used, finished, group) for one prompt fed `rounds` (a list of M-sized reward lists)."""
    pool = []
    for used in range(1, max_rounds + 1):
        pool = pool + list(rounds[used - 1])
        p = sum(r > tau for r in pool)
        q = len(pool) - p
        done = (p >= n // 2 and q >= n - n // 2) if choice == "balanced" else p >= 1
        if done:
            return pool, used, True, reference_group(pool, n, tau, choice, True)
    return pool, max_rounds, False, reference_group(pool, n, tau, choice, False)


@pytest.mark.parametrize("choice", ["balanced", "positive_focused"])
@pytest.mark.parametrize("n, m, max_rounds", [(2, 2, 3), (3, 3, 2), (4, 4, 2), (2, 3, 2), (4, 5, 1)])
def test_exhaustive_small_cases_match_brute_force(choice, n, m, max_rounds):
    """Every 0/1 reward sequence of length m * max_rounds, as one prompt each, in one batch."""
    sequences = list(itertools.product([0.0, 1.0], repeat=m * max_rounds))
    rounds = [[list(seq[r * m : (r + 1) * m]) for r in range(max_rounds)] for seq in sequences]
    sample_round, _ = scripted(rounds)
    results = run_adaptive_sampling(len(rounds), sample_round, EliminationRule(n, m, max_rounds, choice, 0.5))
    for prompt_rounds, result in zip(rounds, results):
        pool, used, finished, group = reference_run(prompt_rounds, n, m, max_rounds, 0.5, choice)
        assert (result.pool_rewards, result.rounds, result.finished, result.selected) == (pool, used, finished, group)


# ---------------------------------------------------------------------------------------------------------------------
# Properties on random policies.


@st.composite
def configs(draw):
    n = draw(st.integers(2, 8))
    m = draw(st.integers(n, 12))
    return draw(st.integers(1, 12)), EliminationRule(
        num_generations=n,
        round_repeat=m,
        max_rounds=draw(st.integers(1, 5)),
        choice=draw(st.sampled_from(["balanced", "positive_focused"])),
        positive_threshold=draw(st.sampled_from([0.0, 0.5, 0.7])),
        selection=draw(st.sampled_from(["earliest", "random"])),
        seed=draw(st.integers(0, 10**6)),
    )


@settings(max_examples=300, deadline=None)
@given(config=configs(), policy_seed=st.integers(0, 10**6), reward_kind=st.sampled_from(["binary", "shaped"]))
def test_properties(config, policy_seed, reward_kind):
    num_prompts, rule = config
    rng = random.Random(policy_seed)
    pass_rate = [rng.choice([0.0, 0.02, 0.2, 0.5, 0.9, 1.0]) for _ in range(num_prompts)]
    generated = []

    def sample_round(active, k):
        generated.append(len(active) * k)
        if reward_kind == "binary":
            return [[float(rng.random() < pass_rate[p]) for _ in range(k)] for p in active]
        return [[rng.choice([0.0, 0.3, 0.7, 0.71, 1.0]) for _ in range(k)] for _ in active]

    results = run_adaptive_sampling(num_prompts, sample_round, rule)
    n, m, tau = rule.num_generations, rule.round_repeat, rule.positive_threshold
    assert len(results) == num_prompts  # no prompt lost
    assert sum(generated) == sum(len(r.pool_rewards) for r in results)  # every sample lands in exactly one pool
    for r in results:
        assert len(r.selected) == n
        assert len(set(r.selected)) == n and all(0 <= i < len(r.pool_rewards) for i in r.selected)
        assert len(r.pool_rewards) == r.rounds * m  # pools grow by whole rounds
        signs = [r.pool_rewards[i] > tau for i in r.selected]
        assert signs == sorted(signs, reverse=True)  # positives first
        num_pos = sum(x > tau for x in r.pool_rewards)
        if r.finished:
            assert exit_rule(num_pos, len(r.pool_rewards) - num_pos, n, rule.choice)
            # ... and it was not already met one round earlier (successive elimination stops at once).
            earlier = r.pool_rewards[: (r.rounds - 1) * m]
            earlier_pos = sum(x > tau for x in earlier)
            assert r.rounds == 1 or not exit_rule(earlier_pos, len(earlier) - earlier_pos, n, rule.choice)
            if rule.choice == "balanced":
                assert sum(signs) == n // 2
        else:
            assert r.rounds == rule.max_rounds
            assert not exit_rule(num_pos, len(r.pool_rewards) - num_pos, n, rule.choice)
        if rule.selection == "earliest":
            pos_idx = [i for i in r.selected if r.pool_rewards[i] > tau]
            all_pos = [i for i, x in enumerate(r.pool_rewards) if x > tau]
            assert pos_idx == all_pos[: len(pos_idx)]
