"""`AdaGRPOTrainer`: TRL's `GRPOTrainer` with Reinforce-Ada's adaptive sampling and pooled advantages.

The algorithm lives in `trl_ada.sampling` (rounds, exit rule, selection) and `trl_ada.advantages` (estimators);
this module only wires them into TRL, at three seams of `GRPOTrainer`:

- `_generate_single_turn` (TRL's one entry point to vLLM colocate/server and transformers generation): instead of
  n samples per prompt, run the rounds, scoring each round with TRL's own `_calculate_rewards`, and hand back the
  n selected completions (with their sampling log-probs) per prompt;
- `_calculate_rewards`: when TRL asks for the rewards of those selected completions, return the ones computed
  during the rounds, so that every completion is scored exactly once;
- `_generate_and_score_completions`: TRL's stock method does everything else (padding, old/ref log-probs, vLLM
  importance sampling, metrics); afterwards its GRPO advantages are replaced by the configured estimator.

Multi-process: every rank learns every unique prompt of the generation batch; each round the (prompt, sample)
pairs of all active prompts are split evenly over the ranks, so all ranks run the same rounds with equal-size
collectives and an easy rank never idles while another samples hard prompts. Rewards are gathered by TRL, so all
ranks take the same decisions; at the end, the selected completions travel to the rank that owns their prompt.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.logging import get_logger
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.chat_template_utils import parse_response
from trl.data_utils import is_conversational
from trl.trainer import grpo_trainer as _grpo_module
from trl.trainer.utils import get_config_model_id

from .advantages import pooled_advantages, raft_advantages, reinforce_rej_advantages
from .config import AdaGRPOConfig
from .sampling import PromptResult, run_adaptive_sampling

logger = get_logger(__name__)


@dataclass
class _Rounds:
    """Bookkeeping of one generation batch's adaptive sampling (identical on every rank but `generated`)."""

    inputs: list[dict[str, Any]]  # this rank's rows, as TRL passed them
    prompt_ids: list[list[int]] = field(default_factory=list)  # every unique prompt of the batch, all ranks
    rows: list[dict[str, Any]] = field(default_factory=list)  # one input row per unique prompt, all ranks
    pool_rewards_per_func: list[list[torch.Tensor]] = field(default_factory=list)  # per prompt, per sample
    # (prompt, sample) -> (completion ids, sampling log-probs, columns the reward functions logged with log_extra)
    generated: dict[tuple[int, int], tuple[list[int], list[float] | None, dict[str, Any]]] = field(
        default_factory=dict
    )
    results: list[PromptResult] | None = None
    selected_rewards_per_func: torch.Tensor | None = None
    round_times: list[float] = field(default_factory=list)
    round_active: list[int] = field(default_factory=list)
    padding_samples: int = 0


