"""`AdaGRPOTrainer`: TRL's `GRPOTrainer` with Reinforce-Ada's adaptive sampling and pooled advantages.

The algorithm lives in `trl_ada.core.sampling` (rounds, exit rule, selection) and `trl_ada.core.advantages` (estimators);
this module only wires them into TRL, at three seams of `GRPOTrainer`:

- `_generate_and_score_completions` (one generation batch): first sample the batch's prompts in rounds, each
  through TRL's own rollout path up to `_generate` (vLLM colocate/server, transformers, continuous batching, the tool
  loop or `rollout_func`), where a round keeps its samples and ends, and `_calculate_rewards`; with dynamic
  sampling, drop the prompts without signal and sample prompts drawn from the training set in their place
  (`trl_ada.core.dynamic`, `trl_ada.integration.refill`); with prompt memory, fold every scored completion into it
  (`trl_ada.core.memory`). Then TRL's stock method runs on the chosen prompts and does everything else (padding,
  old/ref log-probs, vLLM importance sampling, metrics); afterwards its GRPO advantages are replaced by the
  configured estimator;
- `_generate`: when TRL asks for completions of the chosen prompts, hand back the n selected samples per prompt
  (completion ids, sampling log-probs, tool mask, images, extra fields) instead of generating again;
- `_calculate_rewards`: likewise return the rewards computed during the rounds, so every completion is scored once.

With vLLM, the backend TRL builds is `trl_ada.integration.vllm_backend.ReloadingVLLMGeneration`, which pushes weights into a
colocated engine through vLLM's reload path (TRL's direct `load_weights` fails on vLLM's CPU build).

Multi-process: every rank learns every unique prompt of the generation batch (and draws the same refill prompts);
each round the (prompt, sample) pairs of all active prompts are split evenly over the ranks, so all ranks run the
same rounds with equal-size collectives and an easy rank never idles while another samples hard prompts. Rewards
are gathered by TRL, so all ranks take the same decisions; at the end, rank r trains on the r-th slice of the chosen
prompts, and their selected completions travel to it.

Next to their own modules: the budget's rule (`trl_ada.core.budget`), the pipelined rounds' wiring
(`trl_ada.integration.pipelined_rank`), the state a checkpoint carries and the memory export (`trl_ada.integration.resume`), the count of
what training generated (`trl_ada.integration.generation_count`, counted in `_generate` and `_generate_single_turn`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import itertools
import json
import math
import os
import time
from typing import Any

import torch
from accelerate.logging import get_logger
from accelerate.utils import gather_object
from datasets import Dataset
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from trl_ada.integration.seams import SUPPORTED_TRL, check_seams, warn_if_unsupported_trl

warn_if_unsupported_trl()
try:  # TRL internals: a TRL that moved them gets the supported range, not a bare ImportError
    # Checked here, before anything else imports them: trl_ada.integration.pipelined_rank and the vLLM backend use these.
    from trl.chat_template_utils import parse_response  # noqa: F401
    from trl.data_utils import is_conversational  # noqa: F401
    from trl.generation.vllm_generation import VLLMGeneration  # noqa: F401
    from trl.trainer import grpo_trainer as _grpo_module  # noqa: F401
    from trl.trainer.utils import get_config_model_id
except ImportError as error:
    import trl

    raise ImportError(
        f"trl-ada needs trl{SUPPORTED_TRL} (installed: trl {trl.__version__}): {error}. "
        f'pip install "trl{SUPPORTED_TRL}".'
    ) from error

from trl_ada.core.advantages import pooled_advantages, raft_advantages, reinforce_rej_advantages
from trl_ada.config import AdaGRPOConfig
from trl_ada.core.dynamic import fill_with_signal
from trl_ada.integration.generation_count import GenerationCount, counting_rollout_func, model_tokens
from trl_ada.core.est import allocate, allocation_metrics, est_advantages
from trl_ada.core.memory import GroupPrior, PromptMemory, image_slots, observe_step, prompt_key, prompt_text, text_only
from trl_ada.core.budget import remembered_posterior, run_budgeted_sampling, step_coin
from trl_ada.integration.pipelined_rank import check_reward_models_unsharded, sample_pipelined
from trl_ada.integration.refill import EpochSeededSampler, PromptStream
from trl_ada.integration.resume import (GROUP_EXPORT_FILE, MEMORY_EXPORT_FILE, export_memory, load_generation_count, load_sampling_state,
                     save_generation_count, save_sampling_state)
from trl_ada.integration.rollouts import (Sample, StepSampling, _nanmean, check_rollout_rows, join_rollout, merge_logged_metrics,
                       merge_round_metrics, split_rollout, step_metrics, weighted_sum)
from trl_ada.core.sampling import PromptResult, count_signs, run_adaptive_sampling
from trl_ada.integration.support import (check_prompt_column, check_trainer_arguments, checked_reward, warn_if_fewer_processes,
                      warn_if_threshold_outside)
from trl_ada.integration.vllm_backend import ReloadingVLLMGeneration, vllm_generation_for

logger = get_logger(__name__)
_EMPTY_PROMPT = [{"role": "user", "content": ""}]  # TRL's prompt for an environment-owned row without one



class AdaGRPOTrainer(GRPOTrainer):
    """
    Drop-in replacement for TRL's `GRPOTrainer` that samples with Reinforce-Ada (arXiv:2510.04996).

    Takes exactly `GRPOTrainer`'s arguments; `args` must be an [`AdaGRPOConfig`]. With
    `multiround_adaptive_downsampling=False` (and dynamic sampling and prompt memory off, their defaults) it behaves
    exactly like `GRPOTrainer`.

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

    # Outside a sampling step every seam is GRPOTrainer's: these are None then, also on a trainer built without
    # __init__ (as TRL's own unit tests build one to call `_generate` on its own).
    _step_sampling: StepSampling | None = None
    _rollout_capture: list | tuple | None = None  # inside a round: where `_generate` leaves the round's output
    generation_count: GenerationCount | None = None  # what training generated so far (trl_ada.integration.generation_count)

    _tag_names = ["trl", "grpo", "reinforce-ada"]
    _name = "AdaGRPO"
    _paper = {  # the paper TRL's model card cites
        "title": "Reinforce-Ada: An Adaptive Sampling Framework for Reinforce-Style LLM Training",
        "id": "2510.04996",
        "citation": (
            "@article{xiong2025reinforceada,\n"
            "    title        = {{Reinforce-Ada: An Adaptive Sampling Framework for Reinforce-Style LLM Training}},\n"
            "    author       = {Wei Xiong and Chenlu Ye and Baohao Liao and Hanze Dong and Xinxing Xu and Christof Monz "
            "and Jiang Bian and Nan Jiang and Tong Zhang},\n"
            "    year         = 2025,\n"
            "    eprint       = {arXiv:2510.04996},\n"
            "}"
        ),
    }

    def __init__(self, model, reward_funcs=None, args: AdaGRPOConfig | None = None, *pos, **kwargs):
        check_seams()  # before any model is loaded: a changed TRL internal fails here, named, not inside step 1
        if args is None:  # as GRPOTrainer does: a default config, its output folder named after the model
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = AdaGRPOConfig(f"{model_name.split('/')[-1]}-AdaGRPO")
        if not isinstance(args, AdaGRPOConfig):
            raise TypeError(
                f"AdaGRPOTrainer needs args=AdaGRPOConfig(...), got {type(args).__name__}. Replace GRPOConfig with "
                "trl_ada.AdaGRPOConfig (it takes the same fields)."
            )
        given = inspect.signature(GRPOTrainer.__init__).bind(self, model, reward_funcs, args, *pos, **kwargs)
        check_trainer_arguments(args, given.arguments)  # before the model loads
        check_prompt_column(given.arguments.get("train_dataset"))
        with vllm_generation_for(args):
            super().__init__(model, reward_funcs, args, *pos, **kwargs)
        self.reward_funcs = [func if isinstance(func, torch.nn.Module) else checked_reward(func, name)
                             for func, name in zip(self.reward_funcs, self.reward_func_names)]
        self._threshold_checked = False
        self._reward_call_rows = 0  # completions of the reward call in progress (log_metric's weight)
        self._logged_metric_rows: dict[str, list[int]] = collections.defaultdict(list)
        warn_if_fewer_processes(self.accelerator.num_processes)
        self._check_pipelined_reward_models()
        self._step_sampling: StepSampling | None = None
        self._last_rewards_per_func: torch.Tensor | None = None  # global rewards of the kept completions
        self._last_advantages: torch.Tensor | None = None  # global advantages of the kept completions
        self._warned_non_binary = False
        self._warned_extra_columns: set[str] = set()
        self.prompt_memory = (
            PromptMemory(args.prompt_memory_decay, args.prompt_memory_prior_alpha, args.prompt_memory_prior_beta)
            if args.prompt_memory
            else None
        )
        self.group_prior = GroupPrior() if args.prompt_memory_group_column is not None else None
        refills = args.dynamic_sampling or args.sampling_budget is not None
        self._refill = (
            PromptStream(len(self.train_dataset), args.seed, shuffle=self.shuffle_dataset) if refills else None
        )
        # Refilled rows pass the column filter the dataloader's rows pass (`remove_unused_columns`, the Trainer's own
        # collator wrapper): a reward function gets the same keyword arguments for a refilled row as for any other.
        self._as_dataloader_rows = self._get_collator_with_removed_columns(lambda rows: rows, description="training")
        self._prompts_drawn = 0  # every prompt drawn so far (TRL's, refills, skipped): the honest consumption count
        self.generation_count = GenerationCount()

    # ---------------------------------------------------------------------------------------------------------------
    # Seam 1: the whole generation batch.

    def _generate_and_score_completions(self, inputs):
        self._logged_metric_rows.clear()  # TRL flushes its pending log_metric values at the end of every batch
        if not self.model.training or not self.args.sampling_active:  # TRL's plain sampling (always in evaluation)
            output = super()._generate_and_score_completions(inputs)
            if self.model.training:
                self._replace_advantages(output, results=None)
            return output
        n, world, rank = self.num_generations, self.accelerator.num_processes, self.accelerator.process_index
        step = StepSampling(rows=[dict(row) for row in gather_object(inputs[::n])])
        step.prompt_ids = self._tokenize(step.rows)
        step.pool_rewards_per_func = [[] for _ in step.rows]
        target = len(step.rows)
        self._step_sampling = step
        metrics_before = {key: len(values) for key, values in self._metrics["train"].items()}
        try:
            with self._vllm_awake_for_rounds():
                if self.args.reinforce_ada_est:
                    self._sample_est(step, target)
                elif self.args.sampling_budget is not None:
                    self._sample_within_budget(step, target)
                else:
                    filled = fill_with_signal(
                        first=list(range(target)),
                        draw=functools.partial(self._draw_refill, step),
                        sample=functools.partial(self._sample_prompts, step),
                        target=target,
                        max_refill_batches=self.args.max_refill_batches if self.args.dynamic_sampling else 0,
                        atol=self.args.dynamic_sampling_tolerance,
                    )
                    step.chosen = [filled.sampled[i][0] for i in filled.chosen]
                    step.refill_batches, step.without_signal = filled.refill_batches, filled.without_signal
            merge_round_metrics(self._metrics["train"], metrics_before, step.rollout_sizes)
            merge_logged_metrics(self._pending_metrics, self._logged_metric_rows)
            self._prompts_drawn += len(step.results) + step.skipped
            memory_metrics = self._update_prompt_memory(step)

            local = step.chosen[rank * (target // world) : (rank + 1) * (target // world)]
            # TRL asks for these rewards next (global order: rank-major, prompt, then group position).
            step.selected_rewards_per_func = torch.stack(
                [step.pool_rewards_per_func[p][i] for p in step.chosen for i in step.results[p].selected]
            )
            step.local_samples = self._collect_selected(step, local)
            # One row per kept sample: num_generations per prompt, except under Est (N_x per prompt).
            output = super()._generate_and_score_completions(
                [dict(step.rows[p]) for p in local for _ in step.results[p].selected]
            )
            self._replace_advantages(output, results=[step.results[p] for p in step.chosen])
            if self.args.reinforce_ada_est:
                self._fix_group_metrics([len(step.results[p].selected) for p in step.chosen])
            self._log_sampling_metrics(output, memory_metrics)
        finally:
            self._step_sampling = None
        return output

    def _tokenize(self, rows: list[dict[str, Any]]) -> list[list[int]]:
        """The rows' prompts as TRL tokenizes them, text only (memory keys, pipelining).

        Before any environment observation, and without the rows' images: an image placeholder in a message
        (`{"type": "image"}`) is left out, since the images are inlined only when a rollout prepares the row (the
        memory key hashes the images themselves, `_row_key`). Plain-text rows tokenize as TRL tokenizes them.
        """
        if self.environment_factories is not None:  # TRL renders each row with its own environment's tools
            names = [row.get("environment") if self._multi_environment else None for row in rows]
            unknown = sorted({str(name) for name in names if name not in self.environment_factories})
            if unknown:  # TRL's own check, made before its tokenizer looks the name up
                raise ValueError(
                    f"Example has `environment={unknown[0]!r}`, which is not among the environments passed to "
                    f"`environment_factory`. Expected one of: {list(self.environment_factories)}."
                )
            self._batch_environments = names
        prompt_ids, _, _ = self._tokenize_prompts([text_only(row.get("prompt", _EMPTY_PROMPT)) for row in rows])
        return [list(ids) for ids in prompt_ids]

    def _prompt_key(self, step: StepSampling, prompt: int) -> int:
        return self._row_key(step.rows[prompt], step.prompt_ids[prompt])

    def _row_key(self, row: dict[str, Any], prompt_ids: list[int]) -> int:
        """The prompt memory's key of a row: its token ids, its images, where its messages place them, and the row
        its environment is reset with. Rows without placeholders in their messages keep the keys they always had."""
        images = row.get("images") or ([row["image"]] if row.get("image") is not None else None)
        context = None
        if self.environment_factories is not None:
            context = {column: value for column, value in row.items() if column not in ("prompt", "image", "images")}
        slots = image_slots(row.get("prompt"))
        if slots:  # "<image> Describe." and "Describe. <image>" are two prompts
            context = {**(context or {}), "image_slots": slots}
        return prompt_key(prompt_ids, images=images, context=context)

    def _draw_refill(self, step: StepSampling, count: int) -> list[int]:
        """Draw `count` prompts from the refill stream (the same ones on every rank); return their numbers."""
        first = len(step.rows)
        step.rows += self._as_dataloader_rows([dict(self.train_dataset[index]) for index in self._refill.draw(count)])
        step.prompt_ids += self._tokenize(step.rows[first:])
        step.pool_rewards_per_func += [[] for _ in range(count)]
        return list(range(first, len(step.rows)))

    def _sample_prompts(self, step: StepSampling, prompts: list[int]) -> list[PromptResult]:
        """Sample a batch of prompts: Reinforce-Ada's rounds, or n i.i.d. completions each with adaptive sampling off."""
        args, n = self.args, self.num_generations
        adaptive = args.multiround_adaptive_downsampling
        batch, step.batches, step.round_index = step.batches, step.batches + 1, 0
        seed = args.seed + self.state.global_step + 7919 * batch
        if args.pipelined_rounds:
            results = self._sample_pipelined(step, prompts, seed)
            step.results.update(zip(prompts, results))
            return results
        results = run_adaptive_sampling(
            num_prompts=len(prompts),
            sample_round=lambda active, k: self._sample_round(step, [prompts[i] for i in active], k),
            num_generations=n,
            round_repeat=args.round_repeat if adaptive else n,  # one round of n keeps all n: GRPO's group
            max_rounds=args.max_rounds if adaptive else 1,
            choice=args.reinforce_ada_choice,
            positive_threshold=args.positive_threshold,
            selection=args.pool_selection if adaptive else "earliest",
            seed=seed,
        )
        first = len(step.results)
        step.results.update({prompts[i]: result for i, result in enumerate(results)})
        assert len(step.results) == first + len(prompts), "a prompt was sampled twice in one step"
        return results

    def _sample_within_budget(self, step: StepSampling, target: int) -> None:
        """Budgeted sampling (trl_ada.core.budget): screen with the prompt memory, n each, top-ups within the cap."""
        args, memory, column = self.args, self.prompt_memory, self.args.prompt_memory_group_column
        keys: dict[int, int] = {}

        def key(prompt: int) -> int:
            if prompt not in keys:
                keys[prompt] = self._prompt_key(step, prompt)
            return keys[prompt]

        posterior = remembered_posterior(args.prompt_memory_prior_alpha, args.prompt_memory_prior_beta, memory,
                                         self.group_prior)
        budgeted = run_budgeted_sampling(
            first=list(range(target)),
            draw=functools.partial(self._draw_refill, step),
            predict=lambda prompt: posterior(key(prompt), step.rows[prompt][column] if column is not None else None),
            coin=lambda prompt: step_coin(args.seed, self.state.global_step, key(prompt), prompt),
            sample_round=functools.partial(self._sample_round, step),
            target=target,
            budget=math.floor(args.sampling_budget * target),
            num_generations=self.num_generations,
            top_up=args.budget_top_up,
            skip_threshold=args.budget_skip_threshold,
            explore_floor=args.budget_explore_floor,
            max_candidate_batches=args.max_refill_batches,
            positive_threshold=args.positive_threshold,
            world_size=self.accelerator.num_processes,
        )
        if memory is not None:
            memory.forget([key(prompt) for prompt in budgeted.skipped], args.budget_skip_decay)
        step.results = dict(budgeted.sampled)
        step.chosen = [prompt for prompt, _ in budgeted.sampled]
        step.skipped, step.refill_batches = len(budgeted.skipped), budgeted.candidate_batches
        step.top_up_rounds = budgeted.top_up_rounds

    def _sample_est(self, step: StepSampling, target: int) -> None:
        """Reinforce-Ada-Est (trl_ada.core.est): allocate N_x per prompt from the remembered pass rates, then sample them
        all in one round and keep every sample.

        Each rank's prompts share its generation batch (num_generations each on average), so every rank hands TRL
        exactly the rows GRPOTrainer would; the one round then splits over the ranks along the same boundaries.
        """
        args, n, world = self.args, self.num_generations, self.accelerator.num_processes
        column = args.prompt_memory_group_column
        posterior = remembered_posterior(args.prompt_memory_prior_alpha, args.prompt_memory_prior_beta,
                                         self.prompt_memory, self.group_prior)
        pass_rates = []
        for prompt in range(target):  # from before this step: the memory takes this step's samples afterwards
            a, b, _ = posterior(self._prompt_key(step, prompt), step.rows[prompt][column] if column else None)
            pass_rates.append(a / (a + b))
        per_rank = target // world
        counts = [
            count
            for rank in range(world)
            for count in allocate(pass_rates[rank * per_rank : (rank + 1) * per_rank], n * per_rank,
                                  exponent=args.est_exponent, eps=args.est_epsilon, min_samples=args.est_min_samples,
                                  max_samples=args.est_max_samples)
        ]
        step.batches, step.round_index = 1, 0
        pools = self._sample_round(step, list(range(target)), counts)
        step.results = {
            prompt: PromptResult(pool_rewards=pool, selected=list(range(len(pool))), rounds=1, finished=True)
            for prompt, pool in enumerate(pools)
        }
        step.chosen = list(range(target))
        means = [_nanmean(pool) for pool in pools]
        step.est_metrics = allocation_metrics(pass_rates, counts, means)
        # Round one is every sample here, N_x per prompt: weigh prompts equally, as GRPO's n per prompt does.
        step.est_metrics["sampling/iid_reward"] = _nanmean(means)

    def _sample_round(self, state: StepSampling, active: list[int], k: int | list[int]) -> list[list[float]]:
        """Draw k samples for each active prompt (or k[i] for the i-th: Est), split evenly over the ranks; return
        every reward (all ranks)."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        counts = k if isinstance(k, list) else [k] * len(active)
        items = [(p, len(state.pool_rewards_per_func[p]) + j) for p, count in zip(active, counts) for j in range(count)]
        per_rank = math.ceil(len(items) / world)
        # Collectives need equal sizes: pad with extra samples of the last prompt, generated, scored and discarded.
        padded = items + [items[-1]] * (per_rank * world - len(items))
        state.padding_samples += len(padded) - len(items)
        mine = padded[rank * per_rank : (rank + 1) * per_rank]

        start = time.perf_counter()
        samples, rewards_per_func = self._rollout([state.rows[p] for p, _ in mine])
        state.rollout_sizes.append(len(padded))
        state.round_index += 1
        seconds, prompts_active = state.rounds.get(state.round_index, (0.0, 0))
        state.rounds[state.round_index] = (seconds + time.perf_counter() - start, prompts_active + len(active))

        for offset, (key, sample) in enumerate(zip(mine, samples)):
            if rank * per_rank + offset < len(items):
                state.generated[key] = sample
        rewards = weighted_sum(rewards_per_func, self.reward_weights)[: len(items)].tolist()
        for (p, _), row in zip(items, rewards_per_func[: len(items)]):
            state.pool_rewards_per_func[p].append(row)
        ends = list(itertools.accumulate(counts))
        return [rewards[end - count : end] for end, count in zip(ends, counts)]

    def _rollout(self, rows: list[dict[str, Any]]) -> tuple[list[Sample], torch.Tensor]:
        """One sample per row through GRPOTrainer's own rollout path; returns the samples and every rank's rewards.

        TRL's `_generate_and_score_completions` prepares each row as GRPOTrainer does (an environment instance from
        its pool, reset with the row; the row's tool dicts; its images inlined into the prompt) and calls `_generate`
        (single-turn generation, the tool-calling loop, or `rollout_func`); `_generate` below keeps what it returns
        and stops the method there, before the forward passes, which only the kept samples need. The samples are
        then scored here, with the environments of this round still in place (environment-owned rewards are read
        from the state this very rollout left).
        """
        self._rollout_capture = []
        try:
            super()._generate_and_score_completions([dict(row) for row in rows])
            raise RuntimeError("AdaGRPOTrainer: GRPOTrainer generated without calling _generate; see trl_ada.integration.seams.")
        except _RolloutTaken:
            prompts, generated = self._rollout_capture
        finally:
            self._rollout_capture = None
        samples = split_rollout(prompts, generated)
        if self.rollout_func is not None:  # the user's function placed each completion on its own row
            check_rollout_rows(prompts, generated[0])
        inputs = [{**row, **sample.extra} for row, sample in zip(rows, samples)]  # as TRL merges rollout_func's fields
        rewards_per_func = self._calculate_rewards(
            inputs, prompts, [s.completion for s in samples], [s.completion_ids for s in samples]
        )
        for sample, logs in zip(samples, self._take_extra_logs(len(samples))):
            sample.extra_logs = logs
        return samples, rewards_per_func

    def _take_extra_logs(self, count: int) -> list[dict[str, Any]]:
        """The log_extra columns the reward functions just wrote for `count` samples, taken out of TRL's buffer.

        They belong to these samples and follow their completion, kept or not (TRL would otherwise flush every
        round's values into the completions table, next to the wrong completions).
        """
        extra = {column: values for column, values in self._pending_extra_logs.items() if len(values) == count}
        for column in set(self._pending_extra_logs) - set(extra) - self._warned_extra_columns:
            self._warned_extra_columns.add(column)
            logger.warning(f"log_extra column {column!r} does not hold one value per completion; it is not logged.")
        self._pending_extra_logs.clear()
        return [{column: values[i] for column, values in extra.items()} for i in range(count)]

    def _sample_pipelined(self, step: StepSampling, prompts: list[int], seed: int) -> list[PromptResult]:
        return sample_pipelined(self, step, prompts, seed)

    def _check_pipelined_reward_models(self) -> None:
        check_reward_models_unsharded(self)

    def _open_stream(self, prompt_ids: list[list[int]]):
        """The engine the pipelined rounds drive: this rank's colocated vLLM engine, one request per sample."""
        from trl_ada.integration.vllm_stream import VLLMStream, colocate_sampling_params

        generation = self.vllm_generation
        max_num_seqs = generation.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs
        return VLLMStream(generation.llm, prompt_ids, colocate_sampling_params(generation), max_num_seqs)

    def _collect_selected(self, state: StepSampling, local: list[int]) -> list[Sample]:
        """Send each selected sample of a chosen prompt to the rank that trains on it; return this rank's, in order."""
        wanted = {(p, i) for p in state.chosen for i in state.results[p].selected}
        shard = {key: sample for key, sample in state.generated.items() if key in wanted}
        selected: dict[tuple[int, int], Sample] = {}
        for part in gather_object([shard]):
            selected.update(part)
        samples = [selected[(p, i)] for p in local for i in state.results[p].selected]
        for column in sorted({column for s in samples for column in s.extra_logs}):
            self._pending_extra_logs[column] = [s.extra_logs.get(column) for s in samples]
        return samples

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
    # Seam 2: generation. A round runs GRPOTrainer's rollout path and keeps its output; TRL then asks for this rank's
    # chosen prompts, each repeated num_generations times, and gets the kept samples back.

    def _generate(self, prompts):
        step = self._step_sampling
        if step is not None and step.local_samples is not None:  # TRL builds the training batch: the kept samples
            samples, step.local_samples = step.local_samples, None
            if len(samples) != len(prompts):
                raise RuntimeError(
                    f"AdaGRPOTrainer: TRL asked for {len(prompts)} completions, {len(samples)} were kept for this rank."
                )
            kept = join_rollout(samples)
            self.generation_count.add(trained_tokens=model_tokens(kept[1]))
            self.generation_count.flush(self.accelerator)  # the step's sampling is over, on every rank at once
            return kept
        counting = self._counting_generation()
        with counting_rollout_func(self, counting):
            generated = super()._generate(prompts)
        if counting:  # the rows returned are the completions (with tools: one per sample, whatever its turns)
            self.generation_count.add(completions=len(generated[1]))
        if self._rollout_capture is not None:  # a round (_rollout): keep it, skip the rest
            self._rollout_capture = (prompts, generated)
            raise _RolloutTaken
        if counting:  # plain sampling: this generation batch is all there is, and every rank is here
            self.generation_count.add(trained_tokens=model_tokens(generated[1]))  # every sample is trained on
            self.generation_count.flush(self.accelerator)
        return generated

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if self._rollout_capture is not None:
            num_generations = 1  # a round's rows are single samples, not groups of num_generations (vLLM server mode)
        completion_ids, logprobs = super()._generate_single_turn(
            prompt_ids, images, multimodal_fields, num_generations, has_tool_images
        )
        if self._counting_generation():  # every turn as written, also one the tool loop then cuts to length
            self.generation_count.add(tokens=model_tokens(completion_ids))
        return completion_ids, logprobs

    def _counting_generation(self) -> bool:
        return self.generation_count is not None and self.model.training  # evaluation is no training cost

    # ---------------------------------------------------------------------------------------------------------------
    # Seam 3: rewards and advantages.

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        state = self._step_sampling
        if state is not None and state.selected_rewards_per_func is not None:
            rewards_per_func = state.selected_rewards_per_func  # scored during the rounds: never score twice
        else:
            self._reward_call_rows = len(prompts)
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            # the threshold decides what counts as positive in the exit rules, the selection and the memory
            if not self._threshold_checked and (self.args.multiround_adaptive_downsampling or self.args.prompt_memory):
                self._threshold_checked = warn_if_threshold_outside(
                    self.args.positive_threshold, weighted_sum(rewards_per_func, self.reward_weights))
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _log_metric(self, name: str, value: float):
        super()._log_metric(name, value)
        self._logged_metric_rows[name].append(self._reward_call_rows)  # the step's value weighs each call by it

    def _replace_advantages(self, output: dict[str, Any], results: list[PromptResult] | None) -> None:
        """Swap TRL's GRPO advantages for the configured estimator's (`results`: the chosen prompts' sampling)."""
        args = self.args
        estimator = args.advantage_estimator
        if estimator == "grpo" or (estimator == "reinforce_ada" and not args.global_stat_est):
            self._last_advantages = None  # TRL's own group statistics, already in `output`
            return
        n = self.num_generations
        rewards = weighted_sum(self._last_rewards_per_func, self.reward_weights).tolist()
        groups = [rewards[i : i + n] for i in range(0, len(rewards), n)]
        if estimator == "est":  # every sample of the prompt, N_x of them: the kept group is the whole pool
            residual = 1.0 - args.est_exponent
            values = [est_advantages(r.pool_rewards, args.est_epsilon, residual) for r in results]
        elif estimator == "reinforce_ada":
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

    def _fix_group_metrics(self, sizes: list[int]) -> None:
        """TRL's `frac_reward_zero_std` reads groups of num_generations rows; Est's groups have N_x rows. Recompute
        it over the real groups, as TRL defines it: the share of the batch's samples whose group has zero std."""
        rewards = weighted_sum(self._last_rewards_per_func, self.reward_weights)
        zero = 0
        for group in torch.split(rewards, sizes):
            finite = group[~torch.isnan(group)]
            # TRL's test: its nan-aware std close to 0 (one finite reward, or none: std NaN, not zero).
            if finite.numel() > 1 and torch.isclose(finite.std(), torch.zeros(())):
                zero += group.numel()
        self._metrics["train"]["frac_reward_zero_std"][-1] = zero / rewards.numel()

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

    def _log_sampling_metrics(self, output: dict[str, Any], memory_metrics: dict[str, float]) -> None:
        advantages = self._last_advantages
        if advantages is None:  # TRL's statistics: only this rank's slice is at hand
            advantages = self.accelerator.gather(output["advantages"])
        refilling = self.args.sampling_budget is not None or self.args.dynamic_sampling
        metrics = step_metrics(
            self._step_sampling, advantages, self.num_generations, budget=self.args.sampling_budget is not None,
            dynamic=self.args.dynamic_sampling,
            epochs_drawn=self._prompts_drawn / len(self.train_dataset) if refilling else None,
        )
        metrics |= self._step_sampling.est_metrics
        for name, value in {**metrics, **memory_metrics}.items():
            self._metrics["train"][name].append(value)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # The generated totals are cumulative: added to every training log as they stand, not averaged over the
        # logging window with TRL's per-step metrics (and present whichever sampling path made the step's samples).
        if self.generation_count is not None and self.model.training:
            logs.update(self.generation_count.metrics())  # in place, as TRL adds its own metrics
        super().log(logs, start_time)

    def _get_train_sampler(self, dataset=None):
        return EpochSeededSampler(super()._get_train_sampler(dataset))

    # ---------------------------------------------------------------------------------------------------------------
    # Prompt memory and refill state: updated every step, saved in every checkpoint, restored on resume.

    def _update_prompt_memory(self, step: StepSampling) -> dict[str, float]:
        """Fold every scored completion of the step into the memory; return its calibration metrics.

        Only scorable completions are trials (an unscorable one, NaN reward, is neither a success nor a failure)."""
        metrics: dict[str, float] = {}
        threshold, n = self.args.positive_threshold, self.num_generations
        if self.group_prior is not None:
            # Only the first n samples of each pool: drawn before any sampling rule saw a reward, so unbiased. A visit
            # with fewer than two scorable ones among them tells nothing of the spread: left out.
            column = self.args.prompt_memory_group_column
            visits = [(step.rows[p][column], *count_signs(r.pool_rewards[:n], threshold))
                      for p, r in step.results.items()]
            visits = [(label, pos + neg, pos) for label, pos, neg in visits if pos + neg >= 2]
            self.group_prior.update([label for label, _, _ in visits], [trials for _, trials, _ in visits],
                                    [pos for _, _, pos in visits])
            metrics["sampling/groups_known"] = float(sum(s is not None for s in self.group_prior.table()["strength"]))
        if self.prompt_memory is None:
            return metrics
        signs = [count_signs(r.pool_rewards, threshold) for r in step.results.values()]
        return metrics | observe_step(
            self.prompt_memory, [self._prompt_key(step, prompt) for prompt in step.results],
            [pos + neg for pos, neg in signs], [pos for pos, _ in signs], step=self.state.global_step,
        )

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if not self.args.should_save:
            return
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        save_generation_count(folder, self.generation_count)  # sampling off too: a GRPO run's cost continues as well
        if self.args.sampling_active:
            save_sampling_state(folder, self._prompts_drawn, self._refill, self.group_prior, self.prompt_memory)

    def _load_optimizer_and_scheduler(self, checkpoint):
        # TRL restores its own extra state (the adaptive entropy controller) here too: called once, on resume.
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None and not load_generation_count(checkpoint, self.generation_count):
            logger.warning(f"{checkpoint} holds no generated totals (written by an earlier trl-ada): "
                           "sampling/generated_*_total count from 0 in this run.")
        if checkpoint is not None and (self._refill is not None or self.prompt_memory is not None):
            self._prompts_drawn = load_sampling_state(checkpoint, self._refill, self.group_prior, self.prompt_memory)

    def train(self, *args, **kwargs):
        output = super().train(*args, **kwargs)
        if self.prompt_memory is not None and self.args.should_save:
            self.export_prompt_memory(os.path.join(self.args.output_dir, MEMORY_EXPORT_FILE))
        if self.group_prior is not None and self.args.should_save:
            with open(os.path.join(self.args.output_dir, GROUP_EXPORT_FILE), "w") as f:
                json.dump(self.group_prior.table(), f, indent=1)
        return output

    def export_prompt_memory(self, path: str) -> Dataset:
        """Write the prompt memory as a table (parquet; `trl_ada.integration.resume.export_memory` lists the columns), with each
        prompt's text (the last message of the training row with that hash: the training set is tokenized once for
        it). Sort by `pass_rate` to see solved, unsolved and frontier prompts."""
        texts: dict[str, str] = {}
        if isinstance(self.train_dataset, Dataset):
            for start in range(0, len(self.train_dataset), 1024):
                rows = list(self.train_dataset.select(range(start, min(start + 1024, len(self.train_dataset)))))
                for row, ids in zip(rows, self._tokenize(rows)):
                    texts.setdefault(f"{self._row_key(row, ids):016x}", prompt_text(row.get("prompt", "")))
        return export_memory(self.prompt_memory, texts, path)


class _RolloutTaken(Exception):
    """Raised by `_generate` inside a round, once the round's samples are kept: TRL's generation batch ends there."""


__all__ = ["AdaGRPOTrainer", "ReloadingVLLMGeneration"]
