"""Advantage estimators, one function each, on plain lists of floats (one group at a time).

- `pooled_advantages`: Reinforce-Ada's estimator. The baseline comes from the prompt's WHOLE sampled pool
  (`global_stat_est=True` in the reference), not from the n kept samples, so a hard prompt whose balanced group is
  half right still gets a large push on its rare right answers.
- `reinforce_rej_advantages`: Minimal-RL's Reinforce-rej, raw rewards for mixed groups, zero for uniform ones.
- `raft_advantages`: Minimal-RL's RAFT++, train on positive rewards only.

GRPO's own group statistics are not restated here: the trainer keeps TRL's computation for them.

    >>> pooled_advantages([1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0])  # 3 of 8 right: baseline 0.375
    [0.625, 0.625, -0.375, -0.375]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BASELINES = ("threshold_fraction", "mean_reward")

__all__ = ["BASELINES", "pool_statistics", "pooled_advantages", "reinforce_rej_advantages", "raft_advantages"]


def _unbiased_std(values: Sequence[float], mean: float) -> float:
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def pool_statistics(
    pool_rewards: Sequence[float], positive_threshold: float = 0.7, baseline: str = "threshold_fraction"
) -> tuple[float, float]:
    """(mean, std) of a prompt's pool, as Reinforce-Ada's advantage uses them.

    "threshold_fraction" (the reference): statistics of the 0/1 vector "reward > threshold", so the mean is the
    fraction of positives; for 0/1 rewards this equals the mean reward. "mean_reward" (opt-in deviation): statistics
    of the rewards themselves (NaN rewards, i.e. unscorable samples, are left out). A pool of one sample or fewer
    has mean 0 and std 1.
    """
    if baseline not in BASELINES:
        raise ValueError(f"baseline={baseline!r} is not one of {BASELINES}.")
    if baseline == "threshold_fraction":
        values = [1.0 if r > positive_threshold else 0.0 for r in pool_rewards]
    else:
        values = [float(r) for r in pool_rewards if not math.isnan(r)]
    if len(values) <= 1:
        return 0.0, 1.0
    mean = sum(values) / len(values)
    return mean, _unbiased_std(values, mean)


def pooled_advantages(
    selected_rewards: Sequence[float],
    pool_rewards: Sequence[float],
    positive_threshold: float = 0.7,
    scale_by_std: bool = False,
    baseline: str = "threshold_fraction",
) -> list[float]:
    """One advantage per selected reward: `r_i - mean_pool`, or `(r_i - mean_pool) / (max(std_pool, 1e-6) + 1e-6)`.

    The reference script and the paper use no std division (`scale_by_std=False`).
    """
    mean, std = pool_statistics(pool_rewards, positive_threshold, baseline)
    if scale_by_std:
        denominator = max(std, 1e-6) + 1e-6
        return [(r - mean) / denominator for r in selected_rewards]
    return [r - mean for r in selected_rewards]


def reinforce_rej_advantages(group_rewards: Sequence[float], atol: float = 1e-6) -> list[float]:
    """The raw rewards if the group is mixed, zeros if all rewards are equal (within `atol`, not float equality)."""
    finite = [r for r in group_rewards if not math.isnan(r)]
    if not finite or max(finite) - min(finite) <= atol:
        return [0.0] * len(group_rewards)
    return [float(r) for r in group_rewards]


def raft_advantages(group_rewards: Sequence[float]) -> list[float]:
    """max(r, 0): only samples with a positive reward are pushed up; the rest give no gradient."""
    return [max(float(r), 0.0) for r in group_rewards]
