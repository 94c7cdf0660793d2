"""`AdaGRPOTrainer`: TRL's `GRPOTrainer` with Reinforce-Ada's adaptive sampling and pooled advantages.

The algorithm is in `trl_ada.core`, the glue in `trl_ada.integration`; this module keeps the seams of `GRPOTrainer`
it overrides. `_generate_and_score_completions` has the configured sampler (`trl_ada.samplers`) sample the batch's
prompts, in one call or in rounds, through a narrow context (`_sampling_context`): each call runs TRL's own rollout
path up to `_generate` and `_calculate_rewards`;
TRL's stock method then runs on the chosen prompts (padding, old/ref log-probs, importance sampling, metrics), and
the configured estimator replaces its advantages (`trl_ada.integration.estimators`). `_generate` and
`_calculate_rewards` then hand back the kept samples and their rewards: every completion is generated and scored once.

Multi-process: every rank learns every prompt of the generation batch; each round splits the (prompt, sample) pairs
evenly over the ranks, so all ranks take the same decisions from TRL's gathered rewards; rank r trains on the r-th
slice of the chosen prompts, and their selected completions travel to it.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import os
from typing import Any

import torch
from accelerate.logging import get_logger
from accelerate.utils import gather_object
from datasets import Dataset
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from trl_ada.integration.seams import check_seams, require_trl_internals, warn_if_unsupported_trl


warn_if_unsupported_trl()
require_trl_internals()  # before anything else imports them: a moved TRL internal fails here, named

from trl_ada.config import PAPER, AdaGRPOConfig, trainer_config
from trl_ada.core.memory import text_only
from trl_ada.core.sampling import PromptResult
from trl_ada.integration import prompt_keys
from trl_ada.integration.context import log_step, sampling_context, settle, trained_results
from trl_ada.integration.estimators import replace_advantages
from trl_ada.integration.generation_count import GenerationCount, counting_rollout_func, model_tokens
from trl_ada.integration.pipelined_rank import RankEngine, check_reward_models_unsharded, decode, sample_pipelined
from trl_ada.integration.refill import EpochSeededSampler
from trl_ada.integration.resume import (
    SamplingState,
    check_resume,
    export_memory,
    load_generation_buffer,
    sampler_state_text,
    save_generation_buffer,
)
from trl_ada.integration.rollouts import (
    Sample,
    StepSampling,
    collect_selected,
    join_rollout,
    merge_logged_metrics,
    merge_round_metrics,
    positive_rewards,
    scored_samples,
    take_extra_logs,
    weighted_sum,
)
from trl_ada.integration.support import (
    check_trainer_arguments,
    checked_reward,
    environment_names,
    positive_reward_index,
    reward_names,
    warn_if_fewer_processes,
    warn_if_threshold_outside,
)
from trl_ada.integration.vllm_backend import ReloadingVLLMGeneration, awake_for_rounds, vllm_generation_for
from trl_ada.samplers import load_sampler


logger = get_logger(__name__)
_EMPTY_PROMPT = [{"role": "user", "content": ""}]  # TRL's prompt for an environment-owned row without one


class AdaGRPOTrainer(GRPOTrainer):
    """Drop-in replacement for TRL's `GRPOTrainer` that samples with Reinforce-Ada (arXiv:2510.04996).

    Takes exactly `GRPOTrainer`'s arguments; `args` must be an [`AdaGRPOConfig`]. With `sampler="grpo"` (sampling
    off) it behaves exactly like `GRPOTrainer`.

    Example:

    ```python
    from datasets import Dataset
    from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
    from trl_ada.rewards import boxed_math_reward

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "What is 2 + 3?"}], "answer": "5"}] * 64)
    args = AdaGRPOConfig(output_dir="out", num_generations=4, per_device_train_batch_size=8, reinforce_ada_choice="balanced")
    trainer = AdaGRPOTrainer(model="Qwen/Qwen2.5-Math-1.5B", reward_funcs=boxed_math_reward, args=args, train_dataset=dataset)
    trainer.train()
    ```
    """

    _step_sampling: StepSampling | None = None  # None outside a sampling step: every seam is then GRPOTrainer's
    _rollout_capture: list | tuple | None = None  # inside a round: where `_generate` leaves the round's output
    generation_count: GenerationCount | None = None  # what training generated so far

    _tag_names = ["trl", "grpo", "reinforce-ada"]
    _name = "AdaGRPO"
    _paper = PAPER  # the paper TRL's model card cites

    def __init__(self, model, reward_funcs=None, args: AdaGRPOConfig | None = None, *pos, **kwargs):
        check_seams()  # before any model is loaded: a changed TRL internal fails here, named, not inside step 1
        args = trainer_config(args, model)
        given = inspect.signature(GRPOTrainer.__init__).bind(self, model, reward_funcs, args, *pos, **kwargs)
        self._sampler = load_sampler(args)  # the allocation rule (trl_ada.samplers): its own checks, before the model
        sampler_state_text(self._sampler)  # a state a checkpoint cannot hold fails now, not at the first save
        draws = getattr(self._sampler, "draws_prompts", None)
        check_trainer_arguments(args, given.arguments, draws)  # before the model loads
        own_rewards = reward_names(reward_funcs)
        with vllm_generation_for(args, self._sampler):
            super().__init__(model, reward_funcs, args, *pos, **kwargs)
        self.reward_funcs = [checked_reward(f, name) for f, name in zip(self.reward_funcs, self.reward_func_names)]
        environments = len(self.reward_func_names) > len(own_rewards)  # each scores only the rows it owns: one source
        self._positive_index = positive_reward_index(args, self.reward_func_names, len(own_rewards) + environments)
        check_reward_models_unsharded(args.pipelined_rounds, self.reward_func_names, self.reward_funcs)
        warn_if_fewer_processes(self.accelerator.num_processes)
        self._warned: set[str] = set()  # the warnings given once per trainer (a log_extra column's among them)
        self._reward_call_rows = 0  # completions of the reward call in progress (log_metric's weight)
        self._logged_metric_rows: dict[str, list[int]] = collections.defaultdict(list)
        self._last_rewards_per_func = self._last_advantages = None  # of the kept completions, all ranks
        # What sampling carries from step to step (and every checkpoint): the memory, group prior, refill stream
        self.sampling_state = SamplingState.for_settings(args, self.train_dataset, self.shuffle_dataset, draws)
        self.prompt_memory, self.group_prior = self.sampling_state.memory, self.sampling_state.group_prior
        # Refilled rows pass the dataloader's column filter (`remove_unused_columns`): the same reward arguments
        self._as_dataloader_rows = self._get_collator_with_removed_columns(lambda rows: rows, description="training")
        self.generation_count = GenerationCount()
        self.rollout_func = counting_rollout_func(self.rollout_func, self.generation_count, self._counting_generation)

    # --- Seam 1: the whole generation batch ---------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs, *args, **kwargs):
        self._logged_metric_rows.clear()  # TRL flushes its pending log_metric values at the end of every batch
        if not self.model.training or not self.args.sampling_active:  # TRL's plain sampling (always in evaluation)
            output = super()._generate_and_score_completions(inputs, *args, **kwargs)
            if self.model.training:
                self._replace_advantages(output, results=None)
            return output
        n, world, rank = self.num_generations, self.accelerator.num_processes, self.accelerator.process_index
        rows = [dict(row) for row in gather_object(inputs[::n])]
        self._step_sampling = step = StepSampling(rows, self._tokenize(rows), [[] for _ in rows])
        target = len(rows)
        metrics_before = {key: len(values) for key, values in self._metrics["train"].items()}
        try:
            context = self._sampling_context(step)
            sync = self.use_vllm and self.state.global_step != self._last_loaded_step
            self._last_loaded_step = self.state.global_step  # pushed below, once for all of the step's rounds
            with awake_for_rounds(self.vllm_generation if self.use_vllm else None, sync=sync):
                selection = self._sampler.sample(context, target)
            settle(step, selection, context, self.sampling_state, self.args, target, self._positive_rewards)
            merge_round_metrics(self._metrics["train"], metrics_before, step.rollout_sizes)
            merge_logged_metrics(self._pending_metrics, self._logged_metric_rows)
            local = step.chosen[rank * (target // world) : (rank + 1) * (target // world)]
            step.local_samples = self._collect_selected(step, local)
            # One row per kept sample: num_generations per prompt, except under Est (N_x per prompt).
            rows = [dict(step.rows[p]) for p in local for _ in step.results[p].selected]
            output = super()._generate_and_score_completions(rows, *args, **kwargs)
            self._replace_advantages(output, results=[step.results[p] for p in step.chosen])
            advantages = self._last_advantages  # None: TRL's statistics, of which only this rank's slice is at hand
            advantages = self.accelerator.gather(output["advantages"]) if advantages is None else advantages
            metrics, kept_rewards = self._metrics["train"], self._last_rewards_per_func
            log_step(metrics, step, advantages, kept_rewards, self.args, self.sampling_state, self.reward_weights)
        finally:
            self._step_sampling = None
        return output

    def _sampling_context(self, step: StepSampling):
        """What the sampler sees of this trainer for one generation batch (trl_ada.samplers.protocol)."""
        run_rounds = None
        if self.args.pipelined_rounds:  # the rounds on this rank's colocated engine (trl_ada.core.pipelined)
            engine = RankEngine(
                self.args,
                self.accelerator,
                self.vllm_generation,
                self._score,
                functools.partial(decode, self.processing_class, self._tokenizer, self.tools),
                self._positive_rewards,
                {*self.eos_token_ids, self._tokenizer.pad_token_id},
                self.generation_count,
                self._metrics["train"],
                self.state,
            )
            run_rounds = functools.partial(sample_pipelined, step, engine)
        return sampling_context(
            step,
            self.sampling_state,
            self.args,
            accelerator=self.accelerator,
            global_step=self.state.global_step,
            rollout=self._rollout,
            reward_weights=self.reward_weights,
            positive_rewards=self._positive_rewards,
            tokenize=self._tokenize,
            as_dataloader_rows=self._as_dataloader_rows,
            train_dataset=self.train_dataset,
            with_environment=self.environment_factories is not None,
            run_rounds=run_rounds,
        )

    def _positive_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """The reward that decides a positive (`positive_reward_func`, or the weighted sum): what samplers read."""
        return positive_rewards(rewards_per_func, self.reward_weights, self._positive_index)

    def _tokenize(self, rows: list[dict[str, Any]]) -> list[list[int]]:
        """The rows' prompts as TRL tokenizes them, text only, before any environment observation (memory keys)."""
        if self.environment_factories is not None:  # TRL renders each row with its own environment's tools
            self._batch_environments = environment_names(rows, self.environment_factories, self._multi_environment)
        prompt_ids, _, _ = self._tokenize_prompts([text_only(row.get("prompt", _EMPTY_PROMPT)) for row in rows])
        return [list(ids) for ids in prompt_ids]

    def _rollout(self, rows: list[dict[str, Any]]) -> tuple[list[Sample], torch.Tensor]:
        """One sample per row through GRPOTrainer's own rollout path (each row's environment reset, tools, images):
        `_generate` keeps the output and stops TRL before the forward passes. Scored here, while this round's
        environments still hold the state their rewards read. Returns the samples and every rank's rewards."""
        self._rollout_capture = []
        try:
            super()._generate_and_score_completions([dict(row) for row in rows])
            raise RuntimeError("GRPOTrainer generated without calling _generate; see trl_ada.integration.seams.")
        except _RolloutTaken:
            prompts, generated = self._rollout_capture
        finally:
            self._rollout_capture = None
        return scored_samples(rows, prompts, generated, self._score, from_rollout_func=self.rollout_func is not None)

    def _score(self, inputs, prompts, completions, completion_ids) -> tuple[torch.Tensor, list[dict[str, Any]]]:
        """Every reward function's reward for each sample, and the log_extra values they wrote for it."""
        rewards_per_func = self._calculate_rewards(inputs, prompts, completions, completion_ids)
        return rewards_per_func, take_extra_logs(self._pending_extra_logs, len(prompts), self._warned)

    def _collect_selected(self, state: StepSampling, local: list[int]) -> list[Sample]:
        return collect_selected(state, local, self._pending_extra_logs)  # this rank's kept samples, all it logs

    # --- Seam 2: generation: a round keeps TRL's output; for the training batch TRL gets the kept samples ---------
    def _generate(self, prompts, *args, **kwargs):
        step = self._step_sampling
        if step is not None and step.local_samples is not None:  # TRL builds the training batch: the kept samples
            samples, step.local_samples = step.local_samples, None
            kept = join_rollout(samples, expected=len(prompts))
            self.generation_count.add_trained(kept[1], self.accelerator)  # the step's sampling is over, on every rank
            return kept
        with self.generation_count.timed() if self._counting_generation() else contextlib.nullcontext():
            generated = super()._generate(prompts, *args, **kwargs)
        if self._counting_generation():  # outside a round (plain sampling) the batch is all there is, every rank here
            self.generation_count.add_generated(generated[1], self.accelerator, trained=self._rollout_capture is None)
        if self._rollout_capture is not None:  # a round (_rollout): keep it, skip the rest
            self._rollout_capture = (prompts, generated)
            raise _RolloutTaken
        return generated

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
        if self._rollout_capture is not None:
            num_generations = 1  # a round's rows are single samples, not groups of num_generations (vLLM server mode)
        output = super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs)
        if self._counting_generation():  # every turn as written, also one the tool loop then cuts to length
            self.generation_count.add(tokens=model_tokens(output[0]))  # output[0]: the completion ids
        return output

    def _counting_generation(self) -> bool:
        return self.generation_count is not None and self.model.training  # evaluation is no training cost

    # --- Seam 3: rewards and advantages -------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids, *args, **kwargs):
        rewards_per_func = getattr(self._step_sampling, "selected_rewards_per_func", None)  # scored in the rounds
        if rewards_per_func is None:
            self._reward_call_rows = len(prompts)
            rewards_per_func = super()._calculate_rewards(
                inputs, prompts, completions, completion_ids, *args, **kwargs
            )
            warn_if_threshold_outside(self.args, self._positive_rewards(rewards_per_func), self._warned)
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _log_metric(self, name: str, value: float, *args, **kwargs):
        super()._log_metric(name, value, *args, **kwargs)
        self._logged_metric_rows[name].append(self._reward_call_rows)  # the step's value weighs each call by it

    def _replace_advantages(self, output: dict[str, Any], results: list[PromptResult] | None) -> None:
        rewards, rank = weighted_sum(self._last_rewards_per_func, self.reward_weights), self.accelerator.process_index
        step = self._step_sampling
        trained = trained_results(step, results, self.reward_weights) if self._positive_index is not None else None
        self._last_advantages = replace_advantages(  # None: TRL's own group statistics stand in `output`
            output, step, results, rewards, self.args, rank, self._logs["advantages"], self._warned, trained
        )

    # --- Logs and the checkpoint (which carries the sampling state) ------------------------------------------------
    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        # The cost totals are cumulative: logged as they stand, not averaged over the window as TRL's metrics are
        if self.generation_count is not None and self.model.training:
            logs.update(self.generation_count.metrics())  # in place, as TRL adds its own metrics
        super().log(logs, *args, **kwargs)

    def _get_train_sampler(self, *args, **kwargs):
        return EpochSeededSampler(super()._get_train_sampler(*args, **kwargs))

    def _save_checkpoint(self, model, trial, *args, **kwargs):
        # Ours first: once TRL's checkpoint is complete (and older ones are rotated away), it holds the sampling state
        folder = os.path.join(self._get_output_dir(trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        save_generation_buffer(folder, self.accelerator.process_index, self._step, self._buffered_inputs, self.args)
        if self.args.should_save:
            self.sampling_state.save(folder, self.generation_count, self.args.sampling_active, self._sampler)
        super()._save_checkpoint(model, trial, *args, **kwargs)

    def _load_optimizer_and_scheduler(self, checkpoint, *args, **kwargs):
        # TRL restores its own extra state (the adaptive entropy controller) here too: called once, on resume.
        super()._load_optimizer_and_scheduler(checkpoint, *args, **kwargs)
        if checkpoint is not None:
            self.sampling_state.load(checkpoint, self.generation_count, logger.warning, self._sampler)
            buffer = load_generation_buffer(checkpoint, self.accelerator.process_index, self.accelerator.device)
            if buffer is not None:  # inside a generation batch: train on its rest, as the uninterrupted run
                self._step, self._buffered_inputs = buffer

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        check_resume(resume_from_checkpoint, self.args.output_dir)  # a damaged file named, not tripped on later
        output = super().train(resume_from_checkpoint, *args, **kwargs)
        if self.args.should_save:
            self.sampling_state.export(self.args.output_dir, self.export_prompt_memory)
        return output

    def export_prompt_memory(self, path: str) -> Dataset:
        """Write the prompt memory as a table (parquet; `trl_ada.integration.resume.export_memory` lists the
        columns), with each prompt's text. Sort by `pass_rate` to see solved, unsolved and frontier prompts."""
        texts = prompt_keys.memory_texts(self.train_dataset, self._tokenize, self.environment_factories is not None)
        return export_memory(self.prompt_memory, texts, path)


class _RolloutTaken(Exception):
    """Raised by `_generate` inside a round, once the round's samples are kept: TRL's generation batch ends there."""


__all__ = ["AdaGRPOTrainer", "ReloadingVLLMGeneration"]
