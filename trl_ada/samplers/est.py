"""Reinforce-Ada-Est (`trl_ada.core.est`): allocate N_x per prompt from the remembered pass rates, sample them all
in one round and keep every sample.

Each rank's prompts share its generation batch (num_generations each on average), so every rank hands TRL exactly
the rows GRPOTrainer would; the one round then splits over the ranks along the same boundaries.
"""

from __future__ import annotations

import numpy as np

from trl_ada.core.est import allocate, allocation_metrics
from trl_ada.core.sampling import PromptResult
from trl_ada.samplers.protocol import SamplingContext, Selection, check_range


class Est:
    draws_prompts = False  # it samples the batch's own prompts, N_x each
    uses_prompt_memory = True  # N_x comes from each prompt's remembered pass rate

    def __init__(self, args):
        self.args = args

    @staticmethod
    def check_fields(args) -> None:
        """The `est_*` fields (AdaGRPOConfig calls this at construction, whichever sampler is selected)."""
        n = args.num_generations
        check_range(
            args, "est_exponent", 0, 1, fix=": 0.5 is the paper's Est, 1.0 its implicit arm (no residual weight)"
        )
        check_range(args, "est_epsilon", 0, above=True, fix=" (default 1e-6)")
        least = f"one sample has no baseline, and every prompt must get it out of an average of num_generations={n}"
        check_range(args, "est_min_samples", 2, n, integer=True, fix=f": {least}. Set est_min_samples=2")
        if args.est_max_samples is not None:  # None: no cap
            most = ", as est_max_samples >= num_generations (the average); or None (no cap)"
            check_range(args, "est_max_samples", n, integer=True, fix=most)

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
        metrics = allocation_metrics(pass_rates, counts, [float(np.nanmean(pool)) for pool in pools])
        # Round one is every sample here, N_x per prompt: weigh prompts equally, as GRPO's n per prompt does; the
        # reward TRL trains on, as GRPO logs it.
        metrics["sampling/iid_reward"] = float(
            np.nanmean([np.nanmean(context.trained_rewards(p)) for p in range(target)])
        )
        return Selection(results=results, chosen=list(range(target)), metrics=metrics)
