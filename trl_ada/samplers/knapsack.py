"""Knapsack RL's allocation (Li et al., arXiv:2509.25849) as a sampler: each prompt's sample count from a knapsack
over the batch's budget, every sample kept, GRPO's advantages within each prompt's group.

The paper values a prompt of pass rate p given N samples as the chance that its group has a gradient at all times
what one such gradient is worth:

    value(N, p) = (1 - p^N - (1 - p)^N) * p * (1 - p)^2

and chooses the N_i that maximise the sum of values under a total budget. Where this file had to choose:

- **Budget**: GRPO's generation, `num_generations` per prompt on average, per rank (each rank hands GRPOTrainer its
  usual number of rows, as Est does), every N_i within [min_samples, max_samples].
- **Pass rate**: the prompt memory's posterior mean a / (a + b) (`prompt_memory` on; a prompt never seen gets the
  prior's mean), not the paper's last-epoch success rate: the prior keeps p inside (0, 1), so no prompt is valued 0
  and the paper's fallback for all-solved and all-failed prompts is not needed.
- **Solver**: value(N, p) is concave in N (its increments p^N (1 - p) + (1 - p)^N p shrink as N grows), so handing
  out the budget one sample at a time to the largest increment is an exact solution of this separable knapsack; ties
  go to the lower prompt number, so every rank computes the same allocation.
- **Per rank**: each rank allocates over its own prompts (as Est), so that it hands GRPOTrainer its usual rows; with
  few prompts per rank the knapsack has little to move (one prompt per rank is GRPO's allocation exactly).
- **Advantages**: GRPO's within each group of N_i samples, (r - mean) / (std + 1e-4) (`scale_rewards="none"`: not
  scaled; "batch" reads as "group" here); an unscorable sample gets 0.

Select it with `AdaGRPOConfig(sampler="knapsack")`; `sampler_kwargs={"min_samples": 2, "max_samples": 64}`.
Not yet measured against GRPO.
"""

from __future__ import annotations

import heapq
import math
import warnings

import numpy as np

from trl_ada.core.sampling import PromptResult
from trl_ada.samplers.protocol import SamplingContext, Selection, is_integer


def value(samples: int, pass_rate: float) -> float:
    """The paper's value of a prompt: P(a gradient) x its worth, p (1 - p)^2."""
    p = pass_rate
    return (1.0 - p**samples - (1.0 - p) ** samples) * p * (1.0 - p) ** 2


def allocate(pass_rates: list[float], budget: int, min_samples: int, max_samples: int) -> list[int]:
    """Sample counts that maximise the summed value under `sum == budget`, each within [min_samples, max_samples]."""
    if not min_samples * len(pass_rates) <= budget <= max_samples * len(pass_rates):
        raise ValueError(
            f"a budget of {budget} samples cannot give {len(pass_rates)} prompts between {min_samples} "
            f"and {max_samples} each."
        )
    counts = [min_samples] * len(pass_rates)

    def gain(i: int) -> float:
        return value(counts[i] + 1, pass_rates[i]) - value(counts[i], pass_rates[i])

    heap = [(-gain(i), i) for i in range(len(pass_rates)) if counts[i] < max_samples]
    heapq.heapify(heap)
    for _ in range(budget - sum(counts)):
        _, i = heapq.heappop(heap)
        counts[i] += 1
        if counts[i] < max_samples:
            heapq.heappush(heap, (-gain(i), i))
    return counts


def group_advantages(rewards: list[float], scale: bool) -> list[float]:
    """GRPO's advantages within one group (any size): unscorable samples (NaN) out of the statistics, advantage 0."""
    finite = [r for r in rewards if not math.isnan(r)]
    if len(finite) < 2:
        return [0.0] * len(rewards)
    mean = sum(finite) / len(finite)
    std = math.sqrt(sum((r - mean) ** 2 for r in finite) / (len(finite) - 1))
    return [0.0 if math.isnan(r) else (r - mean) / (std + 1e-4 if scale else 1.0) for r in rewards]


class Knapsack:
    """Knapsack RL's allocation over each rank's prompts, one round, every sample kept."""

    draws_prompts = False  # it allocates over the batch's own prompts
    uses_prompt_memory = True  # it values each prompt by its remembered pass rate

    def __init__(self, args, min_samples: int = 2, max_samples: int | None = None):
        n = args.num_generations
        max_samples = 8 * n if max_samples is None else max_samples
        if not (is_integer(min_samples, 2, n) and is_integer(max_samples, n)):
            raise ValueError(
                f"sampler='knapsack' needs integer sampler_kwargs 2 <= min_samples ({min_samples!r}) <= "
                f"num_generations ({n}) <= max_samples ({max_samples!r}): a group of one has no baseline, and the "
                "budget is num_generations samples per prompt on average. Set sampler_kwargs={'min_samples': 2, "
                f"'max_samples': {8 * n}}}."
            )
        if args.advantage_estimator != "grpo":
            raise ValueError(
                f"sampler='knapsack' gives its own advantages (GRPO's within each group), so advantage_estimator="
                f"{args.advantage_estimator!r} would not be used: leave advantage_estimator unset."
            )
        if not args.prompt_memory:
            raise ValueError(
                "sampler='knapsack' values each prompt by its remembered pass rate: set prompt_memory=True."
            )
        self.args, self.min_samples, self.max_samples = args, min_samples, max_samples

    @staticmethod
    def check_fields(args) -> None:
        """TRL's `scale_rewards` as the knapsack reads it (AdaGRPOConfig calls this at construction)."""
        if args.sampler_name == "knapsack" and args.scale_rewards == "batch":  # its advantages are its own, per group
            warnings.warn(
                "scale_rewards='batch' has no effect with sampler='knapsack': its advantages are GRPO's within each "
                "group, scaled by the group's std ('group'; 'none' leaves them unscaled).",
                UserWarning,
                stacklevel=5,  # the caller of AdaGRPOConfig
            )

    def sample(self, context: SamplingContext, target: int) -> Selection:
        n, per_rank = context.num_generations, target // context.world_size
        pass_rates = []
        for prompt in range(target):
            a, b, _ = context.pass_rate_posterior(prompt)
            pass_rates.append(a / (a + b))
        counts = [
            count
            for start in range(0, target, per_rank)
            for count in allocate(
                pass_rates[start : start + per_rank], n * per_rank, self.min_samples, self.max_samples
            )
        ]
        context.begin_batch()
        pools = context.sample(list(range(target)), counts)
        scale = self.args.scale_rewards != "none"
        results = {
            p: PromptResult(pool_rewards=pool, selected=list(range(len(pool))), rounds=1, finished=True)
            for p, pool in enumerate(pools)
        }
        trained = [context.trained_rewards(p) for p in range(target)]  # what TRL trains on: the weighted sum
        advantages = {p: group_advantages(pool, scale) for p, pool in enumerate(trained)}
        metrics = {
            # Every sample is round one here, N_x per prompt: weigh prompts equally, as GRPO's n per prompt does.
            "sampling/iid_reward": float(np.nanmean([np.nanmean(pool) for pool in trained])),
            "sampling/knapsack/samples_max": float(max(counts)),
            "sampling/knapsack/samples_min": float(min(counts)),
            "sampling/knapsack/value": sum(value(c, p) for c, p in zip(counts, pass_rates)) / target,
        }
        return Selection(results=results, chosen=list(range(target)), advantages=advantages, metrics=metrics)
