"""The sampler protocol: how an allocation rule decides one generation batch, and the narrow object it decides with.

A sampler is a class built once per trainer from the trainer's config, `Sampler(args)`, whose `sample(context,
target)` decides, for one generation batch of `target` prompts:

- how many samples each prompt gets, in one call or in rounds (`context.sample`),
- which prompts train (`Selection.chosen`: exactly `target` of them, drawing more with `context.draw` if it drops
  some),
- which of their samples are kept (`PromptResult.selected`: `num_generations` per prompt, or any number per prompt
  when every rank's share of the kept samples still sums to `num_generations` per prompt),
- and, optionally, their advantages (`Selection.advantages`; otherwise the configured `advantage_estimator`'s).

It reaches the model only through the `SamplingContext` the trainer hands it for the batch: sample these prompts k
times each and get every reward back (on every rank: the same call on every rank, in the same order); draw more
prompts from the training set; read the per-prompt memory; the step, the seed, `num_generations` and the world
size. It never sees the trainer. Every sample it asks for is generated through GRPOTrainer's own rollout path and
counted there (`sampling/generated_tokens_total`), so a sampler's cost is exact without its help.

Every rank runs the same sampler on the same context, and must take the same decisions: derive any randomness from
`context.seed`, `context.global_step` and the prompt (never from a global random state).

A minimal sampler (one round of `num_generations` per prompt, every sample kept: GRPO):

    from trl_ada.core.sampling import PromptResult
    from trl_ada.samplers import Selection

    class OneRound:
        def __init__(self, args):
            self.args = args

        def sample(self, context, target):
            prompts = list(range(target))
            pools = context.sample(prompts, context.num_generations)
            results = {p: PromptResult(pool_rewards=pool, selected=list(range(len(pool))), rounds=1, finished=True)
                       for p, pool in zip(prompts, pools)}
            return Selection(results=results, chosen=prompts)

Select it with `AdaGRPOConfig(sampler="my_module.OneRound")` (importable from the current folder, as reward
functions are), or from Python with the class itself, `sampler=OneRound`, or an instance (a notebook's class needs no
module). docs/samplers.md has the rest, and the built-in samplers in this package are written on this
protocol only.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from trl_ada.core.memory import PromptMemory
from trl_ada.core.sampling import EliminationRule, PromptResult


@dataclass
class Selection:
    """What a sampler decided for one generation batch.

    `results` holds every prompt it sampled (refills included, in any order): its pool of rewards and the kept
    samples (`selected`, indices into the pool). `chosen` lists the prompts that train, `target` of them, in the order
    the ranks train them (rank r trains the r-th slice). `advantages`, when given, holds one advantage per kept sample
    of each chosen prompt, in `selected` order; without it the configured `advantage_estimator` computes them.
    `metrics` are logged beside the trainer's own `sampling/*` metrics (a key the trainer also computes is replaced).
    `skipped` counts prompts drawn and never sampled (screened out), so that `sampling/prompts_drawn` is honest."""

    results: dict[int, PromptResult]
    chosen: list[int]
    advantages: dict[int, list[float]] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    skipped: int = 0


@dataclass
class SamplingContext:
    """The narrow object the trainer hands a sampler for one generation batch.

    Prompts are numbers: the batch's own prompts are `0 .. target - 1` (all ranks' prompts, rank-major), and each
    prompt `draw` adds gets the next number. The callables are the trainer's; a test can build a context from plain
    functions and run any sampler without a model."""

    num_generations: int
    world_size: int
    global_step: int
    seed: int
    sample: Callable[[list[int], int | list[int]], list[list[float]]]
    """`sample(prompts, k)`: k more samples of each prompt (or k[i] of the i-th), through GRPOTrainer's rollout path,
    split evenly over the ranks; returns each prompt's new rewards, the same on every rank: the rewards that decide
    a positive (`reward > positive_threshold`): the weighted sum of the reward functions, or with
    `positive_reward_func` that function's own reward; NaN where a sample cannot be scored. A prompt's pool is every
    sample drawn for it this batch, in order: `PromptResult.selected` indexes it. A prompt's first call is its
    unbiased sample (`sampling/iid_reward` reads it): decide its size before seeing the prompt's rewards."""
    draw: Callable[[int], list[int]]
    """`draw(count)`: `count` new prompts from the training set (a seeded stream that a resumed run continues), the
    same on every rank; returns their numbers. Needs a map-style `train_dataset`."""
    row: Callable[[int], dict[str, Any]]
    """`row(prompt)`: the prompt's dataset row (what reward functions receive)."""
    prompt_key: Callable[[int], int]
    """`prompt_key(prompt)`: the prompt's key in the memory (its tokens, images and environment row)."""
    pass_rate_posterior: Callable[[int], tuple[float, float, int]]
    """`pass_rate_posterior(prompt)`: Beta pseudo-counts (a, b) of the prompt's pass rate from the memory and the
    prior (`prompt_memory_prior_alpha/beta`, the group prior of `prompt_memory_group_column`), and the evidence
    behind them: the prompt's visits, plus 1 when its group's prior is fitted (0: the flat prior alone; the prompt's
    own visits are `memory.visits(prompt_key(prompt))`). The memory holds the steps before this one: it takes this
    batch's samples after the sampler returns."""
    begin_batch: Callable[[], int]
    """`begin_batch()`: call before sampling a new batch of prompts from their first round (a refill batch too): the
    per-round metrics count rounds from it, and it returns the batch's number in the step (0 first), from which a
    sampler derives per-batch randomness (the rounds seed their selection with it). Optional for a one-shot rule."""
    trained_rewards: Callable[[int], list[float]]
    """`trained_rewards(prompt)`: the prompt's pool as TRL trains on it, the weighted sum of the reward functions;
    what `sample` returned unless `positive_reward_func` names one function. A sampler that computes its own
    advantages (`Selection.advantages`) takes them from these."""
    memory: PromptMemory | None = None
    """The per-prompt memory itself (`prompt_memory=True`), keyed by `prompt_key`: read it, or `forget` prompts."""
    run_rounds: Callable[[list[int], EliminationRule], list[PromptResult]] | None = None
    """With `pipelined_rounds=True`: `run_rounds(prompts, rule)` runs successive elimination under `rule` (a
    `trl_ada.core.sampling.EliminationRule`) barrier-free on this rank's colocated engine, with the results
    `run_adaptive_sampling` would give; None otherwise (and for a user's sampler: the config accepts
    `pipelined_rounds` with the built-in rounds only)."""


