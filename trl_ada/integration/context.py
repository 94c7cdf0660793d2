"""One generation batch around its sampler: the `SamplingContext` it decides with, and what the step keeps of its
decision.

The trainer hands over what the context needs of it as plain values and functions: its rollout (one sample per row
through GRPOTrainer's path, scored), how to tokenize rows as TRL does, the training set and the refill stream behind
`draw`. The sampler sees only the context (`trl_ada.samplers.protocol`); `settle` checks what it returns and keeps it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
import time
from collections.abc import Iterable
from typing import Any, Callable

import torch
from accelerate.logging import get_logger
from accelerate.utils import gather_object
from datasets import Dataset

from trl_ada.core.budget import remembered_posterior
from trl_ada.core.sampling import PromptResult
from trl_ada.integration import estimators
from trl_ada.integration.prompt_keys import observe, row_key
from trl_ada.integration.resume import SamplingState
from trl_ada.integration.rollouts import StepSampling, plan_round, record_round, step_metrics, weighted_sum
from trl_ada.samplers import SamplingContext, Selection, check_selection


logger = get_logger(__name__)


def sampling_context(
    step: StepSampling,
    state: SamplingState,
    args,
    *,
    accelerator,
    global_step: int,
    rollout: Callable,
    reward_weights,
    positive_rewards: Callable[[torch.Tensor], torch.Tensor],
    tokenize: Callable[[list[dict[str, Any]]], list[list[int]]],
    as_dataloader_rows: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    train_dataset,
    with_environment: bool,
    run_rounds: Callable | None = None,
) -> SamplingContext:
    """The context of one generation batch (`step`). `rollout(rows)` generates one sample per row through TRL's path
    and returns them with every rank's rewards per function; `positive_rewards(rewards_per_func)` is the reward that
    decides a positive (what `sample` returns), `reward_weights` weigh the reward TRL trains on; `tokenize` and `as_dataloader_rows` treat a drawn row as
    TRL treats the dataloader's (its tokens, the Trainer's column filter); `with_environment`: an environment factory
    is set, so a row's environment columns are part of its memory key."""
    world, rank = accelerator.num_processes, accelerator.process_index
    column = args.prompt_memory_group_column
    posterior = remembered_posterior(
        args.prompt_memory_prior_alpha, args.prompt_memory_prior_beta, state.memory, state.group_prior
    )
    keys: dict[int, int] = {}

    def prompt_key(prompt: int) -> int:
        if prompt not in keys:
            keys[prompt] = row_key(step.rows[prompt], step.prompt_ids[prompt], with_environment)
        return keys[prompt]

    def draw(count: int) -> list[int]:
        if state.refill is None:
            if isinstance(train_dataset, Dataset):  # a map-style set, and no stream: the sampler said it never draws
                raise ValueError(
                    f"sampler={args.sampler_name!r} called draw() but declares draws_prompts = False, so no prompts "
                    "were set aside to draw from: set draws_prompts = True on the sampler, or leave it unset."
                )
            raise ValueError(
                f"sampler={args.sampler_name!r} draws prompts from the training set, which needs a "
                "map-style datasets.Dataset as train_dataset."
            )
        first = len(step.rows)
        step.rows += as_dataloader_rows([dict(train_dataset[index]) for index in state.refill.draw(count)])
        step.prompt_ids += tokenize(step.rows[first:])
        step.pool_rewards_per_func += [[] for _ in range(count)]
        return list(range(first, len(step.rows)))

    def sample(active: list[int], k: int | list[int]) -> list[list[float]]:
        # k samples for each active prompt (or k[i]: Est), split evenly over the ranks; every reward, all ranks
        active, counts = sample_request(active, k, len(step.rows))
        if sum(counts) == 0:  # nothing to generate (the same on every rank: no collective is skipped by one alone)
            return [[] for _ in active]
        round_ = plan_round(step, active, counts, world)
        for p, count in zip(active, counts):  # a prompt's first call: its unbiased sample (sampling/iid_reward)
            if count and not step.pool_rewards_per_func[p]:
                step.first_call[p] = count
        start = time.perf_counter()
        samples, rewards_per_func = rollout([step.rows[p] for p, _ in round_.share(rank)])
        rewards = positive_rewards(rewards_per_func)
        return record_round(step, round_, rank, samples, rewards_per_func, rewards, time.perf_counter() - start)

    def begin_batch() -> int:
        batch, step.batches, step.round_index = step.batches, step.batches + 1, 0
        return batch

    return SamplingContext(
        num_generations=args.num_generations,
        world_size=world,
        global_step=global_step,
        seed=args.seed,
        sample=sample,
        draw=draw,
        row=lambda prompt: step.rows[prompt],
        prompt_key=prompt_key,
        pass_rate_posterior=lambda p: posterior(prompt_key(p), step.rows[p][column] if column else None),
        begin_batch=begin_batch,
        trained_rewards=lambda p: trained_pool(step, p, reward_weights),
        memory=state.memory,
        run_rounds=run_rounds,
    )


