"""What one sample carries from generation to the loss, and one step's sampling state.

GRPOTrainer produces a generation batch in `_generate(prompts)`, which returns eight per-row things: the prompt ids,
the completion ids, the tool mask (0 on tool-result tokens, or `env_mask` from a `rollout_func`), the completions as
reward functions see them (decoded, tool calls parsed), the sampling log-probs, `rollout_func`'s extra fields, the
images of the forward pass and the images tools returned. Whatever produced them (single-turn generation, the
tool-calling loop, an environment, a `rollout_func`, a vision-language model), a row is one sample.

AdaGRPOTrainer runs that same `_generate` once per round, cuts its output into one `Sample` per row
(`split_rollout`), keeps each sample under its (prompt, slot) in `StepSampling.generated`, and when TRL builds the
training batch hands the kept samples back in TRL's shape (`join_rollout`): the loss mask, the forward-pass inputs
and the reward-function columns of a kept completion are exactly what GRPOTrainer would have built from it.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from accelerate.logging import get_logger
from accelerate.utils import gather_object

from trl_ada.core.sampling import PromptResult


logger = get_logger(__name__)


@dataclass
class Sample:
    """Everything one generated sample carries from generation to the loss."""

    prompt: Any  # the prompt it was generated from, as TRL prepared it (environment observation, images inlined)
    prompt_ids: list[int]
    completion_ids: list[int]  # with tools: every turn, tool results included
    completion: Any  # what reward functions receive (decoded text, or messages with the parsed tool calls)
    logprobs: list[float] | None  # the sampling log-probs (vLLM, rollout_func); None where the backend gives none
    tool_mask: list[int] | None  # 1 on model tokens, 0 on tool results / environment tokens; None without tools
    images: list | None  # the images of its forward pass: the row's, then those its tools returned
    tool_images: list  # the images its tools returned (the forward pass treats these differently)
    extra: dict[str, Any] = field(default_factory=dict)  # rollout_func's extra fields: reward-function columns
    extra_logs: dict[str, Any] = field(default_factory=dict)  # log_extra columns its reward functions wrote


Rollout = tuple  # `GRPOTrainer._generate`'s return value (8 per-row fields)


def split_rollout(prompts: list, generated: Rollout) -> list[Sample]:
    """Cut `_generate(prompts)`'s output into one Sample per row."""
    prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images = generated
    count = len(completion_ids)
    if not (len(prompts) == len(prompt_ids) == count == len(completions)):
        raise RuntimeError(
            f"AdaGRPOTrainer: a round asked for {len(prompts)} samples and got {count} completions, "
            f"{len(prompt_ids)} prompt ids. A rollout_func must return one completion per row it is given, in row "
            "order: with adaptive sampling a call's rows are a round's samples (round_repeat consecutive copies of each "
            "prompt, Est's N_x, budget top-ups), not groups of num_generations (docs/agents.md, rollout_func)."
        )
    for name, values in (("logprobs", logprobs), ("env_mask / tool_mask", tool_mask), ("images", images)):
        if values is not None and len(values) != count:
            raise RuntimeError(f"AdaGRPOTrainer: {name} holds {len(values)} rows for {count} samples in a round.")

    def extra_of(i: int) -> dict[str, Any]:
        # GRPOTrainer's rule for rollout_func's extra fields: a list gives row i its i-th value, anything else is shared
        return {
            key: (values[i] if isinstance(values, list) else values)
            for key, values in extra_fields.items()
            if not isinstance(values, list) or i < len(values)
        }

    return [
        Sample(
            prompt=prompts[i],
            prompt_ids=list(prompt_ids[i]),
            completion_ids=list(completion_ids[i]),
            completion=completions[i],
            logprobs=None if logprobs is None else logprobs[i],
            tool_mask=None if tool_mask is None else list(tool_mask[i]),
            images=None if images is None else images[i],
            tool_images=tool_images[i] if len(tool_images) == count else [],
            extra=extra_of(i),
        )
        for i in range(count)
    ]


