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
import functools
import inspect
import os
import time
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
from trl_ada.core.budget import remembered_posterior
from trl_ada.core.memory import text_only
from trl_ada.core.sampling import PromptResult
from trl_ada.integration import estimators, prompt_keys
from trl_ada.integration.generation_count import GenerationCount, counting_rollout_func, model_tokens
from trl_ada.integration.pipelined_rank import check_reward_models_unsharded, sample_pipelined
from trl_ada.integration.refill import EpochSeededSampler
from trl_ada.integration.resume import (
    export_at_end,
    export_memory,
    load_trainer_state,
    sampling_state,
    save_trainer_state,
)
from trl_ada.integration.rollouts import (
    Sample,
    StepSampling,
    check_rollout_rows,
    collect_selected,
    join_rollout,
    merge_logged_metrics,
    merge_round_metrics,
    plan_round,
    record_round,
    split_rollout,
    step_metrics,
    take_extra_logs,
    weighted_sum,
)
from trl_ada.integration.support import (
    check_prompt_column,
    check_trainer_arguments,
    checked_reward,
    environment_names,
    warn_if_fewer_processes,
    warn_if_threshold_outside,
)
from trl_ada.integration.vllm_backend import ReloadingVLLMGeneration, awake_for_rounds, vllm_generation_for
from trl_ada.integration.vllm_stream import colocated_stream
from trl_ada.samplers import SamplingContext, check_selection, load_sampler


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

    # None outside a sampling step (every seam is then GRPOTrainer's), also on a trainer built without __init__
    _step_sampling: StepSampling | None = None
    _rollout_capture: list | tuple | None = None  # inside a round: where `_generate` leaves the round's output
    generation_count: GenerationCount | None = None  # what training generated so far

    _tag_names = ["trl", "grpo", "reinforce-ada"]
    _name = "AdaGRPO"
    _paper = PAPER  # the paper TRL's model card cites

    def __init__(self, model, reward_funcs=None, args: AdaGRPOConfig | None = None, *pos, **kwargs):
        check_seams()  # before any model is loaded: a changed TRL internal fails here, named, not inside step 1
        args = trainer_config(args, model)
        given = inspect.signature(GRPOTrainer.__init__).bind(self, model, reward_funcs, args, *pos, **kwargs)
        check_trainer_arguments(args, given.arguments)  # before the model loads
        self._sampler = load_sampler(args)  # the allocation rule (trl_ada.samplers): its own checks, before the model
        check_prompt_column(given.arguments.get("train_dataset"), given.arguments.get("environment_factory"))
        with vllm_generation_for(args):
            super().__init__(model, reward_funcs, args, *pos, **kwargs)
        self.reward_funcs = [
            func if isinstance(func, torch.nn.Module) else checked_reward(func, name)
            for func, name in zip(self.reward_funcs, self.reward_func_names)
        ]
        self._threshold_checked = self._warned_non_binary = False
        self._reward_call_rows = 0  # completions of the reward call in progress (log_metric's weight)
        self._logged_metric_rows: dict[str, list[int]] = collections.defaultdict(list)
        warn_if_fewer_processes(self.accelerator.num_processes)
        self._check_pipelined_reward_models()
        self._last_rewards_per_func = self._last_advantages = None  # of the kept completions, all ranks
        self._warned_extra_columns: set[str] = set()
        # What sampling carries from step to step (and every checkpoint): the memory, group prior, refill stream
        self.prompt_memory, self.group_prior, self._refill = sampling_state(
            args, self.train_dataset, self.shuffle_dataset
        )
        # Refilled rows pass the column filter the dataloader's rows pass (`remove_unused_columns`, the Trainer's own
        # collator wrapper): a reward function gets the same keyword arguments for a refilled row as for any other.
        self._as_dataloader_rows = self._get_collator_with_removed_columns(lambda rows: rows, description="training")
        self._prompts_drawn = 0  # every prompt drawn so far (TRL's, refills, skipped): the honest consumption count
        self.generation_count = GenerationCount()

    # --- Seam 1: the whole generation batch ---------------------------------------------------------------------

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
            with awake_for_rounds(self):
                selection = self._sampler.sample(self._sampling_context(step), target)
            check_selection(selection, target, n, world)
            if selection.advantages is None and not self.args.replaces_grpo_advantages:
                if any(len(selection.results[p].selected) != n for p in selection.chosen):
                    raise ValueError(
                        f"sampler={self.args.sampler!r} kept groups of other sizes than num_generations and gave no "
                        "advantages: TRL's group statistics read groups of num_generations rows. Return "
                        "Selection.advantages, or set advantage_estimator='reinforce_ada' (the pooled baseline reads "
                        "groups of any size)."
                    )
            step.results, step.chosen, step.skipped = selection.results, selection.chosen, selection.skipped
            step.advantages, step.sampler_metrics = selection.advantages, selection.metrics
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
            unequal = any(len(step.results[p].selected) != n for p in step.chosen)
            if self.args.reinforce_ada_est or step.advantages is not None or unequal:  # TRL's frac_reward_zero_std
                # read groups of n rows and its own std scaling; these groups hold N_x (Est, Knapsack)
                self._metrics["train"]["frac_reward_zero_std"][-1] = estimators.zero_std_fraction(
                    weighted_sum(self._last_rewards_per_func, self.reward_weights), step
                )
            self._log_sampling_metrics(output, memory_metrics)
        finally:
            self._step_sampling = None
        return output

    def _sampling_context(self, step: StepSampling) -> SamplingContext:
        """What the sampler sees of this trainer for one generation batch (trl_ada.samplers.protocol)."""
        args, column = self.args, self.args.prompt_memory_group_column
        posterior = remembered_posterior(
            args.prompt_memory_prior_alpha, args.prompt_memory_prior_beta, self.prompt_memory, self.group_prior
        )
        keys: dict[int, int] = {}

        def prompt_key(prompt: int) -> int:
            if prompt not in keys:
                keys[prompt] = self._prompt_key(step, prompt)
            return keys[prompt]

        def begin_batch() -> int:
            batch, step.batches, step.round_index = step.batches, step.batches + 1, 0
            return batch

        return SamplingContext(
            num_generations=self.num_generations,
            world_size=self.accelerator.num_processes,
            global_step=self.state.global_step,
            seed=args.seed,
            sample=functools.partial(self._sample_round, step),
            draw=functools.partial(self._draw, step),
            row=lambda prompt: step.rows[prompt],
            prompt_key=prompt_key,
            pass_rate_posterior=lambda p: posterior(prompt_key(p), step.rows[p][column] if column else None),
            begin_batch=begin_batch,
            memory=self.prompt_memory,
            run_rounds=functools.partial(sample_pipelined, self, step) if args.pipelined_rounds else None,
        )

    def _draw(self, step: StepSampling, count: int) -> list[int]:
        """`count` prompts from the refill stream (the same ones on every rank) into the step, as the dataloader's
        rows (the Trainer's column filter applied); returns their numbers."""
        if self._refill is None:
            raise ValueError(
                f"sampler={self.args.sampler!r} draws prompts from the training set, which needs a "
                "map-style datasets.Dataset as train_dataset."
            )
        first = len(step.rows)
        rows = [dict(self.train_dataset[index]) for index in self._refill.draw(count)]
        step.rows += self._as_dataloader_rows(rows)
        step.prompt_ids += self._tokenize(step.rows[first:])
        step.pool_rewards_per_func += [[] for _ in range(count)]
        return list(range(first, len(step.rows)))

    def _tokenize(self, rows: list[dict[str, Any]]) -> list[list[int]]:
        """The rows' prompts as TRL tokenizes them, text only (memory keys, pipelining): before any environment
        observation, image placeholders left out (the memory key hashes the images themselves, `_row_key`)."""
        if self.environment_factories is not None:  # TRL renders each row with its own environment's tools
            self._batch_environments = environment_names(rows, self.environment_factories, self._multi_environment)
        prompt_ids, _, _ = self._tokenize_prompts([text_only(row.get("prompt", _EMPTY_PROMPT)) for row in rows])
        return [list(ids) for ids in prompt_ids]

    def _row_key(self, row: dict[str, Any], prompt_ids: list[int]) -> int:
        return prompt_keys.row_key(row, prompt_ids, with_environment=self.environment_factories is not None)

    def _prompt_key(self, step: StepSampling, prompt: int) -> int:
        return self._row_key(step.rows[prompt], step.prompt_ids[prompt])

    def _sample_round(self, state: StepSampling, active: list[int], k: int | list[int]) -> list[list[float]]:
        """k samples for each active prompt (or k[i]: Est), split evenly over the ranks; every reward, all ranks."""
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        round_ = plan_round(state, active, k, world)
        start = time.perf_counter()
        samples, rewards_per_func = self._rollout([state.rows[p] for p, _ in round_.share(rank)])
        return record_round(
            state,
            round_,
            rank,
            samples,
            rewards_per_func,
            weighted_sum(rewards_per_func, self.reward_weights),
            time.perf_counter() - start,
        )

    def _rollout(self, rows: list[dict[str, Any]]) -> tuple[list[Sample], torch.Tensor]:
        """One sample per row through GRPOTrainer's own rollout path; returns the samples and every rank's rewards.

        TRL prepares each row (its environment reset with it, its tools, its images) and calls `_generate`, which
        keeps the output and stops TRL there, before the forward passes only kept samples need. The samples are
        scored here, while this round's environments still hold the state environment-owned rewards read."""
        self._rollout_capture = []
        try:
            super()._generate_and_score_completions([dict(row) for row in rows])
            raise RuntimeError("GRPOTrainer generated without calling _generate; see trl_ada.integration.seams.")
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
        return take_extra_logs(self._pending_extra_logs, count, self._warned_extra_columns, logger.warning)

    def _check_pipelined_reward_models(self) -> None:
        check_reward_models_unsharded(self)

    def _open_stream(self, prompt_ids: list[list[int]]):
        return colocated_stream(self.vllm_generation, prompt_ids)  # the engine the pipelined rounds drive

    def _collect_selected(self, state: StepSampling, local: list[int]) -> list[Sample]:
        samples = collect_selected(state, local)  # this rank's kept samples; their log_extra values follow them
        for column in sorted({column for s in samples for column in s.extra_logs}):
            self._pending_extra_logs[column] = [s.extra_logs.get(column) for s in samples]
        return samples

    # --- Seam 2: generation: a round keeps TRL's output; for the training batch TRL gets the kept samples ---------

    def _generate(self, prompts):
        step = self._step_sampling
        if step is not None and step.local_samples is not None:  # TRL builds the training batch: the kept samples
            samples, step.local_samples = step.local_samples, None
            kept = join_rollout(samples, expected=len(prompts))
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

    # --- Seam 3: rewards and advantages -------------------------------------------------------------------------

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
                    self.args.positive_threshold, weighted_sum(rewards_per_func, self.reward_weights)
                )
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _log_metric(self, name: str, value: float):
        super()._log_metric(name, value)
        self._logged_metric_rows[name].append(self._reward_call_rows)  # the step's value weighs each call by it

    def _replace_advantages(self, output: dict[str, Any], results: list[PromptResult] | None) -> None:
        """Swap TRL's GRPO advantages for the configured estimator's (`results`: the chosen prompts' sampling)."""
        step = self._step_sampling
        if step is not None and step.advantages is not None:  # the sampler's own
            values = [step.advantages[p] for p in step.chosen]
            self._last_advantages = estimators.install(
                output, values, self.accelerator.process_index, self._logs["advantages"]
            )
            return
        if not self.args.replaces_grpo_advantages:
            self._last_advantages = None  # TRL's own group statistics, already in `output`
            return
        if not self._warned_non_binary:
            self._warned_non_binary = estimators.warn_if_not_binary(self.args, results or [])
        rewards = weighted_sum(self._last_rewards_per_func, self.reward_weights).tolist()
        values = estimators.step_advantages(self.args, rewards, self.num_generations, results)
        self._last_advantages = estimators.install(
            output, values, self.accelerator.process_index, self._logs["advantages"]
        )

    def _log_sampling_metrics(self, output: dict[str, Any], memory_metrics: dict[str, float]) -> None:
        advantages = self._last_advantages  # None: TRL's statistics, of which only this rank's slice is at hand
        advantages = self.accelerator.gather(output["advantages"]) if advantages is None else advantages
        epochs_drawn = self._prompts_drawn / len(self.train_dataset) if self._refill is not None else None
        metrics = step_metrics(
            self._step_sampling, advantages, self.num_generations, self.args.sampling_budget is not None, epochs_drawn
        )
        for name, value in {**metrics, **memory_metrics}.items():
            self._metrics["train"][name].append(value)

    # --- Logs, the prompt memory and the checkpoint (which carries the memory and the refill stream) --------------

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # The generated totals are cumulative: added to every training log as they stand, not averaged over the
        # logging window with TRL's per-step metrics (and present whichever sampling path made the step's samples).
        if self.generation_count is not None and self.model.training:
            logs.update(self.generation_count.metrics())  # in place, as TRL adds its own metrics
        super().log(logs, start_time)

    def _get_train_sampler(self, dataset=None):
        return EpochSeededSampler(super()._get_train_sampler(dataset))

    def _update_prompt_memory(self, step: StepSampling) -> dict[str, float]:
        keys = [self._prompt_key(step, prompt) for prompt in step.results] if self.prompt_memory is not None else []
        return prompt_keys.observe(
            step,
            keys,
            self.prompt_memory,
            self.group_prior,
            self.args.prompt_memory_group_column,
            self.args.positive_threshold,
            self.num_generations,
            self.state.global_step,
        )

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            step_folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            save_trainer_state(self, os.path.join(self._get_output_dir(trial=trial), step_folder))

    def _load_optimizer_and_scheduler(self, checkpoint):
        # TRL restores its own extra state (the adaptive entropy controller) here too: called once, on resume.
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            load_trainer_state(self, checkpoint, logger.warning)

    def train(self, *args, **kwargs):
        output = super().train(*args, **kwargs)
        if self.args.should_save:
            export_at_end(self)
        return output

    def export_prompt_memory(self, path: str) -> Dataset:
        """Write the prompt memory as a table (parquet; `trl_ada.integration.resume.export_memory` lists the
        columns), with each prompt's text (the last message of the training row with that hash: the training set is
        tokenized once for it). Sort by `pass_rate` to see solved, unsolved and frontier prompts."""
        texts = {}
        if isinstance(self.train_dataset, Dataset):
            texts = prompt_keys.memory_texts(self.train_dataset, self._tokenize, self._row_key)
        return export_memory(self.prompt_memory, texts, path)


class _RolloutTaken(Exception):
    """Raised by `_generate` inside a round, once the round's samples are kept: TRL's generation batch ends there."""


__all__ = ["AdaGRPOTrainer", "ReloadingVLLMGeneration"]
