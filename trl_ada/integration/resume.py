"""What adaptive sampling carries from step to step, saved in every checkpoint and restored on resume.

A resumed run must sample exactly as the uninterrupted one: the same refill prompts (the stream's cursor), the same
screening (the prompt memory and the group prior) and the same count of prompts drawn (`sampling/epochs_drawn`).
TRL checkpoints the model, optimizer, scheduler and RNG states; these files sit beside them in `checkpoint-<step>/`:

- `ada_sampling_state.json`: the prompts drawn so far, the refill stream's state, the group prior, and the
  sampling settings it was saved with (`sampling_settings`; a resume with other values warns, naming them);
- `prompt_memory.npz`: the prompt memory (`trl_ada.core.memory.PromptMemory.save`);
- `ada_sampler_state.json`: the sampler's own state, for a sampler that keeps one (`state_dict()` and
  `load_state_dict(state)`, JSON: e.g. `retire_solved`'s retired prompts, or a user's sampler's history);
- `ada_generation_count.json`: the completions and tokens generated so far (`trl_ada.integration.generation_count`), written with
  any sampling settings, sampling off included (a checkpoint without it resumes with the totals counted from 0).

The file names and their contents are a format: a checkpoint written by an earlier trl-ada resumes with a later one
(`tests/integration/test_memory_refill.py`). A checkpoint whose state the run's settings cannot restore (no memory
saved, no refill stream) is refused with the setting to use; a file that does not parse is an error naming it and
the checkpoint (`check_checkpoint` checks a whole checkpoint before a resume starts).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from datasets import Dataset

from trl_ada.core.memory import GroupPrior, PromptMemory
from trl_ada.integration.refill import PromptStream


SAMPLING_STATE_FILE = "ada_sampling_state.json"  # refill cursor and counters, in every checkpoint
MEMORY_STATE_FILE = "prompt_memory.npz"  # the prompt memory, in every checkpoint
MEMORY_EXPORT_FILE = "prompt_memory.parquet"  # the readable export, in output_dir at the end of training
GROUP_EXPORT_FILE = "prompt_groups.json"  # the group prior per group, in output_dir at the end of training
GENERATION_COUNT_FILE = "ada_generation_count.json"  # generated completions and tokens so far, in every checkpoint
SAMPLER_STATE_FILE = "ada_sampler_state.json"  # a sampler's own state (its `state_dict()`), in every checkpoint
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


def earlier_checkpoints(checkpoint: str) -> list[str]:
    """The `checkpoint-<step>` folders beside `checkpoint` with a smaller step, newest first."""
    checkpoint = os.path.normpath(checkpoint)
    match = re.search(r"checkpoint-(\d+)$", checkpoint)
    if match is None:
        return []
    step = int(match.group(1))
    steps = []
    for sibling in glob.glob(os.path.join(os.path.dirname(checkpoint), "checkpoint-*")):
        found = re.search(r"checkpoint-(\d+)$", sibling)
        if found and int(found.group(1)) < step and os.path.isdir(sibling):
            steps.append((int(found.group(1)), sibling))
    return [path for _, path in sorted(steps, reverse=True)]


def damaged(path: str, checkpoint: str, problem: str) -> ValueError:
    """The error for a checkpoint file that cannot be read: the file, the checkpoint and what to resume from."""
    earlier = earlier_checkpoints(checkpoint)
    instead = (
        f"resume from an earlier one instead (--resume_from_checkpoint {earlier[0]})"
        if earlier
        else "resume from an earlier checkpoint instead, or start a new run"
    )
    return ValueError(
        f"{path}: {problem}; checkpoint {checkpoint} is damaged (cut off while it was written, or copied "
        f"incompletely) and cannot resume: {instead}."
    )


def read_checkpoint_json(path: str, checkpoint: str, keys: tuple[str, ...] = ()) -> dict:
    """A JSON file of a checkpoint, read; an unreadable one is an error naming it and the checkpoint."""
    try:
        with open(path) as f:
            state = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise damaged(path, checkpoint, f"not valid JSON ({error})") from None
    if not isinstance(state, dict) or any(key not in state for key in keys):
        raise damaged(path, checkpoint, f"holds no {' and '.join(keys) or 'JSON object'}")
    return state


def check_checkpoint(checkpoint: str) -> None:
    """Fail before a resume starts on a checkpoint that cannot resume: a JSON file that does not parse (ours and
    TRL's trainer state) or a safetensors file cut short, each named with the checkpoint. The model otherwise loads
    first and fails with the file unnamed (safetensors' "incomplete metadata, file not fully covered")."""
    from safetensors import safe_open

    for name in (SAMPLING_STATE_FILE, GENERATION_COUNT_FILE, SAMPLER_STATE_FILE, "trainer_state.json"):
        path = os.path.join(checkpoint, name)
        if os.path.exists(path):
            read_checkpoint_json(path, checkpoint)
    for path in sorted(glob.glob(os.path.join(checkpoint, "**", "*.safetensors"), recursive=True)):
        try:
            with safe_open(path, "pt") as f:
                f.keys()
        except Exception as error:  # safetensors raises its own SafetensorError, and OSError on an unreadable file
            raise damaged(path, checkpoint, f"not a complete safetensors file ({error})") from None


def check_resume(resume_from_checkpoint, output_dir: str) -> None:
    """`Trainer.train(resume_from_checkpoint=...)`'s checkpoint (a path, or True: the output folder's latest) checked
    before any library reads it (`check_checkpoint`)."""
    from transformers.trainer_utils import get_last_checkpoint

    checkpoint = resume_from_checkpoint
    if checkpoint is True:
        checkpoint = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    if isinstance(checkpoint, str) and os.path.isdir(checkpoint):
        check_checkpoint(checkpoint)


def sampling_settings(args) -> dict:
    """The settings that decide what is sampled, as a checkpoint records them: AdaGRPOConfig's own fields (those
    GRPOConfig lacks) and num_generations, in JSON's types."""
    from trl import GRPOConfig

    if not dataclasses.is_dataclass(args):
        return {}
    grpo = {f.name for f in dataclasses.fields(GRPOConfig)}
    names = ["num_generations"] + [f.name for f in dataclasses.fields(args) if f.name not in grpo]
    settings = {n: getattr(args, n) for n in names if hasattr(args, n)}
    if "sampler" in settings:  # by name: an instance's text holds its address, which differs in every run
        settings["sampler"] = args.sampler_name
    return json.loads(json.dumps(settings, default=str))


def changed_settings(saved: dict, current: dict) -> dict:
    """{name: (saved, current)} for the settings a checkpoint recorded that differ now (a setting one side does not
    know, from another trl-ada version, is not a change)."""
    return {n: (saved[n], current[n]) for n in saved if n in current and saved[n] != current[n]}


def save_sampling_state(
    folder: str, prompts_drawn: int, refill=None, group_prior=None, memory=None, settings: dict | None = None
) -> None:
    """Write the sampling state into a checkpoint folder (`settings`: `sampling_settings(args)`, compared on
    resume)."""
    state = {"prompts_drawn": prompts_drawn}
    if settings:
        state["settings"] = settings
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
            f"{checkpoint} has no {SAMPLING_STATE_FILE}: it was saved without a sampler that draws prompts and "
            "without prompt memory, so the refill cursor and the prompt memory cannot be restored. Resume with the settings the "
            "checkpoint was saved with, or start a new run."
        )
    state = read_checkpoint_json(path, checkpoint, keys=("prompts_drawn",))
    if refill is not None:
        if "refill" not in state:
            raise ValueError(
                f"{checkpoint} was saved without a refill stream (with a sampler that draws no prompts; sampler='dapo', "
                "'budget', 'retire_solved' and a sampler of yours with draws_prompts draw them): resume with the "
                "settings it was saved with."
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


def non_text_keys(value) -> list:
    """The dict keys in `value`, at any depth, that are not strings."""
    if isinstance(value, dict):
        return [k for k in value if not isinstance(k, str)] + [k for v in value.values() for k in non_text_keys(v)]
    if isinstance(value, list | tuple):
        return [k for v in value for k in non_text_keys(v)]
    return []


def sampler_state_text(sampler) -> str | None:
    """`sampler.state_dict()` as the JSON text a checkpoint holds (None for a sampler without one). A state that JSON
    cannot hand back as it was is an error naming the sampler and the fix; AdaGRPOTrainer asks once when it is built,
    so that a sampler's initial state fails before training, not at the first checkpoint."""
    if not callable(getattr(sampler, "state_dict", None)):
        return None
    state = sampler.state_dict()
    name = f"{type(sampler).__module__}.{type(sampler).__qualname__}.state_dict()"
    fix = "return a dict of JSON values (lists for sets, int and float for numpy numbers, strings as keys)"
    if not isinstance(state, dict):
        raise TypeError(f"{name} returned a {type(state).__name__}, not a dict: {fix}.")
    keys = non_text_keys(state)
    if keys:  # JSON writes a key as text: load_state_dict would get "5" back for 5
        raise TypeError(f"{name} has the key {keys[0]!r}, which JSON hands back as text: {fix}.")
    try:
        return json.dumps(state)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} holds a value JSON cannot store ({error}): {fix}.") from None


def save_sampler_state(folder: str, sampler) -> None:
    """The sampler's own state (`sampler_state_text`), for a sampler that has one; made before the file is opened, so
    a state that cannot be written leaves no file that a resume would read as damaged."""
    text = sampler_state_text(sampler)
    if text is not None:
        with open(os.path.join(folder, SAMPLER_STATE_FILE), "w") as f:
            f.write(text)


def load_sampler_state(checkpoint: str, sampler, warn) -> None:
    """Hand the sampler its state from `checkpoint` (`sampler.load_state_dict(state)`); a sampler that keeps one,
    resumed from a checkpoint without it, starts afresh, said by `warn`."""
    if not callable(getattr(sampler, "load_state_dict", None)):
        return
    path = os.path.join(checkpoint, SAMPLER_STATE_FILE)
    if not os.path.exists(path):
        warn(f"{checkpoint} holds no {SAMPLER_STATE_FILE}: the sampler starts from its initial state.")
        return
    sampler.load_state_dict(read_checkpoint_json(path, checkpoint))


def save_generation_count(folder: str, count) -> None:
    """Write the generated totals (a `GenerationCount`) into a checkpoint folder."""
    with open(os.path.join(folder, GENERATION_COUNT_FILE), "w") as f:
        json.dump(count.state_dict(), f)


def load_generation_count(checkpoint: str, count) -> bool:
    """Restore the generated totals into `count`; False when the checkpoint predates them (the totals stay)."""
    path = os.path.join(checkpoint, GENERATION_COUNT_FILE)
    if not os.path.exists(path):
        return False
    count.load_state_dict(read_checkpoint_json(path, checkpoint))
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
    settings: dict = field(default_factory=dict)  # `sampling_settings(args)`: recorded, and compared on resume

    @classmethod
    def for_settings(cls, args, train_dataset, shuffle: bool, draws: bool | None = None) -> SamplingState:
        """`draws`: the sampler's `draws_prompts`; a sampler that does not say gets a refill stream wherever the
        training set can be drawn from."""
        memory = None
        if args.prompt_memory:
            memory = PromptMemory(
                args.prompt_memory_decay, args.prompt_memory_prior_alpha, args.prompt_memory_prior_beta
            )
        group_prior = GroupPrior() if args.prompt_memory_group_column is not None else None
        refills = draws is not False and isinstance(train_dataset, Dataset)
        refill = PromptStream(len(train_dataset), args.seed, shuffle=shuffle) if refills else None
        return cls(memory, group_prior, refill, settings=sampling_settings(args))

    def save(self, folder: str, generation_count, sampling_active: bool, sampler=None) -> None:
        """Write into the checkpoint folder TRL writes next: the generated totals always (a GRPO run's cost continues
        as well), the sampler's own state where it keeps one, the sampling state when sampling is on."""
        os.makedirs(folder, exist_ok=True)
        save_generation_count(folder, generation_count)
        save_sampler_state(folder, sampler)
        if sampling_active:
            save_sampling_state(
                folder, self.prompts_drawn, self.refill, self.group_prior, self.memory, settings=self.settings
            )

    def load(self, checkpoint: str, generation_count, warn, sampler=None) -> None:
        """Restore what `save` wrote, resuming from `checkpoint`; `warn` says which sampling settings differ from the
        ones the checkpoint recorded (the run goes on with the new ones)."""
        load_sampler_state(checkpoint, sampler, warn)
        path = os.path.join(checkpoint, SAMPLING_STATE_FILE)
        if os.path.exists(path):
            saved = read_checkpoint_json(path, checkpoint).get("settings", {})
            changed = changed_settings(saved, self.settings)
            if changed:
                warn(
                    f"{checkpoint} was saved with other sampling settings: "
                    + ", ".join(f"{n}={old!r} (now {new!r})" for n, (old, new) in changed.items())
                    + ". The resumed run samples with the new ones; resume with the saved values to continue the "
                    "run as it was."
                )
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
    "SAMPLER_STATE_FILE",
    "SAMPLING_STATE_FILE",
    "SamplingState",
    "changed_settings",
    "check_checkpoint",
    "check_resume",
    "earlier_checkpoints",
    "export_memory",
    "load_generation_buffer",
    "load_generation_count",
    "load_sampler_state",
    "load_sampling_state",
    "read_checkpoint_json",
    "save_generation_buffer",
    "save_generation_count",
    "save_sampler_state",
    "sampling_settings",
    "save_sampling_state",
]