def trained_pool(step: StepSampling, prompt: int, reward_weights) -> list[float]:
    """The prompt's pool as TRL trains on it: the weighted sum of every reward function, in the order made."""
    rows = step.pool_rewards_per_func[prompt]
    return weighted_sum(torch.stack(rows), reward_weights).tolist() if rows else []


def trained_results(step: StepSampling, results: list[PromptResult] | None, reward_weights):
    """The chosen prompts' results with the pools TRL trains on (the weighted sum), where the pools hold another
    reward (`positive_reward_func`); None when sampling is off."""
    if results is None:
        return None
    return [
        dataclasses.replace(r, pool_rewards=trained_pool(step, p, reward_weights))
        for p, r in zip(step.chosen, results)
    ]


def sample_request(prompts, k, known: int) -> tuple[list[int], list[int]]:
    """`context.sample(prompts, k)`'s arguments as prompt numbers and one count each, or a ValueError naming the
    mistake: a prompt twice in one call would give two samples the same place in its pool."""

    # numpy's integers too: a sampler computes counts; `is_integer` stays strict for config fields (saved as JSON)
    def whole(value, low: int, high: float = math.inf) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool) and low <= value <= high

    prompts = list(prompts)
    if len(set(prompts)) != len(prompts) or not all(whole(p, 0, known - 1) for p in prompts):
        raise ValueError(
            f"context.sample got prompts {prompts}: distinct prompt numbers in 0..{known - 1} (the batch's and those "
            "`draw` returned), each once a call; ask for more samples of a prompt with k."
        )
    counts = [k] * len(prompts) if whole(k, 0) else list(k) if isinstance(k, Iterable) else None
    if counts is None or len(counts) != len(prompts) or not all(whole(c, 0) for c in counts):
        raise ValueError(
            f"context.sample got k={k!r} for {len(prompts)} prompts: an int >= 0, or one int >= 0 per prompt."
        )
    return [int(p) for p in prompts], [int(c) for c in counts]


