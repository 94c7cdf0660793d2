"""Reinforce-Ada-Est (`trl_ada.core.est`): allocate N_x per prompt from the remembered pass rates, sample them all
in one round and keep every sample.

Each rank's prompts share its generation batch (num_generations each on average), so every rank hands TRL exactly
the rows GRPOTrainer would; the one round then splits over the ranks along the same boundaries.
"""

from __future__ import annotations

import math

from trl_ada.core.est import allocate, allocation_metrics
from trl_ada.core.sampling import PromptResult
from trl_ada.samplers.protocol import SamplingContext, Selection


def nanmean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else float("nan")


class Est:
    def __init__(self, args):
        self.args = args

    def sample(self, context: SamplingContext, target: int) -> Selection:
        args, n, world = self.args, context.num_generations, context.world_size
        pass_rates = []
        for prompt in range(target):  # from before this step: the memory takes this step's samples afterwards
            a, b, _ = context.pass_rate_posterior(prompt)
            pass_rates.append(a / (a + b))
        per_rank = target // world
        counts = [
            count
            for rank in range(world)
            for count in allocate(
                pass_rates[rank * per_rank : (rank + 1) * per_rank],
                n * per_rank,
                exponent=args.est_exponent,
                eps=args.est_epsilon,
                min_samples=args.est_min_samples,
                max_samples=args.est_max_samples,
            )
        ]
        context.begin_batch()
        pools = context.sample(list(range(target)), counts)
        results = {
            prompt: PromptResult(pool_rewards=pool, selected=list(range(len(pool))), rounds=1, finished=True)
            for prompt, pool in enumerate(pools)
        }
        means = [nanmean(pool) for pool in pools]
        metrics = allocation_metrics(pass_rates, counts, means)
        # Round one is every sample here, N_x per prompt: weigh prompts equally, as GRPO's n per prompt does.
        metrics["sampling/iid_reward"] = nanmean(means)
        return Selection(results=results, chosen=list(range(target)), metrics=metrics)