def scored_samples(
    rows: list[dict[str, Any]], prompts: list, generated: Rollout, score, from_rollout_func: bool
) -> tuple[list[Sample], torch.Tensor]:
    """One round's output (`_generate(prompts)` for `rows`) as one Sample per row, each with the log_extra values
    its reward functions wrote, and every rank's rewards per function (`score(inputs, prompts, completions,
    completion_ids)` returns both)."""
    samples = split_rollout(prompts, generated)
    if from_rollout_func:  # the user's function placed each completion on its own row
        check_rollout_rows(prompts, generated[0])
    inputs = [{**row, **sample.extra} for row, sample in zip(rows, samples)]  # as TRL merges rollout_func's fields
    completions, completion_ids = [s.completion for s in samples], [s.completion_ids for s in samples]
    rewards_per_func, extra_logs = score(inputs, prompts, completions, completion_ids)
    for sample, logs in zip(samples, extra_logs):
        sample.extra_logs = logs
    return samples, rewards_per_func


def check_rollout_rows(prompts: list, prompt_ids: list) -> None:
    """A rollout_func returns each row's prompt ids: two different prompts must not come back with the same ids.

    That is what a completion generated for one prompt and placed on another prompt's row looks like, e.g. from a
    function written against GRPOTrainer's grouping (one request per `prompts[::num_generations]`, n each) when a call
    holds runs of another length (Est's N_x, budget top-ups of 2, a round split over processes): counts can match
    while completions land on the wrong prompts. Caught here, before any of them is scored or trained on.
    """
    owner: dict[tuple, tuple[str, int]] = {}
    for row, (prompt, ids) in enumerate(zip(prompts, prompt_ids)):
        key = json.dumps(prompt, sort_keys=True, default=str)
        first_key, first_row = owner.setdefault(tuple(ids), (key, row))
        if first_key != key:
            raise ValueError(
                f"rollout_func returned the same prompt_ids for row {first_row} and row {row}, whose prompts differ: "
                "a completion was placed on another prompt's row. With adaptive sampling AdaGRPOTrainer hands "
                "rollout_func one row per sample, and a prompt's rows need not come in groups of num_generations "
                "(Est's N_x, budget top-ups, a round split over processes): generate one completion per row, for "
                "that row's prompt (docs/agents.md, rollout_func)."
            )


def join_rollout(samples: list[Sample], expected: int | None = None) -> Rollout:
    """The kept samples in `GRPOTrainer._generate`'s shape, so that TRL builds the training batch from them
    (`expected`: the completions TRL asked for)."""
    if not samples:
        raise RuntimeError("AdaGRPOTrainer: no samples to train on.")
    if expected is not None and len(samples) != expected:
        raise RuntimeError(
            f"AdaGRPOTrainer: TRL asked for {expected} completions, {len(samples)} were kept for this rank."
        )
    has_logprobs = all(s.logprobs is not None for s in samples)
    has_tool_mask = any(s.tool_mask is not None for s in samples)
    has_images = any(s.images is not None for s in samples)
    keys = sorted({key for s in samples for key in s.extra})
    return (
        [s.prompt_ids for s in samples],
        [s.completion_ids for s in samples],
        # a sample without a mask (no tool call in a batch that had some) is all model tokens, as TRL's loop makes it
        [s.tool_mask if s.tool_mask is not None else [1] * len(s.completion_ids) for s in samples]
        if has_tool_mask
        else None,
        [s.completion for s in samples],
        [s.logprobs for s in samples] if has_logprobs else None,
        {key: [s.extra.get(key) for s in samples] for key in keys},
        [s.images for s in samples] if has_images else None,
        [s.tool_images for s in samples],
    )


