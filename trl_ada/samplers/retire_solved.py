"""ScaleRL's No-Positive-Resampling (Khatri et al., arXiv:2510.13786) as a sampler: GRPO's group, and a prompt that a
visit shows solved leaves the training stream for good, replaced by fresh prompts from the training set.

ScaleRL keeps each prompt's pass rate and filters out, for the rest of training, every prompt whose pass rate reached
0.9. Where this file had to choose:

- **Pass rate**: the visit's own, positives among the scorable samples of its group of `num_generations`
  (`reward > positive_threshold`, the reward that decides a positive: `positive_reward_func`'s where set). No history
  is averaged: with n=4 a prompt retires after a visit of 4 right of 4 (0.75 < 0.9).
- **When**: after the visit that shows it. The visit's group still trains (it is already generated and, being
  uniform, carries no GRPO advantage); from the next batch on the prompt is skipped wherever it comes back, from the
  dataloader or a refill.
- **Replacement**: each skipped prompt is replaced by one drawn from the training set (`context.draw`: a seeded
  stream that a resume continues), skipping retired ones too, at most `max_refill_batches` batches of candidates a
  step. When the training set runs out of unretired prompts within that, the step trains retired prompts rather than
  stop (`sampling/retire_solved/retired_trained` counts them).
- **Identity**: a prompt is its memory key (`context.prompt_key`: its tokens, images and environment row), so a
  duplicate of a retired question in the data is retired with it.
- **State**: the retired set goes into every checkpoint (`state_dict`), so a resumed run skips what the uninterrupted
  run skips.
- **Advantages**: GRPO's (TRL's group statistics), as in ScaleRL.

Select it with `AdaGRPOConfig(sampler="retire_solved")`; `sampler_kwargs={"threshold": 0.9}`. Not yet measured
against GRPO.
"""

from __future__ import annotations

import math

from trl_ada.core.sampling import PromptResult
from trl_ada.samplers.protocol import SamplingContext, Selection, is_number


class RetireSolved:
    """GRPO's group of `num_generations` per prompt; a prompt whose visit reaches `threshold` pass rate is retired."""

    draws_prompts = True  # retired prompts are replaced from the training set

    def __init__(self, args, threshold: float = 0.9):
        if not is_number(threshold) or not 0.0 < threshold <= 1.0:
            raise ValueError(
                f"sampler_kwargs threshold={threshold!r} must be a pass rate in (0, 1]: a prompt retires once a visit "
                "shows at least this share of positives (ScaleRL uses 0.9)."
            )
        self.args, self.threshold = args, float(threshold)
        self.retired: set[int] = set()  # memory keys of the prompts retired so far

    def state_dict(self) -> dict:
        return {"retired": sorted(self.retired)}

    def load_state_dict(self, state: dict) -> None:
        self.retired = {int(key) for key in state["retired"]}

    def sample(self, context: SamplingContext, target: int) -> Selection:
        n = context.num_generations
        chosen = [p for p in range(target) if context.prompt_key(p) not in self.retired]
        skipped, candidates = target - len(chosen), 0
        while len(chosen) < target and candidates < self.args.max_refill_batches * target:
            fresh = context.draw(target - len(chosen))
            candidates += len(fresh)
            kept = [p for p in fresh if context.prompt_key(p) not in self.retired]
            skipped += len(fresh) - len(kept)
            chosen += kept
        short = target - len(chosen)  # the stream holds too few unretired prompts: train retired ones, not nothing
        if short:
            chosen += [p for p in range(target) if p not in chosen][:short]
            skipped -= short
        context.begin_batch()
        pools = context.sample(chosen, n)
        newly = 0
        for p, pool in zip(chosen, pools):
            scorable = [r for r in pool if not math.isnan(r)]
            solved = sum(r > self.args.positive_threshold for r in scorable)
            key = context.prompt_key(p)
            if scorable and solved / len(scorable) >= self.threshold and key not in self.retired:
                self.retired.add(key)
                newly += 1
        results = {
            p: PromptResult(pool, list(range(len(pool))), rounds=1, finished=True) for p, pool in zip(chosen, pools)
        }
        metrics = {
            "sampling/retire_solved/retired_total": float(len(self.retired)),
            "sampling/retire_solved/retired_now": float(newly),
            "sampling/retire_solved/skipped": float(skipped),
            "sampling/retire_solved/retired_trained": float(short),
        }
        return Selection(results=results, chosen=chosen, metrics=metrics, skipped=skipped)