class AdaGRPOTrainer(GRPOTrainer):
    """
    Drop-in replacement for TRL's `GRPOTrainer` that samples with Reinforce-Ada (arXiv:2510.04996).

    Takes exactly `GRPOTrainer`'s arguments; `args` must be an [`AdaGRPOConfig`]. With
    `multiround_adaptive_downsampling=False` it behaves exactly like `GRPOTrainer`.

    Example:

    ```python
    from datasets import Dataset
    from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
    from trl_ada.rewards import boxed_math_reward

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "What is 2 + 3?"}], "answer": "5"}] * 64)
    args = AdaGRPOConfig(output_dir="out", num_generations=4, per_device_train_batch_size=8,
                         reinforce_ada_choice="balanced")
    trainer = AdaGRPOTrainer(model="Qwen/Qwen2.5-Math-1.5B", reward_funcs=boxed_math_reward, args=args,
                             train_dataset=dataset)
    trainer.train()
    ```
    """

    _tag_names = ["trl", "grpo", "reinforce-ada"]
    _name = "AdaGRPO"

    def __init__(self, model, reward_funcs=None, args: AdaGRPOConfig | None = None, *pos, **kwargs):
        if args is None:  # as GRPOTrainer does: a default config, its output folder named after the model
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = AdaGRPOConfig(f"{model_name.split('/')[-1]}-AdaGRPO")
        if not isinstance(args, AdaGRPOConfig):
            raise TypeError(
                f"AdaGRPOTrainer needs args=AdaGRPOConfig(...), got {type(args).__name__}. Replace GRPOConfig with "
                "trl_ada.AdaGRPOConfig (it takes the same fields)."
            )
        if args.multiround_adaptive_downsampling:
            given = inspect.signature(GRPOTrainer.__init__).bind(self, model, reward_funcs, args, *pos, **kwargs)
            for name in ("tools", "rollout_func", "environment_factory"):
                if given.arguments.get(name):
                    raise ValueError(
                        f"{name} is not supported together with adaptive sampling yet. Pass "
                        f"multiround_adaptive_downsampling=False to train with it, or drop {name}."
                    )
        with _vllm_room_for_rounds(args):
            super().__init__(model, reward_funcs, args, *pos, **kwargs)
        self._rounds: _Rounds | None = None
        self._last_rewards_per_func: torch.Tensor | None = None  # global rewards of the kept completions
        self._last_advantages: torch.Tensor | None = None  # global advantages of the kept completions
        self._warned_non_binary = False
        self._warned_extra_columns: set[str] = set()

    # ---------------------------------------------------------------------------------------------------------------
    # Seam 1: the whole generation batch.

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # evaluation keeps GRPO's plain sampling and statistics
            return super()._generate_and_score_completions(inputs)
        adaptive = self.args.multiround_adaptive_downsampling
        if adaptive and ("image" in inputs[0] or "images" in inputs[0]):
            raise ValueError("Image prompts are not supported with adaptive sampling yet.")
        self._rounds = _Rounds(inputs=inputs) if adaptive else None
        try:
            output = super()._generate_and_score_completions(inputs)
            self._replace_advantages(output)
            if adaptive:
                self._log_sampling_metrics(output)
        finally:
            self._rounds = None
        return output

    # ---------------------------------------------------------------------------------------------------------------
    # Seam 2: generation. TRL calls this once with this rank's rows (each prompt repeated num_generations times).

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if self._rounds is None:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        if images is not None or multimodal_fields:
            raise ValueError("Multimodal prompts are not supported with adaptive sampling yet.")
        state = self._rounds
        n = self.num_generations
        local = [(ids, row) for ids, row in zip(prompt_ids[::n], state.inputs[::n])]
        everyone = gather_object(local)
        state.prompt_ids = [ids for ids, _ in everyone]
        state.rows = [row for _, row in everyone]
        state.pool_rewards_per_func = [[] for _ in everyone]

        seed = self.args.seed + self.state.global_step
        with self._vllm_awake_for_rounds():
            state.results = run_adaptive_sampling(
                num_prompts=len(everyone),
                sample_round=functools.partial(self._sample_round, state),
                num_generations=n,
                round_repeat=self.args.round_repeat,
                max_rounds=self.args.max_rounds,
                choice=self.args.reinforce_ada_choice,
                positive_threshold=self.args.positive_threshold,
                selection=self.args.pool_selection,
                seed=seed,
            )

        # TRL will ask for these rewards next (global order: rank-major, prompt, then group position).
        state.selected_rewards_per_func = torch.stack(
            [state.pool_rewards_per_func[p][i] for p, r in enumerate(state.results) for i in r.selected]
        )
        return self._collect_selected(state, len(local))

    def _sample_round(self, state: _Rounds, active: list[int], k: int) -> list[list[float]]:
        """Draw k samples for each active prompt, split evenly over the ranks; return every reward (all ranks)."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        items = [(p, len(state.pool_rewards_per_func[p]) + j) for p in active for j in range(k)]
        per_rank = math.ceil(len(items) / world)
        # Collectives need equal sizes: pad with extra samples of the last prompt, generated, scored and discarded.
        padded = items + [items[-1]] * (per_rank * world - len(items))
        state.padding_samples += len(padded) - len(items)
        mine = padded[rank * per_rank : (rank + 1) * per_rank]

        start = time.perf_counter()
        completion_ids, logprobs = super()._generate_single_turn(
            [state.prompt_ids[p] for p, _ in mine], None, {}, 1
        )
        prompts = [state.rows[p]["prompt"] for p, _ in mine]
        completions = self._decode(prompts, [state.prompt_ids[p] for p, _ in mine], completion_ids)
        rewards_per_func = self._calculate_rewards(
            [state.rows[p] for p, _ in mine], prompts, completions, completion_ids
        )
        state.round_times.append(time.perf_counter() - start)
        state.round_active.append(len(active))
        # Columns from log_extra belong to this round's samples: they follow their completion, kept or not (TRL
        # would otherwise flush every round's values into the table, next to the wrong completions).
        extra = {column: values for column, values in self._pending_extra_logs.items() if len(values) == len(mine)}
        for column in set(self._pending_extra_logs) - set(extra) - self._warned_extra_columns:
            self._warned_extra_columns.add(column)
            logger.warning(f"log_extra column {column!r} does not hold one value per completion; it is not logged.")
        self._pending_extra_logs.clear()

        for offset, key in enumerate(mine):
            if rank * per_rank + offset < len(items):
                state.generated[key] = (
                    completion_ids[offset],
                    logprobs[offset] if logprobs is not None else None,
                    {column: values[offset] for column, values in extra.items()},
                )
        rewards = _weighted_sum(rewards_per_func, self.reward_weights)[: len(items)].tolist()
        for (p, _), row in zip(items, rewards_per_func[: len(items)]):
            state.pool_rewards_per_func[p].append(row)
        return [rewards[i * k : (i + 1) * k] for i in range(len(active))]

    def _decode(self, prompts, prompt_ids, completion_ids):
        """Completions as reward functions see them: the same decoding as GRPOTrainer._generate (no tools here)."""
        if not is_conversational({"prompt": prompts[0]}):
            return self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        if getattr(self._tokenizer, "response_template", None) is not None or getattr(
            self._tokenizer, "response_schema", None
        ) is not None:
            return [
                [parse_response(self._tokenizer, ids, prefix=prefix, tools=self.tools)]
                for prefix, ids in zip(prompt_ids, completion_ids)
            ]
        contents = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        return [[{"role": "assistant", "content": content}] for content in contents]

    def _collect_selected(self, state: _Rounds, num_local_prompts: int):
        """Send each selected completion to the rank that owns its prompt; return this rank's, in row order."""
        wanted = {(p, i) for p, r in enumerate(state.results) for i in r.selected}
        shard = {key: value for key, value in state.generated.items() if key in wanted}
        selected = {}
        for part in gather_object([shard]):
            selected.update(part)
        first = self.accelerator.process_index * num_local_prompts
        keys = [(p, i) for p in range(first, first + num_local_prompts) for i in state.results[p].selected]
        completion_ids = [selected[key][0] for key in keys]
        logprobs = [selected[key][1] for key in keys]
        for column in sorted({column for key in keys for column in selected[key][2]}):
            self._pending_extra_logs[column] = [selected[key][2].get(column) for key in keys]
        return completion_ids, (None if any(lp is None for lp in logprobs) else logprobs)

    @contextlib.contextmanager
    def _vllm_awake_for_rounds(self):
        """Push weights to vLLM once per step and keep a sleeping colocated engine awake across all rounds.

        TRL's vLLM backend syncs weights when the global step changes and, in sleep mode, ends every generate call
        with sleep(level=2), which discards the weights: a plain round loop would push all weights every round.
        """
        if not self.use_vllm:
            yield
            return
        vllm_generation = self.vllm_generation
        if self.state.global_step != self._last_loaded_step:
            vllm_generation.sync_weights()
            self._last_loaded_step = self.state.global_step
        hold_awake = vllm_generation.mode == "colocate" and vllm_generation.enable_sleep_mode
        if not hold_awake:
            yield
            return
        if vllm_generation._llm_weights_sleeping:
            vllm_generation.sync_weights()  # wakes the weights up and pushes the current ones
        vllm_generation.llm.wake_up(tags=["kv_cache"])
        vllm_generation.enable_sleep_mode = False  # generate() then neither wakes nor sleeps between rounds
        try:
            yield
        finally:
            vllm_generation.enable_sleep_mode = True
            vllm_generation.llm.sleep(level=2)
            vllm_generation._llm_weights_sleeping = True

    # ---------------------------------------------------------------------------------------------------------------
    # Seam 3: rewards and advantages.

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        state = self._rounds
        if state is not None and state.selected_rewards_per_func is not None:
            rewards_per_func = state.selected_rewards_per_func  # scored during the rounds: never score twice
        else:
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _replace_advantages(self, output: dict[str, Any]) -> None:
        args = self.args
        estimator = args.advantage_estimator
        if estimator == "grpo" or (estimator == "reinforce_ada" and not args.global_stat_est):
            self._last_advantages = None  # TRL's own group statistics, already in `output`
            return
        n = self.num_generations
        rewards = _weighted_sum(self._last_rewards_per_func, self.reward_weights).tolist()
        groups = [rewards[i : i + n] for i in range(0, len(rewards), n)]
        if estimator == "reinforce_ada":
            results = self._rounds.results
            self._warn_once_if_not_binary(results)
            values = [
                pooled_advantages(
                    r.selected_rewards, r.pool_rewards, args.positive_threshold, args.pool_std_scaling,
                    args.pool_baseline,
                )
                for r in results
            ]
        elif estimator == "reinforce_rej":
            values = [reinforce_rej_advantages(group) for group in groups]
        else:
            values = [raft_advantages(group) for group in groups]
        device = output["advantages"].device
        advantages = torch.tensor([a for group in values for a in group], dtype=torch.float32, device=device)
        advantages = torch.nan_to_num(advantages, nan=0.0)  # unscorable completions carry no signal, as in TRL
        local_rows = output["advantages"].shape[0]
        start = self.accelerator.process_index * local_rows
        output["advantages"] = advantages[start : start + local_rows]
        logged = self._logs["advantages"]  # TRL logged its GRPO advantages for the completions table: swap them
        for _ in range(min(len(logged), advantages.numel())):
            logged.pop()
        logged.extend(advantages.tolist())
        self._last_advantages = advantages

    def _warn_once_if_not_binary(self, results: list[PromptResult]) -> None:
        if self._warned_non_binary or self.args.pool_baseline != "threshold_fraction":
            return
        if any(not math.isnan(x) and x not in (0.0, 1.0) for r in results for x in r.pool_rewards):
            self._warned_non_binary = True
            logger.warning(
                "Rewards are not all 0 or 1: the pooled baseline is the fraction of pool rewards above "
                f"positive_threshold={self.args.positive_threshold} (the reference's rule), not the mean reward. For "
                "shaped rewards consider pool_baseline='mean_reward'."
            )

    def _log_sampling_metrics(self, output: dict[str, Any]) -> None:
        state, results, m = self._rounds, self._rounds.results, self._metrics["train"]
        num_prompts = len(results)
        rounds = [r.rounds for r in results]
        round_one = [x for r in results for x in r.pool_rewards[: self.args.round_repeat]]
        advantages = self._last_advantages
        if advantages is None:  # TRL's statistics: only this rank's slice is at hand
            advantages = self.accelerator.gather(output["advantages"])
        m["sampling/total_samples"].append(float(sum(len(r.pool_rewards) for r in results)))
        m["sampling/kept_samples"].append(float(num_prompts * self.num_generations))
        m["sampling/padding_samples"].append(float(state.padding_samples))
        m["sampling/rounds_mean"].append(sum(rounds) / num_prompts)
        m["sampling/rounds_max"].append(float(max(rounds)))
        m["sampling/finished_round_1"].append(sum(r.finished and r.rounds == 1 for r in results) / num_prompts)
        m["sampling/unfinished"].append(sum(not r.finished for r in results) / num_prompts)
        m["sampling/iid_reward"].append(_nanmean(round_one))
        signal = advantages.view(num_prompts, -1).abs().amax(dim=1) > 1e-8
        m["sampling/effective_prompt_ratio"].append(signal.float().mean().item())
        for index, (seconds, active) in enumerate(zip(state.round_times, state.round_active), start=1):
            m[f"sampling/round_{index}/seconds"].append(seconds)
            m[f"sampling/round_{index}/active_prompts"].append(float(active))


def _weighted_sum(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """TRL's reward aggregation: weighted nansum over reward functions; NaN where every function returned None."""
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return rewards


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else float("nan")


@contextlib.contextmanager
def _vllm_room_for_rounds(args: AdaGRPOConfig):
    """Let the colocated vLLM engine run a whole round at once.

    GRPOTrainer sizes `max_num_seqs` for num_generations samples per prompt; a round draws round_repeat per active
    prompt, so the engine would otherwise queue the round in several waves.
    """
    original = _grpo_module.VLLMGeneration
    if not (args.use_vllm and args.multiround_adaptive_downsampling):
        yield
        return
    factor = math.ceil(args.round_repeat / args.num_generations)

    def roomier(*a, **kw):
        if kw.get("max_num_seqs") is not None:
            kw["max_num_seqs"] *= factor
        return original(*a, **kw)

    _grpo_module.VLLMGeneration = roomier
    try:
        yield
    finally:
        _grpo_module.VLLMGeneration = original


__all__ = ["AdaGRPOTrainer"]
