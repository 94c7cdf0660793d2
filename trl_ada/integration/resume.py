"""What adaptive sampling carries from step to step, saved in every checkpoint and restored on resume.

A resumed run must sample exactly as the uninterrupted one: the same refill prompts (the stream's cursor), the same
screening (the prompt memory and the group prior) and the same count of prompts drawn (`sampling/epochs_drawn`).
TRL checkpoints the model, optimizer, scheduler and RNG states; these files sit beside them in `checkpoint-<step>/`:

- `ada_sampling_state.json`: the prompts drawn so far, the refill stream's state, the group prior;
- `prompt_memory.npz`: the prompt memory (`trl_ada.core.memory.PromptMemory.save`);
- `ada_generation_count.json`: the completions and tokens generated so far (`trl_ada.integration.generation_count`), written with
  any sampling settings, sampling off included (a checkpoint without it resumes with the totals counted from 0).

The file names and their contents are a format: a checkpoint written by an earlier trl-ada resumes with a later one
(`tests/integration/test_memory_refill.py`). A checkpoint saved with other sampling settings is refused with the setting to use.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset

from trl_ada.core.memory import GroupPrior, PromptMemory
from trl_ada.integration.refill import PromptStream
from trl_ada.samplers import BUILT_IN


SAMPLING_STATE_FILE = "ada_sampling_state.json"  # refill cursor and counters, in every checkpoint
MEMORY_STATE_FILE = "prompt_memory.npz"  # the prompt memory, in every checkpoint
MEMORY_EXPORT_FILE = "prompt_memory.parquet"  # the readable export, in output_dir at the end of training
GROUP_EXPORT_FILE = "prompt_groups.json"  # the group prior per group, in output_dir at the end of training
GENERATION_COUNT_FILE = "ada_generation_count.json"  # generated completions and tokens so far, in every checkpoint
BUFFER_FILE = "ada_generation_buffer_{rank}.pt"  # a rank's rest of a generation batch, in a checkpoint inside one


def save_generation_buffer(folder: str, rank: int, step: int, buffered, args) -> None:
    """In a checkpoint taken inside a generation batch (GRPOTrainer trains each over steps_per_generation x
    num_iterations micro-steps), this rank's micro-step count and rest of the batch: a resume then trains on it as
    the uninterrupted run does, instead of generating the batch again (and counting and remembering it twice)."""
    if step % (args.steps_per_generation * args.num_iterations) and buffered is not None:
        os.makedirs(folder, exist_ok=True)
        torch.save({"step": step, "buffered_inputs": buffered}, os.path.join(folder, BUFFER_FILE.format(rank=rank)))


def load_generation_buffer(checkpoint: str, rank: int, device) -> tuple[int, list] | None:
    """What `save_generation_buffer` wrote for this rank: (micro-step, buffered batches), or None (a checkpoint at
    a generation batch's boundary)."""
    path = os.path.join(checkpoint, BUFFER_FILE.format(rank=rank))
    if not os.path.exists(path):
        return None
    state = torch.load(path, map_location=device, weights_only=False)  # our own file: tensors, lists, images
    return state["step"], state["buffered_inputs"]


def save_sampling_state(folder: str, prompts_drawn: int, refill=None, group_prior=None, memory=None) -> None:
    """Write the sampling state into a checkpoint folder."""
    state = {"prompts_drawn": prompts_drawn}
    if refill is not None:
        state["refill"] = refill.state_dict()
    if group_prior is not None:
        state["group_prior"] = group_prior.state_dict()
    with open(os.path.join(folder, SAMPLING_STATE_FILE), "w") as f:
        json.dump(state, f)
    if memory is not None:
        memory.save(os.path.join(folder, MEMORY_STATE_FILE))


def load_sampling_state(checkpoint: str, refill=None, group_prior=None, memory=None) -> int:
    """Restore what `save_sampling_state` wrote into the given objects; return the prompts drawn so far."""
    path = os.path.join(checkpoint, SAMPLING_STATE_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{checkpoint} has no {SAMPLING_STATE_FILE}: it was saved without dynamic sampling or prompt memory, "
            "so the refill cursor and the prompt memory cannot be restored. Resume with the settings the "
            "checkpoint was saved with, or start a new run."
        )
    with open(path) as f:
        state = json.load(f)
    if refill is not None:
        if "refill" not in state:
            raise ValueError(
                f"{checkpoint} was saved without a refill stream (dynamic_sampling, sampling_budget or a sampler of "
                "yours that draws prompts): resume with the settings it was saved with."
            )
        refill.load_state_dict(state["refill"])
    if group_prior is not None:
        if "group_prior" not in state:
            raise ValueError(
                f"{checkpoint} was saved without prompt_memory_group_column: resume with the same setting."
            )
        group_prior.load_state_dict(state["group_prior"])
    if memory is not None:
        memory_path = os.path.join(checkpoint, MEMORY_STATE_FILE)
        if not os.path.exists(memory_path):
            raise FileNotFoundError(
                f"{checkpoint} has no {MEMORY_STATE_FILE}: it was saved with prompt_memory=False. Resume with "
                "the same setting, or start a new run."
            )
        memory.load(memory_path)
    return state["prompts_drawn"]


def save_generation_count(folder: str, count) -> None:
    """Write the generated totals (a `GenerationCount`) into a checkpoint folder."""
    with open(os.path.join(folder, GENERATION_COUNT_FILE), "w") as f:
        json.dump(count.state_dict(), f)


def load_generation_count(checkpoint: str, count) -> bool:
    """Restore the generated totals into `count`; False when the checkpoint predates them (the totals stay)."""
    path = os.path.join(checkpoint, GENERATION_COUNT_FILE)
    if not os.path.exists(path):
        return False
    with open(path) as f:
        count.load_state_dict(json.load(f))
    return True


def export_memory(memory, texts: dict[str, str], path: str):
    """Write the prompt memory as a table (parquet): one row per remembered prompt, its text where `texts` (prompt
    hash -> text) knows it. Columns: `prompt_hash`, `prompt`, `visits`, `samples` and `positives` (decayed counts),
    `pass_rate` (posterior mean) and `last_step`. Returns the `datasets.Dataset`."""
    from datasets import Dataset

    table = memory.table()
    table = {"prompt_hash": table.pop("prompt_hash"), **table}
    table["prompt"] = [texts.get(h) for h in table["prompt_hash"]]
    dataset = Dataset.from_dict(table)
    dataset.to_parquet(path)
    return dataset


@dataclass
class SamplingState:
    """What sampling carries from step to step and in every checkpoint: the prompt memory, the group prior and the
    refill stream (None where the settings use none), and the prompts drawn so far (`sampling/epochs_drawn`)."""

    memory: PromptMemory | None
    group_prior: GroupPrior | None
    refill: PromptStream | None
    prompts_drawn: int = 0

    @classmethod
    def for_settings(cls, args, train_dataset, shuffle: bool) -> SamplingState:
        memory = None
        if args.prompt_memory:
            memory = PromptMemory(
                args.prompt_memory_decay, args.prompt_memory_prior_alpha, args.prompt_memory_prior_beta
            )
        group_prior = GroupPrior() if args.prompt_memory_group_column is not None else None
        # A sampler of the user's may draw refills too (SamplingContext.draw), from a map-style dataset
        refills = (
            args.dynamic_sampling
            or args.sampling_budget is not None
            or (args.sampler not in BUILT_IN and isinstance(train_dataset, Dataset))
        )
        refill = PromptStream(len(train_dataset), args.seed, shuffle=shuffle) if refills else None
        return cls(memory, group_prior, refill)

    def save(self, folder: str, generation_count, sampling_active: bool) -> None:
        """Write into the checkpoint folder TRL writes next: the generated totals always (a GRPO run's cost continues
        as well), the sampling state when sampling is on."""
        os.makedirs(folder, exist_ok=True)
        save_generation_count(folder, generation_count)
        if sampling_active:
            save_sampling_state(folder, self.prompts_drawn, self.refill, self.group_prior, self.memory)

    def load(self, checkpoint: str, generation_count, warn) -> None:
        """Restore what `save` wrote, resuming from `checkpoint`."""
        if not load_generation_count(checkpoint, generation_count):
            warn(
                f"{checkpoint} holds no generated totals (written by an earlier trl-ada): "
                "sampling/generated_*_total count from 0 in this run."
            )
        if self.refill is not None or self.memory is not None or self.group_prior is not None:
            self.prompts_drawn = load_sampling_state(checkpoint, self.refill, self.group_prior, self.memory)

    def export(self, output_dir: str, export_prompt_memory: Callable[[str], Any]) -> None:
        """At the end of training, the readable tables of the prompt memory (`export_prompt_memory(path)`, the
        trainer's method) and the group prior, in output_dir."""
        if self.memory is not None:
            export_prompt_memory(os.path.join(output_dir, MEMORY_EXPORT_FILE))
        if self.group_prior is not None:
            with open(os.path.join(output_dir, GROUP_EXPORT_FILE), "w") as f:
                json.dump(self.group_prior.table(), f, indent=1)


__all__ = [
    "BUFFER_FILE",
    "GENERATION_COUNT_FILE",
    "GROUP_EXPORT_FILE",
    "MEMORY_EXPORT_FILE",
    "MEMORY_STATE_FILE",
    "SAMPLING_STATE_FILE",
    "SamplingState",
    "export_memory",
    "load_generation_buffer",
    "load_generation_count",
    "load_sampling_state",
    "save_generation_buffer",
    "save_generation_count",
    "save_sampling_state",
]
