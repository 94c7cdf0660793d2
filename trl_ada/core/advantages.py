"""Advantage estimators, one function each, on plain lists of floats (one group at a time).

- `pooled_advantages`: Reinforce-Ada's estimator. The baseline comes from the prompt's WHOLE sampled pool
  (`global_stat_est=True` in the reference), not from the n kept samples, so a hard prompt whose balanced group is
  half right still gets a large push on its rare right answers.
- `reinforce_rej_advantages`: Minimal-RL's Reinforce-rej, raw rewards for mixed groups, zero for uniform ones.
- `raft_advantages`: Minimal-RL's RAFT++, train on positive rewards only.
- `maxrl_advantages`: MaxRL's (arXiv:2602.02710) `(r - mean) / mean`: GRPO's centring, scaled by the inverse pass rate
  instead of the std, so a prompt solved once in ten weighs ten times one solved every time.

GRPO's own group statistics are not restated here: the trainer keeps TRL's computation for them.

Unscorable samples (NaN reward: every reward function returned None) have TRL's meaning in every estimator: they are
left out of the baseline and get advantage 0.

    >>> pooled_advantages([1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0])  # 3 of 8 right: baseline 0.375
    [0.625, 0.625, -0.375, -0.375]
"""

from __future__ import annotations

import math
from collections.abc import Sequence


BASELINES = ("threshold_fraction", "mean_reward")

__all__ = [
    "BASELINES",
    "maxrl_advantages",
    "pool_statistics",
    "pooled_advantages",
    "raft_advantages",
    "reinforce_rej_advantages",
]


def _unbiased_std(values: Sequence[float], mean: float) -> float:
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def pool_statistics(
    pool_rewards: Sequence[float], positive_threshold: float = 0.7, baseline: str = "threshold_fraction"
) -> tuple[float, float]:
    """(mean, std) of a prompt's pool, as Reinforce-Ada's advantage uses them.

    "threshold_fraction" (the reference): statistics of the 0/1 vector "reward > threshold", so the mean is the
    fraction of positives; for 0/1 rewards this equals the mean reward. "mean_reward" (opt-in deviation): statistics
    of the rewards themselves. Either way NaN rewards (unscorable samples) are left out, as TRL's nan-aware group
    statistics leave them out: the mean is P / (P + N) over the scorable samples. A pool of one sample or fewer has
    mean 0 and std 1 (the reference's guard); a larger pool with a single scorable sample has that sample's value as
    its mean and std 0 (TRL's nanmean: its advantage is 0), and one with none has mean 0 and std 1 (every selected
    sample is unscorable, advantage 0).
    """
    if baseline not in BASELINES:
        raise ValueError(f"baseline={baseline!r} is not one of {BASELINES}.")
    if len(pool_rewards) <= 1:
        return 0.0, 1.0
    scorable = [float(r) for r in pool_rewards if not math.isnan(r)]
    if baseline == "threshold_fraction":
        values = [1.0 if r > positive_threshold else 0.0 for r in scorable]
    else:
        values = scorable
    if not values:
        return 0.0, 1.0
    mean = sum(values) / len(values)
    return mean, _unbiased_std(values, mean) if len(values) > 1 else 0.0


def pooled_advantages(
    selected_rewards: Sequence[float],
    pool_rewards: Sequence[float],
    positive_threshold: float = 0.7,
    scale_by_std: bool = False,
    baseline: str = "threshold_fraction",
) -> list[float]:
    """One advantage per selected reward: `r_i - mean_pool`, or `(r_i - mean_pool) / (max(std_pool, 1e-6) + 1e-6)`.

    The reference script and the paper use no std division (`scale_by_std=False`). An unscorable (NaN) selected
    sample gets 0, as in GRPOTrainer.
    """
    mean, std = pool_statistics(pool_rewards, positive_threshold, baseline)
    denominator = max(std, 1e-6) + 1e-6 if scale_by_std else 1.0
    return [
        0.0 if math.isnan(r) else ((r - mean) / denominator if scale_by_std else r - mean) for r in selected_rewards
    ]


def reinforce_rej_advantages(group_rewards: Sequence[float], atol: float = 1e-6) -> list[float]:
    """The raw rewards if the group is mixed, zeros if all rewards are equal (within `atol`, not float equality).

    Mixed or not is read on the scorable rewards; an unscorable (NaN) one gets 0."""
    finite = [r for r in group_rewards if not math.isnan(r)]
    if not finite or max(finite) - min(finite) <= atol:
        return [0.0] * len(group_rewards)
    return [0.0 if math.isnan(r) else float(r) for r in group_rewards]


def raft_advantages(group_rewards: Sequence[float]) -> list[float]:
    """max(r, 0): only samples with a positive reward are pushed up; the rest (unscorable ones too) give no gradient."""
    return [0.0 if math.isnan(r) else max(float(r), 0.0) for r in group_rewards]


def maxrl_advantages(selected_rewards: Sequence[float], pool_rewards: Sequence[float] | None = None) -> list[float]:
    """`(r_i - mean) / mean`, the mean over the prompt's pool (its kept group when `pool_rewards` is None), unscorable
    samples left out of it and given 0.

    Where the mean is 0 or below, every advantage is 0: with rewards in [0, 1] a mean of 0 means no sample succeeded
    (MaxRL's estimator then has no success to reweight: no gradient, as GRPO gives an all-wrong group none), and a
    negative mean would flip the sign of every advantage. Read rewards as pass rates, in [0, 1].

        >>> maxrl_advantages([1, 0, 0, 0])  # one in four: mean 0.25
        [3.0, -1.0, -1.0, -1.0]
    """
    pool = selected_rewards if pool_rewards is None else pool_rewards
    scorable = [float(r) for r in pool if not math.isnan(r)]
    mean = sum(scorable) / len(scorable) if scorable else 0.0
    if mean <= 0.0:
        return [0.0] * len(selected_rewards)
    return [0.0 if math.isnan(r) else (float(r) - mean) / mean for r in selected_rewards]