@runtime_checkable
class Sampler(Protocol):
    """An allocation rule. Built once per trainer as `Sampler(args)` (the `AdaGRPOConfig`), before the model
    loads: check your own fields there and raise a ValueError naming the field and the fix (`check_range` and
    `check_one_of` do). To fail earlier, when the config is built, as the built-ins do, give the class a static
    `check_fields(args)`: the config calls the selected sampler's, and every built-in's whichever sampler is selected
    (the built-ins' fields live on `AdaGRPOConfig`: a value no setting could use is a mistake), once the fields the
    config derives (`advantage_estimator`, `pool_baseline`, the prompt memory's prior) are set. A user's sampler is
    checked as one that reads positives (`reward > positive_threshold`): several summed reward functions need
    `positive_reward_func`.

    Optional, asked of any sampler alike:
    - `draws_prompts` (bool): whether it calls `context.draw`. True: an IterableDataset (it cannot be drawn from
      by index) is refused when the trainer is built; environment-owned data is drawn as TRL's placeholder rows,
      each a fresh environment `reset()`. False: no refill stream is kept.
      Absent: a stream wherever the training set can be drawn from.
    - `max_samples_per_prompt` (int): the most samples one `context.sample` call asks per prompt of the batch, on
      average (its total over `target`). The vLLM engine is sized to hold such a call in one wave. Absent:
      `num_generations` (GRPO's batch: one round of n, as Est, Knapsack and the budget ask).
    - `uses_prompt_memory` (bool, on the class): True turns `prompt_memory` on at the config's construction (the
      sampler reads `context.memory` or `context.pass_rate_posterior`). Absent or False: as the config says.
    - `state_dict()` and `load_state_dict(state)`: its own state, a dict of JSON values with string keys, written
      into every checkpoint and handed back on resume (`ada_sampler_state.json`), so that a resumed run decides as
      the uninterrupted one. Asked once when the trainer is built: a state JSON cannot hand back as it was fails
      then."""

    def sample(self, context: SamplingContext, target: int) -> Selection: ...