def settle(
    step: StepSampling,
    selection: Selection,
    context: SamplingContext,
    state: SamplingState,
    args,
    target: int,
    positive_rewards: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    """Check the sampler's decision for the batch's `target` prompts and keep it in the step's bookkeeping; count the
    prompts drawn, and fold every scored sample into the prompt memory and the group prior (their metrics go to
    `step.memory_metrics`)."""
    n, groups_of_n = args.num_generations, not args.replaces_grpo_advantages
    if not isinstance(selection, Selection):
        raise TypeError(
            f"sampler={args.sampler_name!r}'s sample() returned {type(selection).__name__}: it must return a "
            "trl_ada.samplers.Selection (results, chosen) for the batch."
        )
    check_selection(selection, target, n, context.world_size, groups_of_n=groups_of_n)
    check_pools(step, selection, positive_rewards)
    if selection.advantages is not None and args.advantage_estimator != "grpo":
        logger.warning_once(
            f"sampler={args.sampler_name!r} returned its own advantages: they replace advantage_estimator="
            f"{args.advantage_estimator!r}'s, which is not used."
        )
    if context.world_size > 1:
        check_same_on_every_rank(selection)
    step.results, step.chosen, step.skipped = selection.results, selection.chosen, selection.skipped
    step.advantages, step.sampler_metrics = selection.advantages, selection.metrics
    # TRL asks for the kept samples' rewards next (global order: rank-major, prompt, then group position)
    kept_rewards = [step.pool_rewards_per_func[p][i] for p in step.chosen for i in step.results[p].selected]
    step.selected_rewards_per_func = torch.stack(kept_rewards)
    state.prompts_drawn += len(step.results) + step.skipped
    keys = [context.prompt_key(prompt) for prompt in step.results] if state.memory is not None else []
    column, threshold = args.prompt_memory_group_column, args.positive_threshold
    step.memory_metrics = observe(
        step, keys, state.memory, state.group_prior, column, threshold, n, context.global_step
    )


def check_pools(step: StepSampling, selection: Selection, positive_rewards: Callable) -> None:
    """Refuse pools that are not what the sampler's samples got: the trainer trains the samples `context.sample`
    made, in the order made, while the advantages, the memory and the metrics read `PromptResult.pool_rewards`."""
    if not all(isinstance(p, int) and 0 <= p < len(step.rows) for p in selection.results):
        raise ValueError("Selection.results is keyed by prompt numbers: the batch's and those `draw` returned.")
    sampled = {p for p, rows in enumerate(step.pool_rewards_per_func) if rows}
    for p in sorted(sampled | set(selection.results)):
        rows = step.pool_rewards_per_func[p]
        made = positive_rewards(torch.stack(rows)).tolist() if rows else []
        given = list(selection.results[p].pool_rewards) if p in selection.results else []
        if len(given) != len(made) or not all(
            (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
            for a, b in zip(given, made)
        ):
            raise ValueError(
                f"Selection.results[{p}].pool_rewards {_shown(given)} is not what context.sample returned for the "
                f"prompt, {_shown(made)}: every prompt sampled is in Selection.results, its pool every reward it got "
                "this batch, in the order made (what `selected` indexes)."
            )


def _shown(rewards: list[float]) -> str:
    values = ", ".join(f"{r:g}" for r in rewards[:8]) + (", ..." if len(rewards) > 8 else "")
    return f"({len(rewards)} rewards: [{values}])"


def check_same_on_every_rank(selection: Selection) -> None:
    """Every rank runs the sampler and must decide the same: a rank that differs would train other rows, or hang."""
    decision = (selection.chosen, [selection.results[p].selected for p in selection.chosen], selection.advantages)
    digest = hashlib.blake2b(repr(decision).encode(), digest_size=16).hexdigest()
    if len(set(gather_object([digest]))) > 1:
        raise RuntimeError(
            "the sampler decided differently on different ranks (Selection.chosen, selected or advantages): take "
            "randomness from context.seed, context.global_step and the prompt, never a global random state."
        )


def log_step(
    metrics: dict[str, list],
    step: StepSampling,
    advantages,
    rewards_per_func: torch.Tensor,
    args,
    state: SamplingState,
    reward_weights: torch.Tensor,
) -> None:
    """Add the step's `sampling/*` metrics to GRPOTrainer's (`advantages`, `rewards_per_func`: of the kept samples,
    all ranks; `reward_weights`: of the reward TRL trains on), and correct its `frac_reward_zero_std` where the kept
    groups are not TRL's groups of num_generations."""
    rewards, n = weighted_sum(rewards_per_func, reward_weights), args.num_generations
    unequal = any(len(step.results[p].selected) != n for p in step.chosen)
    if (
        args.advantage_estimator == "est" or step.advantages is not None or unequal
    ):  # TRL reads groups of n with its own scaling
        metrics["frac_reward_zero_std"][-1] = estimators.zero_std_fraction(rewards, step)
    epochs_drawn = state.prompts_drawn / state.refill.num_prompts if state.refill is not None else None
    for name, value in {**step_metrics(step, advantages, reward_weights, epochs_drawn), **step.memory_metrics}.items():
        metrics[name].append(value)


__all__ = ["log_step", "sampling_context", "settle", "trained_pool", "trained_results"]