def merge_round_metrics(metrics: dict[str, list], before: dict[str, int], sizes: list[int]) -> None:
    """One value per step for the metrics GRPOTrainer's `_generate` logs, over every sample of every round.

    `_generate` runs once per round and appends one value per metric each time (completion lengths, clipped ratio,
    tool-call frequencies); the Trainer would average them with equal weight per round. Replace a step's per-round
    values by one: minimum of `*/min_*`, maximum of `*/max_*`, else the mean weighted by each round's samples
    (`sizes`, all processes) and, for `tools/failure_frequency`, by each round's tool calls.
    """
    calls = None
    new = {key: values[before.get(key, 0) :] for key, values in metrics.items()}
    frequencies = new.get("tools/call_frequency")
    if frequencies is not None and len(frequencies) == len(sizes):
        calls = [f * s for f, s in zip(frequencies, sizes)]
    for key, values in new.items():
        if len(values) != len(sizes) or len(sizes) < 2 or key == "num_tokens":
            continue
        name = key.rsplit("/", 1)[-1]
        if name.startswith("min_"):
            merged = min(values)
        elif name.startswith("max_"):
            merged = max(values)
        else:
            weights = calls if key == "tools/failure_frequency" and calls is not None else sizes
            total = sum(weights)
            merged = sum(v * w for v, w in zip(values, weights)) / total if total else sum(values) / len(values)
        del metrics[key][before.get(key, 0) :]
        metrics[key].append(merged)


def merge_logged_metrics(pending: dict[str, list], rows: dict[str, list[int]]) -> None:
    """One value per step for what reward functions log with `log_metric`, each call weighted by its completions.

    GRPOTrainer calls a reward function once per generation batch and logs the mean of the values it was handed;
    with rounds the function is called once per round, on a round's samples, and TRL's plain mean would weigh a
    round of 8 samples like one of 64. `rows[name]` holds the completions of the call behind each value."""
    for name, values in pending.items():
        weights = rows.get(name, [])
        if len(values) < 2 or len(weights) != len(values) or not sum(weights):
            continue
        pending[name] = [sum(v * w for v, w in zip(values, weights)) / sum(weights)]
    rows.clear()


@dataclass
class StepSampling:
    """Bookkeeping of one generation batch's sampling (identical on every rank but `generated`).

    Prompts are numbered in the order they were sampled: the batch's own prompts first (all ranks, rank-major),
    then refill prompts.
    """

    rows: list[dict[str, Any]]  # one dataset row per prompt
    prompt_ids: list[list[int]] = field(default_factory=list)  # the row's prompt, tokenized (memory keys, pipelining)
    pool_rewards_per_func: list[list[torch.Tensor]] = field(default_factory=list)  # per prompt, per sample
    first_call: dict[int, int] = field(default_factory=dict)  # per sampled prompt: the samples of its first call
    generated: dict[tuple[int, int], Sample] = field(default_factory=dict)  # (prompt, slot): this rank's samples
    results: dict[int, PromptResult] = field(default_factory=dict)  # per sampled prompt (budget: not the skipped)
    chosen: list[int] = field(default_factory=list)  # prompts trained on, rank r's slice r-th
    batches: int = 0  # batches sampled so far: the step's own, then refills
    skipped: int = 0  # prompts drawn and never sampled (the budget's screening)
    advantages: dict[int, list[float]] | None = None  # the sampler's own, per chosen prompt (Selection.advantages)
    sampler_metrics: dict[str, float] = field(default_factory=dict)  # the sampler's own (Selection.metrics)
    local_samples: list[Sample] | None = None  # this rank's kept samples, while TRL builds the training batch
    selected_rewards_per_func: torch.Tensor | None = None
    rounds: dict[int, tuple[float, int]] = field(
        default_factory=dict
    )  # round -> (seconds, active prompts), all batches
    round_index: int = 0  # round of the batch being sampled
    padding_samples: int = 0
    rollout_sizes: list[int] = field(default_factory=list)  # samples per `_generate` call, all ranks (metric weights)
    pipelined: dict[str, float] = field(default_factory=dict)  # pipelined_rounds: engine statistics, all batches
    memory_metrics: dict[str, float] = field(default_factory=dict)  # the prompt memory's and group prior's, settled


