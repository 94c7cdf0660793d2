"""Budgeted sampling (`trl_ada.core.budget`): screen candidates with the prompt memory, n samples each, top-ups
within the cap of `sampling_budget` completions per trained prompt."""

from __future__ import annotations

from trl_ada.core.budget import run_budgeted_sampling, step_budget, step_coin
from trl_ada.samplers.protocol import SamplingContext, Selection, check_range


class Budget:
    draws_prompts = True  # screened-out prompts are replaced from the training set

    def __init__(self, args):
        self.args = args

    @staticmethod
    def check_fields(args) -> None:
        """`sampling_budget` and the `budget_*` fields (AdaGRPOConfig calls this at construction, whichever sampler
        is selected)."""
        n = args.num_generations
        if args.sampling_budget is not None:
            parity = f" (num_generations ({n}) per trained prompt): use sampling_budget={float(n)} for GRPO parity"
            check_range(args, "sampling_budget", n, fix=parity)
        check_range(args, "budget_top_up", 1, integer=True, fix=" (default 2)")
        check_range(args, "budget_skip_threshold", 0, 1, fix=" (default 0.5)")
        check_range(args, "budget_skip_decay", 0, 1, above=True, fix=" (default 0.9)")
        starve = " (default 0.05): a floor of 0 could starve a prompt forever"
        check_range(args, "budget_explore_floor", 0, 1, above=True, fix=starve)

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
