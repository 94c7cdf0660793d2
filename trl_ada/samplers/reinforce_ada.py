"""Reinforce-Ada's rounds (`trl_ada.core.sampling`: successive elimination, the exit rules, the fixed-size group),
with DAPO's dynamic sampling on top when it is on (`trl_ada.core.dynamic`: drop the prompts without signal, sample
refills in their place). With adaptive sampling off, one round of `num_generations` per prompt: GRPO's group.

With `pipelined_rounds=True` the rounds run barrier-free on each rank's colocated engine (`context.run_rounds`),
with the same results as the synchronous rounds.
"""

from __future__ import annotations

from trl_ada.core.dynamic import fill_with_signal
from trl_ada.core.sampling import SELECTIONS, EliminationRule, PromptResult, run_adaptive_sampling
from trl_ada.samplers.protocol import SamplingContext, Selection, check_one_of, check_range


class Rounds:
    """The rounds of `trl_ada.core.sampling` (`reinforce_ada_choice`, `round_repeat`, `max_rounds`,
    `positive_threshold`, `pool_selection`) for sampler='reinforce_ada'; for 'grpo' and 'dapo' one round of n (GRPO);
    `dynamic_sampling` (on under 'dapo') refills the prompts whose kept group has no signal."""

    def __init__(self, args):
        self.args = args
        self.draws_prompts = bool(args.dynamic_sampling)  # DAPO's refills come from the training set
        # a round asks round_repeat samples of every active prompt at once: the engine holds a round in one wave
        self.max_samples_per_prompt = (
            args.round_repeat if args.multiround_adaptive_downsampling else args.num_generations
        )

    @staticmethod
    def check_fields(args) -> None:
        """The rounds' fields, DAPO's and the pipelined rounds' (AdaGRPOConfig calls this at construction, whichever
        sampler is selected)."""
        check_range(args, "max_rounds", 1, integer=True, fix=" (the reference uses 4)")
        check_one_of(args, "pool_selection", SELECTIONS)
        check_range(args, "max_refill_batches", 0, integer=True, fix=" (DAPO uses 10; 0 never refills)")
        check_range(args, "dynamic_sampling_tolerance", 0, fix=" (default 1e-6)")
        if args.sampler == "reinforce_ada":  # only the rounds read it: GRPO at num_generations=16 need not raise it
            n = args.num_generations
            fill = f": a round must fill a group of num_generations ({n}). Set round_repeat >= {n} (reference: 8)"
            check_range(args, "round_repeat", n, integer=True, fix=fill)
        if args.pipelined_speculation and not args.pipelined_rounds:
            raise ValueError("pipelined_speculation=True needs pipelined_rounds=True: set both, or neither.")
        engine = (args.use_vllm, args.vllm_mode, args.vllm_tensor_parallel_size)
        if args.pipelined_rounds and engine != (True, "colocate", 1):
            raise ValueError(
                f"pipelined_rounds=True drives one colocated vLLM engine per process (got use_vllm={engine[0]}, "
                f"vllm_mode={engine[1]!r}, vllm_tensor_parallel_size={engine[2]}): set use_vllm=True, "
                "vllm_mode='colocate' and vllm_tensor_parallel_size=1, or pipelined_rounds=False."
            )

    def sample(self, context: SamplingContext, target: int) -> Selection:
        args = self.args
        filled = fill_with_signal(
            first=list(range(target)),
            draw=context.draw,
            sample=lambda prompts: self.sample_prompts(context, prompts),
            target=target,
            max_refill_batches=args.max_refill_batches if args.dynamic_sampling else 0,
            atol=args.dynamic_sampling_tolerance,
        )
        metrics = {}
        if args.dynamic_sampling:
            metrics = {
                "sampling/prompts_dropped": float(len(filled.sampled) - target),
                "sampling/refill_batches": float(filled.refill_batches),
                "sampling/groups_without_signal": float(filled.without_signal),
            }
        return Selection(
            results=dict(filled.sampled), chosen=[filled.sampled[i][0] for i in filled.chosen], metrics=metrics
        )

    def sample_prompts(self, context: SamplingContext, prompts: list[int]) -> list[PromptResult]:
        """Sample one batch of prompts (the first, or a refill) to the end of their rounds."""
        args, n = self.args, context.num_generations
        adaptive = args.multiround_adaptive_downsampling
        rule = EliminationRule(
            num_generations=n,
            round_repeat=args.round_repeat if adaptive else n,  # one round of n: GRPO
            max_rounds=args.max_rounds if adaptive else 1,
            choice=args.reinforce_ada_choice,
            positive_threshold=args.positive_threshold,
            selection=args.pool_selection if adaptive else "earliest",
            seed=args.seed + context.global_step + 7919 * context.begin_batch(),
        )
        if context.run_rounds is not None:
            return context.run_rounds(prompts, rule)
        return run_adaptive_sampling(
            len(prompts), lambda active, k: context.sample([prompts[i] for i in active], k), rule
        )