def step_metrics(
    step: StepSampling, advantages: torch.Tensor, reward_weights: torch.Tensor, epochs_drawn: float | None
) -> dict[str, float]:
    """The step's `sampling/*` metrics (docs/knobs.md lists them), from its bookkeeping and the global
    advantages of the kept completions, then the sampler's own (`epochs_drawn`: None when it draws no refills)."""
    results = list(step.results.values())  # every prompt sampled this step, refills included
    sampled = len(results)
    rounds = [r.rounds for r in results]
    # Round one: each prompt's first `context.sample` call, sized before any of its rewards was seen, so an
    # unbiased sample of the policy; the reward TRL trains on (the weighted sum), as GRPO logs it.
    round_one = [
        x
        for p in step.results
        if step.first_call.get(p)
        for x in weighted_sum(
            torch.stack(step.pool_rewards_per_func[p][: step.first_call[p]]), reward_weights
        ).tolist()
    ]
    sizes = [len(step.results[p].selected) for p in step.chosen]  # num_generations each; N_x under Est
    signal = torch.stack([group.abs().amax() > 1e-8 for group in torch.split(advantages, sizes)])
    # Every sample generated: the pools, and the speculative samples whose round did not happen (pipelined).
    wasted = step.pipelined.get("wasted_samples", 0.0)
    m = {
        "sampling/total_samples": float(sum(len(r.pool_rewards) for r in results)) + wasted,
        "sampling/kept_samples": float(sum(sizes)),
        "sampling/padding_samples": float(step.padding_samples),
        "sampling/rounds_mean": sum(rounds) / sampled,
        "sampling/rounds_max": float(max(rounds)),
        "sampling/finished_round_1": sum(r.finished and r.rounds == 1 for r in results) / sampled,
        "sampling/unfinished": sum(not r.finished for r in results) / sampled,
        "sampling/iid_reward": float(np.nanmean(round_one)),  # NaN: unscored, left out
        "sampling/effective_prompt_ratio": signal.float().mean().item(),
    }
    m |= {f"sampling/pipelined/{name}": value for name, value in step.pipelined.items()}
    for index, (seconds, active) in sorted(step.rounds.items()):
        m[f"sampling/round_{index}/seconds"] = seconds
        m[f"sampling/round_{index}/active_prompts"] = float(active)
    if epochs_drawn is not None:
        m |= {"sampling/prompts_drawn": float(sampled + step.skipped), "sampling/epochs_drawn": epochs_drawn}
    return m | step.sampler_metrics  # e.g. Est: its allocation, and round one's reward with prompts weighed equally


@dataclass
class Round:
    """One round's samples: `items` are (prompt, slot) pairs, `padded` splits evenly over the ranks."""

    items: list[tuple[int, int]]
    padded: list[tuple[int, int]]
    counts: list[int]
    active: int
    world: int

    def share(self, rank: int) -> list[tuple[int, int]]:
        per_rank = len(self.padded) // self.world
        return self.padded[rank * per_rank : (rank + 1) * per_rank]


def plan_round(state: StepSampling, active: list[int], k: int | list[int], world: int) -> Round:
    """k samples for each active prompt (or k[i] for the i-th), padded to split evenly over `world` ranks."""
    counts = k if isinstance(k, list) else [k] * len(active)
    items = [(p, len(state.pool_rewards_per_func[p]) + j) for p, count in zip(active, counts) for j in range(count)]
    per_rank = math.ceil(len(items) / world)
    # Collectives need equal sizes: pad with extra samples of the last prompt, generated, scored and discarded.
    padded = items + [items[-1]] * (per_rank * world - len(items))
    state.padding_samples += len(padded) - len(items)
    return Round(items, padded, counts, len(active), world)