def is_number(value) -> bool:
    """A finite int or float (not a bool): what a numeric field must hold."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def is_integer(value, low: int, high: float = math.inf) -> bool:
    """An int (not a bool) in [low, high]."""
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def check_one_of(args, name: str, allowed) -> None:
    """Refuse `args.<name>` unless it is one of `allowed`: a ValueError naming the field and the values it takes."""
    if getattr(args, name) not in allowed:
        raise ValueError(f"{name}={getattr(args, name)!r} is not valid: use one of {list(allowed)}.")


def check_range(args, name: str, low=-math.inf, high=math.inf, integer=False, above=False, fix="") -> None:
    """Refuse `args.<name>` unless it is a finite number (an int with `integer`) in [low, high] ((low, high] with
    `above`): a ValueError naming the field, the range and `fix` (why, and what to set)."""
    value = getattr(args, name)
    if not (is_integer(value, low, high) if integer else is_number(value) and low <= value <= high) or (
        above and value == low
    ):
        bounds = f"in {'(' if above else '['}{low}, {high}]" if high < math.inf else f"{'>' if above else '>='} {low}"
        what = "an integer" if integer else "a finite number"
        raise ValueError(f"{name}={value!r} must be {what}{'' if low == -math.inf else ' ' + bounds}{fix}.")


def check_advantages(advantages, source: str) -> None:
    """Refuse an advantage that is neither finite nor NaN (NaN: an unscorable sample, trained as 0): an infinite
    one would reach the loss as the largest float."""
    bad = [a for a in advantages if isinstance(a, bool) or not isinstance(a, numbers.Real) or math.isinf(a)]
    if bad:
        raise ValueError(f"{source} holds {bad[0]!r}: an advantage must be a finite number (or NaN: unscorable).")


def check_selection(
    selection: Selection, target: int, num_generations: int, world_size: int, groups_of_n: bool = False
) -> None:
    """Refuse a selection the trainer cannot hand to GRPOTrainer, naming what is wrong (a user sampler's bug).
    `groups_of_n`: the configured advantages are GRPO's group statistics, which read groups of num_generations."""
    chosen, results = selection.chosen, selection.results
    if len(chosen) != target or len(set(chosen)) != target or not set(chosen) <= set(results):
        raise ValueError(
            f"a sampler chose {len(chosen)} prompts ({len(set(chosen))} distinct, "
            f"{len(set(chosen) - set(results))} never sampled); it must choose {target} distinct sampled "
            "prompts (Selection.chosen)."
        )
    per_rank = target // world_size
    for rank in range(world_size):
        kept = sum(len(results[p].selected) for p in chosen[rank * per_rank : (rank + 1) * per_rank])
        if kept != num_generations * per_rank:
            raise ValueError(
                f"a sampler kept {kept} samples for rank {rank}'s {per_rank} prompts; each rank trains "
                f"num_generations x its prompts = {num_generations * per_rank} rows, as GRPOTrainer does."
            )
    for p in chosen:
        pool, selected = results[p].pool_rewards, results[p].selected
        if (
            not selected
            or len(set(selected)) != len(selected)
            or not all(is_integer(i, 0, len(pool) - 1) for i in selected)
        ):
            raise ValueError(
                f"a sampler kept sample indices {selected} of prompt {p}, whose pool holds {len(pool)} samples: "
                "PromptResult.selected must hold at least one distinct int index into the pool."
            )
        advantages = None if selection.advantages is None else selection.advantages.get(p, ())
        if advantages is not None and len(advantages) != len(selected):
            raise ValueError(
                f"Selection.advantages must hold one value per kept sample of each chosen prompt "
                f"(prompt {p}: {len(selected)} kept)."
            )
        if advantages is not None:
            check_advantages(advantages, f"Selection.advantages of prompt {p}")
    if (
        groups_of_n
        and selection.advantages is None
        and any(len(results[p].selected) != num_generations for p in chosen)
    ):
        raise ValueError(
            "a sampler kept groups of other sizes than num_generations and gave no advantages: TRL's group statistics "
            "read groups of num_generations rows. Return Selection.advantages, or set "
            "advantage_estimator='reinforce_ada' (the pooled baseline reads groups of any size)."
        )


__all__ = [
    "Sampler",
    "SamplingContext",
    "Selection",
    "check_advantages",
    "check_one_of",
    "check_range",
    "check_selection",
    "is_integer",
    "is_number",
]
