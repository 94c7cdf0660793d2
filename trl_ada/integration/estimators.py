"""The configured advantage estimator over a step's chosen prompts (`AdaGRPOConfig.advantage_estimator`).

TRL computes GRPO's group advantages; the trainer then replaces them with these, computed from the whole pool of
each prompt's samples (`trl_ada.core.advantages`, `trl_ada.core.est`), in the order TRL laid the kept rows out.
"""

from __future__ import annotations

import itertools
import math

import torch
from accelerate.logging import get_logger

from trl_ada.config import ADVANTAGE_ESTIMATORS
from trl_ada.core.advantages import (
    maxrl_advantages,
    pooled_advantages,
    raft_advantages,
    reinforce_rej_advantages,
)
from trl_ada.core.est import est_advantages
from trl_ada.core.sampling import PromptResult
from trl_ada.samplers import check_advantages, import_path


logger = get_logger(__name__)


def step_advantages(
    args,
    rewards: list[float],
    num_generations: int,
    results: list[PromptResult] | None,
    trained: list[PromptResult] | None = None,
) -> list[list[float]]:
    """Advantages of the kept samples, one list per chosen prompt (`rewards`: the kept samples' weighted rewards, in
    TRL's order; `results`: the chosen prompts' sampling, None when sampling is off, whose pools hold the rewards that
    decide a positive; `trained`: the same with the pools TRL trains on, the weighted sum, where they differ)."""
    estimator, n = args.advantage_estimator, num_generations
    trained = results if trained is None else trained
    if estimator not in ADVANTAGE_ESTIMATORS:  # the user's: each kept group's advantages from its pool
        return own_advantages(import_path(estimator, "advantage_estimator"), args, rewards, n, trained)
    if estimator == "est":  # every sample of the prompt, N_x of them: the kept group is the whole pool
        return [est_advantages(t.pool_rewards, args.est_epsilon, 1.0 - args.est_exponent) for t in trained]
    if estimator == "reinforce_ada":
        # The trained reward minus the pool's baseline: its share of positives (the reference) or its mean reward.
        share = args.pool_baseline == "threshold_fraction"
        return [
            pooled_advantages(
                t.selected_rewards,
                (r if share else t).pool_rewards,
                args.positive_threshold,
                args.pool_std_scaling,
                args.pool_baseline,
            )
            for r, t in zip(results, trained)
        ]
    sizes = [n] * (len(rewards) // n) if results is None else [len(r.selected) for r in results]
    ends = list(itertools.accumulate(sizes))
    groups = [rewards[end - size : end] for end, size in zip(ends, sizes)]  # each chosen prompt's kept samples
    if estimator == "maxrl":  # the mean over the prompt's whole pool where there is one, else over its group
        if trained is None:
            return [maxrl_advantages(group) for group in groups]
        return [maxrl_advantages(group, t.pool_rewards) for group, t in zip(groups, trained)]
    if estimator == "reinforce_rej":
        return [reinforce_rej_advantages(group) for group in groups]
    return [raft_advantages(group) for group in groups]


def own_advantages(function, args, rewards: list[float], n: int, results: list[PromptResult] | None):
    """`function(pool_rewards, selected, positive_threshold)` per chosen prompt (with sampling off, the pool is the
    group of n), checked to give one finite-or-NaN number per kept sample."""
    if results is None:
        results = [PromptResult(rewards[i : i + n], list(range(n)), 1, True) for i in range(0, len(rewards), n)]
    values = []
    for result in results:
        advantages = [
            float(a) for a in function(list(result.pool_rewards), list(result.selected), args.positive_threshold)
        ]
        if len(advantages) != len(result.selected):
            raise ValueError(
                f"advantage_estimator={args.advantage_estimator!r} returned {len(advantages)} advantages for a group "
                f"of {len(result.selected)} kept samples: return one per index in `selected`, in its order."
            )
        check_advantages(advantages, f"advantage_estimator={args.advantage_estimator!r}'s return value")
        values.append(advantages)
    return values


def warn_if_not_binary(args, results: list[PromptResult]) -> bool:
    """Warn (and return True) when the estimator reads rewards as what they are not: the pooled baseline counts
    positives of rewards that are not all 0 or 1; Est's scale (mean + eps) ** -(1 - est_exponent) takes them for
    pass rates in [0, 1]."""
    if args.advantage_estimator in ("est", "maxrl"):
        outside = [x for r in results for x in r.pool_rewards if not math.isnan(x) and not 0.0 <= x <= 1.0]
        if outside and args.advantage_estimator == "est":
            logger.warning(
                f"advantage_estimator='est': rewards outside [0, 1] (e.g. {outside[0]!r}). Est's advantage "
                "(r - mean) * (mean + est_epsilon) ** -(1 - est_exponent) takes the mean reward for a pass rate: a "
                f"mean at or below 0 gets the weight {args.est_epsilon ** -(1 - args.est_exponent):.3g}. Scale the "
                "rewards into [0, 1] (reward_weights, or the reward functions themselves)."
            )
        elif outside:
            logger.warning(
                f"advantage_estimator='maxrl': rewards outside [0, 1] (e.g. {outside[0]!r}). MaxRL's advantage "
                "(r - mean) / mean takes the mean reward for a pass rate: a group whose mean is 0 or below gets "
                "advantage 0. Scale the rewards into [0, 1] (reward_weights, or the reward functions themselves)."
            )
        return bool(outside)
    if args.advantage_estimator != "reinforce_ada" or args.pool_baseline != "threshold_fraction":
        return False
    if any(not math.isnan(x) and x not in (0.0, 1.0) for r in results for x in r.pool_rewards):
        logger.warning(
            "Rewards are not all 0 or 1: the pooled baseline is the fraction of pool rewards above "
            f"positive_threshold={args.positive_threshold} (the reference's rule), not the mean reward. For "
            "shaped rewards consider pool_baseline='mean_reward'."
        )
        return True
    return False


def zero_std_fraction(rewards: torch.Tensor, step) -> float:
    """TRL's `frac_reward_zero_std` over the step's real groups (Est's N_x rows, not num_generations): the share
    of the batch's samples whose group has zero std (`rewards`: the kept samples', all ranks)."""
    zero = 0
    for group in torch.split(rewards, [len(step.results[p].selected) for p in step.chosen]):
        finite = group[~torch.isnan(group)]
        # TRL's test: its nan-aware std close to 0 (one finite reward, or none: std NaN, not zero).
        if finite.numel() > 1 and torch.isclose(finite.std(), torch.zeros(())):
            zero += group.numel()
    return zero / rewards.numel()


def replace_advantages(
    output: dict,
    step,
    results: list[PromptResult] | None,
    rewards: torch.Tensor,
    args,
    rank: int,
    logged,
    warned,
    trained: list[PromptResult] | None = None,
) -> torch.Tensor | None:
    """Swap TRL's GRPO advantages in `output` for the sampler's own (`step.advantages`) or the configured
    estimator's, computed from `rewards` (the kept samples' weighted rewards, all ranks) and `results` (the chosen
    prompts' sampling, None when sampling is off; `trained`: with the pools TRL trains on, where they differ).
    Returns the installed advantages, all ranks; None where TRL's group statistics stand. `warned` holds the
    warnings given once per trainer."""
    if step is not None and step.advantages is not None:
        values = [step.advantages[p] for p in step.chosen]
    elif args.replaces_grpo_advantages:
        if "not_binary" not in warned and warn_if_not_binary(args, trained or results or []):
            warned.add("not_binary")
        values = step_advantages(args, rewards.tolist(), args.num_generations, results, trained)
    else:
        return None
    return install(output, values, rank, logged)


def install(output: dict, values: list[list[float]], rank: int, logged: list) -> torch.Tensor:
    """Put the step's advantages (all ranks, `values` per chosen prompt) in TRL's `output` (this rank's rows) and in
    its completions-table log (`logged`, where TRL left its GRPO advantages); return them, all ranks."""
    device = output["advantages"].device
    advantages = torch.tensor([a for group in values for a in group], dtype=torch.float32, device=device)
    advantages = torch.nan_to_num(advantages, nan=0.0)  # unscorable completions carry no signal, as in TRL
    local_rows = output["advantages"].shape[0]
    output["advantages"] = advantages[rank * local_rows : (rank + 1) * local_rows]
    for _ in range(min(len(logged), advantages.numel())):
        logged.pop()
    logged.extend(advantages.tolist())
    return advantages
