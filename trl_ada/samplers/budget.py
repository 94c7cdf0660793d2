"""Budgeted sampling (`trl_ada.core.budget`): screen candidates with the prompt memory, n samples each, top-ups
within the cap of `sampling_budget` completions per trained prompt."""

from __future__ import annotations

from trl_ada.core.budget import run_budgeted_sampling, step_budget, step_coin
from trl_ada.samplers.protocol import SamplingContext, Selection, is_integer, is_number


class Budget:
    draws_prompts = True  # screened-out prompts are replaced from the training set

    def __init__(self, args):
        self.args = args

    @staticmethod
    def check_fields(args) -> None:
        """`sampling_budget` and the `budget_*` fields (AdaGRPOConfig calls this at construction, whichever sampler
        is selected)."""
        budget, n = args.sampling_budget, args.num_generations
        if budget is not None and (not is_number(budget) or budget < n):
            raise ValueError(
                f"sampling_budget={budget!r} must be a number >= num_generations ({n}): every trained prompt needs "
                f"its group of num_generations samples. Use sampling_budget={float(n)} for GRPO parity."
            )
        if not is_integer(args.budget_top_up, 1):
            raise ValueError(f"budget_top_up={args.budget_top_up!r} must be an integer >= 1 (default 2).")
        if not is_number(args.budget_skip_threshold) or not 0 <= args.budget_skip_threshold <= 1:
            raise ValueError(f"budget_skip_threshold={args.budget_skip_threshold!r} must be in [0, 1] (default 0.5).")
        if not is_number(args.budget_skip_decay) or not 0 < args.budget_skip_decay <= 1:
            raise ValueError(f"budget_skip_decay={args.budget_skip_decay!r} must be in (0, 1] (default 0.9).")
        if not is_number(args.budget_explore_floor) or not 0 < args.budget_explore_floor <= 1:
            raise ValueError(
                f"budget_explore_floor={args.budget_explore_floor!r} must be in (0, 1] (default 0.05): a floor of "
                "0 could starve a prompt forever."
            )

    def sample(self, context: SamplingContext, target: int) -> Selection:
        args = self.args
        context.begin_batch()
        budgeted = run_budgeted_sampling(
            first=list(range(target)),
            draw=context.draw,
            predict=context.pass_rate_posterior,
            coin=lambda prompt: step_coin(args.seed, context.global_step, context.prompt_key(prompt), prompt),
            sample_round=context.sample,
            target=target,
            budget=step_budget(args.sampling_budget, target),
            num_generations=context.num_generations,
            top_up=args.budget_top_up,
            skip_threshold=args.budget_skip_threshold,
            explore_floor=args.budget_explore_floor,
            max_candidate_batches=args.max_refill_batches,
            positive_threshold=args.positive_threshold,
            world_size=context.world_size,
        )
        if context.memory is not None:
            context.memory.forget([context.prompt_key(prompt) for prompt in budgeted.skipped], args.budget_skip_decay)
        skipped = len(budgeted.skipped)
        metrics = {
            "sampling/prompts_skipped": float(skipped),
            "sampling/candidate_batches": float(budgeted.candidate_batches),
            "sampling/top_up_rounds": float(budgeted.top_up_rounds),
        }
        return Selection(
            results=dict(budgeted.sampled),
            chosen=[prompt for prompt, _ in budgeted.sampled],
            metrics=metrics,
            skipped=skipped,
        )