def record_round(
    state: StepSampling,
    round_: Round,
    rank: int,
    samples: list[Sample],
    rewards_per_func: torch.Tensor,
    rewards: torch.Tensor,
    seconds: float,
) -> list[list[float]]:
    """Keep a round's samples (this rank's share, padding left out) and rewards (all ranks) in the step's
    bookkeeping; return each prompt's rewards."""
    state.rollout_sizes.append(len(round_.padded))
    state.round_index += 1
    before, prompts_active = state.rounds.get(state.round_index, (0.0, 0))
    state.rounds[state.round_index] = (before + seconds, prompts_active + round_.active)
    first = rank * (len(round_.padded) // round_.world)
    for offset, (key, sample) in enumerate(zip(round_.share(rank), samples)):
        if first + offset < len(round_.items):
            state.generated[key] = sample
    n = len(round_.items)
    for (p, _), row in zip(round_.items, rewards_per_func[:n]):
        state.pool_rewards_per_func[p].append(row)
    values = rewards[:n].tolist()
    ends = list(itertools.accumulate(round_.counts))
    return [values[end - count : end] for end, count in zip(ends, round_.counts)]


def take_extra_logs(pending: dict[str, list], count: int, warned: set[str]) -> list[dict[str, Any]]:
    """The log_extra columns the reward functions just wrote for `count` samples, taken out of TRL's buffer
    (`pending`), one dict per sample.

    They belong to these samples and follow their completion, kept or not (TRL would otherwise flush every
    round's values into the completions table, next to the wrong completions). A column without one value per
    sample is dropped, with one warning per column (`warned` holds the warnings given)."""
    extra = {column: values for column, values in pending.items() if len(values) == count}
    for column in sorted(set(pending) - set(extra)):
        if f"log_extra {column}" in warned:
            continue
        warned.add(f"log_extra {column}")
        logger.warning(f"log_extra column {column!r} does not hold one value per completion; it is not logged.")
    pending.clear()
    return [{column: values[i] for column, values in extra.items()} for i in range(count)]


def collect_selected(state: StepSampling, local: list[int], pending_extra_logs: dict[str, list]) -> list[Sample]:
    """Send each selected sample of a chosen prompt to the rank that trains on it (a gather over all ranks); return
    this rank's (`local`: its chosen prompts), in the order TRL lays their rows out. Their log_extra values follow
    them into TRL's buffer (`pending_extra_logs`), next to the completions TRL logs."""
    wanted = {(p, i) for p in state.chosen for i in state.results[p].selected}
    selected: dict[tuple[int, int], Sample] = {}
    for part in gather_object([{key: s for key, s in state.generated.items() if key in wanted}]):
        selected.update(part)
    samples = [selected[(p, i)] for p in local for i in state.results[p].selected]
    for column in sorted({column for s in samples for column in s.extra_logs}):
        pending_extra_logs[column] = [s.extra_logs.get(column) for s in samples]
    return samples


def weighted_sum(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """TRL's reward aggregation: weighted nansum over reward functions; NaN where every function returned None."""
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return rewards


def positive_rewards(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, positive_index: int | None
) -> torch.Tensor:
    """The reward that decides a positive (`reward > positive_threshold`), what samplers read: the weighted sum
    (`positive_index` None, the reference), or the named reward function's own reward (NaN where it returned None)."""
    if positive_index is None:
        return weighted_sum(rewards_per_func, weights)
    return rewards_per_func[:, positive_index].clone()


__all__ = [
    "Sample",
    "StepSampling",
    "check_rollout_rows",
    "join_rollout",
    "merge_round_metrics",
    "positive_rewards",
    "scored_samples",
    "split_rollout",
    "step_metrics",
    "weighted_sum",
]
