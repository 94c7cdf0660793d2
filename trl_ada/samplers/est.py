"""Reinforce-Ada-Est (`trl_ada.core.est`): allocate N_x per prompt from the remembered pass rates, sample them all
in one round and keep every sample.

Each rank's prompts share its generation batch (num_generations each on average), so every rank hands TRL exactly
the rows GRPOTrainer would; the one round then splits over the ranks along the same boundaries.
"""

from __future__ import annotations

from trl_ada.core.advantages import nanmean
from trl_ada.core.est import allocate, allocation_metrics
from trl_ada.core.sampling import PromptResult
from trl_ada.samplers.protocol import SamplingContext, Selection, is_integer, is_number


class Est:
    draws_prompts = False  # it samples the batch's own prompts, N_x each

    def __init__(self, args):
        self.args = args

    @staticmethod
    def check_fields(args) -> None:
        """The `est_*` fields (AdaGRPOConfig calls this at construction, whichever sampler is selected)."""
        if not is_number(args.est_exponent) or not 0 <= args.est_exponent <= 1:
            raise ValueError(
                f"est_exponent={args.est_exponent!r} must be in [0, 1]: 0.5 is the paper's Est, 1.0 its implicit arm "
                "(the exponent splits the weight 1/p between allocation and advantage)."
            )
        if not is_number(args.est_epsilon) or args.est_epsilon <= 0:
            raise ValueError(f"est_epsilon={args.est_epsilon!r} must be a finite number > 0 (default 1e-6).")
        n = args.num_generations
        if not is_integer(args.est_min_samples, 2, n):
            raise ValueError(
                f"est_min_samples={args.est_min_samples!r} must be an integer in [2, num_generations={n}]: one sample "
                "has no baseline, and every prompt must be able to get it out of an average of num_generations. "
                "Set est_min_samples=2."
            )
        if args.est_max_samples is not None and not is_integer(args.est_max_samples, n):
            raise ValueError(
                f"est_max_samples={args.est_max_samples!r} must be None (no cap) or an integer >= num_generations "
                f"({n}): the prompts get num_generations each on average."
            )

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
        metrics = allocation_metrics(pass_rates, counts, [nanmean(pool) for pool in pools])
        # Round one is every sample here, N_x per prompt: weigh prompts equally, as GRPO's n per prompt does; the
        # reward TRL trains on, as GRPO logs it.
        metrics["sampling/iid_reward"] = nanmean([nanmean(context.trained_rewards(p)) for p in range(target)])
        return Selection(results=results, chosen=list(range(target)), metrics=metrics)
