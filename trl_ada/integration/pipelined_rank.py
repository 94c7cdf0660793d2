"""Barrier-free rounds inside the trainer (`pipelined_rounds=True`): this rank's colocated engine, rank-local scoring,
one gather per batch.

`trl_ada.core.pipelined` is the driver (pure Python: rounds, exit checks, speculation) and `trl_ada.integration.vllm_stream` the
engine it steps; this module wires them to what the trainer hands over (`RankEngine`): it opens the colocated engine's
stream, decodes and scores finished samples as GRPOTrainer does, keeps them in the step's bookkeeping and gathers every
rank's pools once per batch, so that the rest of the step sees exactly what the synchronous rounds leave. It also
counts what the engine generated (`RankEngine.generation_count`), since these rounds never pass through `_generate`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from accelerate.utils import gather_object
from trl.chat_template_utils import parse_response
from trl.data_utils import is_conversational
from trl.trainer import grpo_trainer as _grpo_module

from trl_ada.core.pipelined import run_pipelined_sampling
from trl_ada.core.sampling import EliminationRule, PromptResult
from trl_ada.integration.generation_count import GenerationCount
from trl_ada.integration.rollouts import Sample, StepSampling


@dataclass
class RankEngine:
    """What the pipelined rounds use of the trainer on this rank, handed over explicitly."""

    args: Any  # the AdaGRPOConfig: the rounds' settings
    accelerator: Any  # this process's place: `num_processes`, `process_index`, `device`
    generation: Any  # the colocated engine (a streaming or reloading VLLMGeneration): `open_stream(prompt_ids)`
    score: Callable  # `score(inputs, prompts, completions, completion_ids)`: rewards per function, log_extra values
    decode: Callable  # `decode(prompts, prompt_ids, completion_ids)`: completions as reward functions see them
    positive_rewards: Callable  # rewards per function -> the reward that decides a positive (what the rounds read)
    stop_ids: set[int]  # EOS and padding: a completion ending otherwise was cut at max_completion_length
    generation_count: GenerationCount
    metrics: dict[str, list]  # GRPOTrainer's training metrics, where the rounds' completion lengths go
    state: Any  # the TrainerState: `num_input_tokens_seen`


def sample_pipelined(
    step: StepSampling, engine: RankEngine, prompts: list[int], rule: EliminationRule
) -> list[PromptResult]:
    """Barrier-free rounds (`pipelined_rounds=True`, trl_ada.core.pipelined) on this rank's colocated engine.

    Each rank pipelines whole prompts (positions rank, rank + world, ... of the batch: a pool never straddles two
    engines) and scores its samples as they finish, in this thread, with the rewards kept rank-local (no
    collective per engine step: ranks finish at different times). One gather per batch then gives every rank
    every prompt's pool, as the synchronous rounds leave it. Completions stay on the rank that generated them
    until `_collect_selected` sends the kept ones where they are trained, as in the synchronous path.
    """
    args = engine.args
    accelerator = engine.accelerator
    positions = list(range(accelerator.process_index, len(prompts), accelerator.num_processes))
    mine = [prompts[i] for i in positions]
    step.first_call.update(dict.fromkeys(prompts, rule.round_repeat))  # every prompt's first round, whole
    reward_rows: dict[tuple[int, int], list[float]] = {}
    start = time.perf_counter()
    stream = engine.generation.open_stream([step.prompt_ids[p] for p in mine])

    def score(finished: list[tuple[int, int]]) -> list[float]:
        keys = [(mine[i], slot) for i, slot in finished]  # (prompt, slot): slot = position in the pool
        completion_ids, logprobs = stream.take(finished)
        # every finished sample, kept or (speculative) discarded later
        engine.generation_count.add(completions=len(completion_ids), tokens=sum(map(len, completion_ids)))
        rows = [step.rows[p] for p, _ in keys]
        texts = [row["prompt"] for row in rows]
        completions = engine.decode(texts, [step.prompt_ids[p] for p, _ in keys], completion_ids)
        with rank_local_rewards():
            rewards_per_func, extra_logs = engine.score(rows, texts, completions, completion_ids)
        for offset, key in enumerate(keys):
            step.generated[key] = Sample(
                prompt=texts[offset],
                prompt_ids=step.prompt_ids[key[0]],
                completion_ids=completion_ids[offset],
                completion=completions[offset],
                logprobs=None if logprobs is None else logprobs[offset],
                tool_mask=None,
                images=None,
                tool_images=[],
                extra_logs=extra_logs[offset],
            )
            reward_rows[key] = rewards_per_func[offset].tolist()
        return engine.positive_rewards(rewards_per_func).tolist()

    with stream, engine.generation_count.timed():
        out = run_pipelined_sampling(
            len(mine),
            stream,
            score,
            rule,
            speculative=args.pipelined_speculation,
            prompt_numbers=positions,
        )
    stats = out.stats
    engine.generation_count.add(tokens=stream.aborted_tokens)  # aborted requests ran, though they returned no row
    # A discarded speculative sample was generated and scored, but its round never happened: it leaves no trace.
    wasted_tokens = stream.aborted_tokens
    for i, slot in out.discarded:
        key = (mine[i], slot)
        wasted_tokens += len(step.generated.pop(key).completion_ids)
        del reward_rows[key]
    mine_stats = {
        "seconds": time.perf_counter() - start,
        "engine_steps": float(stats.polls),
        "early_samples": float(stats.early_samples),
        "max_running": float(stats.max_running),
        "speculative_samples": float(stats.speculative_samples),
        "wasted_samples": float(stats.wasted_samples),
        "wasted_tokens": float(wasted_tokens),
    }
    results: dict[int, PromptResult] = {}
    device = accelerator.device
    mine_set = set(mine)
    shapes = [
        (
            slot // rule.round_repeat,
            len(step.prompt_ids[p]),
            len(s.completion_ids),
            bool(s.completion_ids) and s.completion_ids[-1] not in engine.stop_ids,
        )
        for (p, slot), s in step.generated.items()
        if p in mine_set
    ]
    parts = gather_object([(mine, out.results, reward_rows, mine_stats, shapes)])
    log_round_lengths(engine, step, [shape for part in parts for shape in part[4]])
    for ranks_prompts, ranks_results, ranks_rows, *_ in parts:
        for p, result in zip(ranks_prompts, ranks_results):
            results[p] = result
            step.pool_rewards_per_func[p] = [
                torch.tensor(ranks_rows[(p, slot)], dtype=torch.float32, device=device)
                for slot in range(len(result.pool_rewards))
            ]
    # Per batch: the slowest rank sets the pace, early samples add up; over the step's batches: times add up.
    batch_stats = {name: max(part[3][name] for part in parts) for name in ("seconds", "engine_steps")}
    for name in ("early_samples", "speculative_samples", "wasted_samples", "wasted_tokens"):
        batch_stats[name] = sum(part[3][name] for part in parts)
    for name, value in batch_stats.items():
        step.pipelined[name] = step.pipelined.get(name, 0.0) + value
    step.pipelined["max_running"] = max(
        [step.pipelined.get("max_running", 0.0)] + [part[3]["max_running"] for part in parts]
    )
    return [results[p] for p in prompts]


def log_round_lengths(engine: RankEngine, step: StepSampling, shapes: list[tuple[int, int, int, bool]]) -> None:
    """What GRPOTrainer's `_generate` logs for each call, once per round (every process's samples of it: the
    synchronous rounds' calls), since the pipelined rounds never call it: tokens seen (`num_tokens`,
    `num_input_tokens_seen`), completion lengths, clipped ratio, terminated lengths. The step then merges the rounds'
    values as it merges the synchronous ones (`rollout_sizes`). `shapes`: (round, prompt length, completion length,
    truncated) per pooled sample."""
    metrics = engine.metrics
    for round_index in sorted({shape[0] for shape in shapes}):
        rows = [shape[1:] for shape in shapes if shape[0] == round_index]
        lengths = torch.tensor([completion for _, completion, _ in rows], dtype=torch.float32)
        truncated = torch.tensor([cut for _, _, cut in rows])
        engine.state.num_input_tokens_seen += sum(prompt + completion for prompt, completion, _ in rows)
        metrics["num_tokens"] = [engine.state.num_input_tokens_seen]
        metrics["completions/mean_length"].append(lengths.mean().item())
        metrics["completions/min_length"].append(lengths.min().item())
        metrics["completions/max_length"].append(lengths.max().item())
        metrics["completions/clipped_ratio"].append(truncated.float().mean().item())
        terminated = lengths[~truncated] if (~truncated).any() else torch.zeros(1)  # TRL's value when none ended
        metrics["completions/mean_terminated_length"].append(terminated.mean().item())
        metrics["completions/min_terminated_length"].append(terminated.min().item())
        metrics["completions/max_terminated_length"].append(terminated.max().item())
        step.rollout_sizes.append(len(rows))


def check_reward_models_unsharded(pipelined_rounds: bool, names: list[str], reward_funcs: list) -> None:
    """Pipelined rounds score each process's samples on their own, whenever they finish. A reward model whose
    parameters are sharded needs every process in each of its forward passes, so the processes would wait on each
    other forever: refuse it here. TRL 1.16 shards reward models under DeepSpeed ZeRO-3 (`prepare_deepspeed`);
    under FSDP it prepares them in evaluation mode, which accelerate leaves whole on every process."""
    if not pipelined_rounds:
        return
    sharded = [
        name
        for name, func in zip(names, reward_funcs)
        if isinstance(func, torch.nn.Module) and any(is_sharded(p) for p in func.parameters())
    ]
    if sharded:
        raise ValueError(
            f"pipelined_rounds=True scores each process's samples on their own, but the reward model(s) {sharded} "
            "are sharded across processes (DeepSpeed ZeRO-3) and need every process in each forward pass. Set "
            "pipelined_rounds=False (the synchronous rounds score in lockstep), or launch with FSDP, ZeRO-2 or DDP, "
            "where reward models are whole on every process."
        )


def decode(processing_class, tokenizer, tools, prompts, prompt_ids, completion_ids):
    """Completions as reward functions see them: the same decoding as GRPOTrainer._generate (pipelined rounds,
    which run without tools, environments, rollout_func and images). `tokenizer`: the processing class's
    tokenizer (itself for a text model)."""
    if not is_conversational({"prompt": prompts[0]}):
        return processing_class.batch_decode(completion_ids, skip_special_tokens=True)
    if (
        getattr(tokenizer, "response_template", None) is not None
        or getattr(tokenizer, "response_schema", None) is not None
    ):
        return [
            [parse_response(tokenizer, ids, prefix=prefix, tools=tools)]
            for prefix, ids in zip(prompt_ids, completion_ids)
        ]
    contents = processing_class.batch_decode(completion_ids, skip_special_tokens=True)
    return [[{"role": "assistant", "content": content}] for content in contents]


def is_sharded(parameter: torch.Tensor) -> bool:
    """A parameter split over processes: a DTensor (FSDP2, tensor parallel) or a DeepSpeed ZeRO-3 partition."""
    from torch.distributed.tensor import DTensor

    return isinstance(parameter, DTensor) or hasattr(parameter, "ds_tensor")


@contextlib.contextmanager
def rank_local_rewards():
    """While the pipelined rounds score a rank's finished samples, TRL's `_calculate_rewards` must not gather.

    It ends with `gather(rewards_per_func)`, a collective: ranks whose samples finish at different times would call
    it different numbers of times and deadlock. The rewards are gathered once per batch instead (`sample_pipelined`).
    """
    original = _grpo_module.gather
    _grpo_module.gather = lambda tensor: tensor
    try:
        yield
    finally:
        _grpo_module.gather = original


__all__ = ["RankEngine", "check_reward_models_unsharded", "decode", "rank_local_rewards", "sample_pipelined"]
