"""Advantage estimators against algorithm.md's formulas."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ada.core.advantages import (
    maxrl_advantages,
    pool_statistics,
    pooled_advantages,
    raft_advantages,
    reinforce_rej_advantages,
)


def test_pooled_is_reward_minus_fraction_of_positives():
    pool = [1.0] * 2 + [0.0] * 14
    assert pooled_advantages([1.0, 1.0, 0.0, 0.0], pool) == pytest.approx([0.875, 0.875, -0.125, -0.125])


def test_balanced_group_advantages_do_not_sum_to_zero():
    # algorithm.md: 2 * (1 - 2 * mean) for n = 4.
    pool = [1.0] * 2 + [0.0] * 22
    mean = 2 / 24
    assert sum(pooled_advantages([1, 1, 0, 0], pool)) == pytest.approx(2 * (1 - 2 * mean))


def test_threshold_fraction_differs_from_mean_reward_on_shaped_rewards():
    pool = [0.9, 0.5, 0.5, 0.1]
    assert pool_statistics(pool, 0.7)[0] == pytest.approx(0.25)
    assert pool_statistics(pool, 0.7, baseline="mean_reward")[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="baseline"):
        pool_statistics(pool, 0.7, baseline="median")


def test_std_scaling_uses_unbiased_std_of_the_indicator():
    pool = [1.0, 0.0, 0.0, 0.0]
    std = math.sqrt((0.75**2 + 3 * 0.25**2) / 3)
    got = pooled_advantages([1.0, 0.0], pool, scale_by_std=True)
    assert got == pytest.approx([0.75 / (std + 1e-6), -0.25 / (std + 1e-6)])


def test_uniform_pool_with_std_scaling_gives_zero_not_nan():
    assert pooled_advantages([1.0] * 4, [1.0] * 32, scale_by_std=True) == [0.0] * 4


@pytest.mark.parametrize("pool", [[], [1.0]])
def test_degenerate_pool_has_mean_zero_std_one(pool):
    assert pool_statistics(pool) == (0.0, 1.0)
    assert pooled_advantages([1.0], pool, scale_by_std=True) == pytest.approx([1.0 / (1 + 1e-6)])


def test_reinforce_rej_uses_a_tolerance():
    assert reinforce_rej_advantages([0.3, 0.1 + 0.2, 0.3]) == [0.0, 0.0, 0.0]  # 0.1 + 0.2 != 0.3 in floats
    assert reinforce_rej_advantages([1.0, 0.0, 1.0]) == [1.0, 0.0, 1.0]
    assert reinforce_rej_advantages([float("nan")] * 2) == [0.0, 0.0]


def test_raft_keeps_positive_rewards_only():
    assert raft_advantages([1.0, 0.0, -0.5, 0.25]) == [1.0, 0.0, 0.0, 0.25]


@settings(max_examples=200, deadline=None)
@given(pool=st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=64))
def test_binary_pools_baselines_agree(pool):
    # For 0/1 rewards the thresholded fraction is exactly the mean reward (the reference's claim).
    a, b = pool_statistics(pool, 0.7), pool_statistics(pool, 0.7, baseline="mean_reward")
    assert a == pytest.approx(b)


def test_maxrl_is_reward_minus_mean_over_the_mean_by_hand():
    # one right in four: mean 1/4, (1 - 1/4) / (1/4) = 3, (0 - 1/4) / (1/4) = -1
    assert maxrl_advantages([1, 0, 0, 0]) == [3.0, -1.0, -1.0, -1.0]
    # three in four: mean 3/4, (1 - 3/4) / (3/4) = 1/3, -1
    assert maxrl_advantages([1, 1, 1, 0]) == pytest.approx([1 / 3, 1 / 3, 1 / 3, -1.0])
    # a kept group of two from a pool of eight with two right: the pool's mean 1/4
    assert maxrl_advantages([1, 0], [0, 1, 0, 0, 1, 0, 0, 0]) == [3.0, -1.0]
    # shaped rewards: mean 0.5, (0.8 - 0.5) / 0.5 = 0.6, (0.2 - 0.5) / 0.5 = -0.6
    assert maxrl_advantages([0.8, 0.2]) == pytest.approx([0.6, -0.6])


def test_maxrl_gives_zero_where_the_mean_is_zero_or_below_and_to_unscorable_samples():
    assert maxrl_advantages([0, 0, 0, 0]) == [0.0] * 4  # nothing succeeded: nothing to reweight
    assert maxrl_advantages([-1.0, 0.5]) == [0.0, 0.0]  # a negative mean would flip every sign
    assert maxrl_advantages([math.nan, 1.0, 0.0]) == [0.0, 1.0, -1.0]  # mean of the scorable 1 and 0: 0.5
    assert maxrl_advantages([math.nan, math.nan]) == [0.0, 0.0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=32))
def test_maxrl_over_a_binary_group_sums_to_zero_and_weighs_rare_successes_by_one_over_p(group):
    advantages = maxrl_advantages(group)
    p = sum(group) / len(group)
    if p == 0:
        assert advantages == [0.0] * len(group)
        return
    assert sum(advantages) == pytest.approx(0.0, abs=1e-9)
    assert all(a == pytest.approx(1 / p - 1 if r else -1.0) for a, r in zip(advantages, group))
