"""The parts of TRL that `AdaGRPOTrainer` overrides or reads, checked against the installed TRL.

`AdaGRPOTrainer` is a thin subclass: it overrides private `GRPOTrainer` methods and builds TRL's vLLM backend as a
subclass. Private methods change between TRL releases without notice, and a changed signature would otherwise
surface as a `TypeError` deep inside the first training step (after the model, the vLLM engine and the dataset have
been loaded). So:

- importing `trl_ada` with a TRL outside `SUPPORTED_TRL` warns, naming both versions;
- constructing `AdaGRPOTrainer` raises `RuntimeError` when a seam below is missing or its parameters changed,
  naming the seam, the installed TRL and the supported range, before any model is loaded.

`SUPPORTED_TRL` is setup.cfg's range for trl (tests/packaging/test_packaging.py checks that they agree).
"""

from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import dataclass

import trl
from packaging.specifiers import SpecifierSet
from packaging.version import Version


SUPPORTED_TRL = ">=1.16,<1.17"


@dataclass(frozen=True)
class Seam:
    owner: str  # dotted path of the class or module in TRL
    name: str  # method or attribute name
    parameters: tuple[str, ...] | None = None  # a method's leading parameters as AdaGRPOTrainer calls them
    kind: str = "method"  # "method", "attribute" (exists on the owner) or "instance" (assigned in the owner's code)


SEAMS: tuple[Seam, ...] = (
    # Overridden GRPOTrainer methods (super() is called with exactly these parameters).
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_generate_and_score_completions", ("self", "inputs")),
    # A round ends inside TRL's method when `_generate` has returned (trl_ada.integration.rollouts: its 8 per-row fields).
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_generate", ("self", "prompts")),
    Seam(
        "trl.trainer.grpo_trainer.GRPOTrainer",
        "_generate_single_turn",
        ("self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"),
    ),
    Seam(
        "trl.trainer.grpo_trainer.GRPOTrainer",
        "_calculate_rewards",
        ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    ),
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_tokenize_prompts", ("self", "prompts")),
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_get_train_sampler", ("self", "dataset")),
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_save_checkpoint", ("self", "model", "trial")),
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_load_optimizer_and_scheduler", ("self", "checkpoint")),
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_log_metric", ("self", "name", "value")),
    # GRPOTrainer state the rounds read or keep in step with.
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_last_loaded_step", kind="instance"),
    # a checkpoint inside a generation batch keeps its rest: GRPOTrainer's micro-step count and buffered batches
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_step", kind="instance"),
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_buffered_inputs", kind="instance"),
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "num_iterations", kind="instance"),
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "vllm_generation", kind="instance"),
    Seam("trl.trainer.grpo_trainer.GRPOTrainer", "reward_func_names", kind="instance"),  # names a sharded reward model
    # What the rounds merge into TRL's own logs, tokenize with, and count (eos ends a completion's model tokens).
    *(
        Seam("trl.trainer.grpo_trainer.GRPOTrainer", name, kind="instance")
        for name in ("_metrics", "_logs", "_tokenizer", "eos_token_ids", "rollout_func")
    ),
    # transformers' Trainer: refilled rows pass the dataloader's column filter; checkpoints go where it writes them.
    Seam("transformers.Trainer", "_get_collator_with_removed_columns", ("self", "data_collator", "description")),
    Seam("transformers.Trainer", "_get_output_dir", ("self", "trial")),
    # Environments: the memory key and the prompt tokenization follow TRL's per-row environment choice.
    *(
        Seam("trl.trainer.grpo_trainer.GRPOTrainer", name, kind="instance")
        for name in (
            "environment_factories",
            "_multi_environment",
            "_batch_environments",
            "_pending_extra_logs",
            "_pending_metrics",
        )
    ),
    # The vLLM backend: built through the grpo_trainer module's global (sized for the sampler), its push chosen after load.
    Seam("trl.trainer.grpo_trainer", "VLLMGeneration", kind="attribute"),
    Seam("trl.trainer.grpo_trainer", "gather", kind="attribute"),  # made rank-local while pipelined rounds score
    Seam("trl.generation.vllm_generation", "empty_cache", kind="attribute"),
    Seam("trl.generation.vllm_generation.VLLMGeneration", "sync_weights", ("self",)),
    Seam("trl.generation.vllm_generation.VLLMGeneration", "_iter_named_params", ("self",)),
    Seam("trl.generation.vllm_generation.VLLMGeneration", "_llm_weights_sleeping", kind="instance"),
    Seam("trl.generation.vllm_generation.VLLMGeneration", "enable_sleep_mode", kind="instance"),
    # What trl_ada.integration.vllm_stream reads to sample exactly as TRL's colocate branch does.
    Seam("trl.generation.vllm_generation", "extract_logprobs", kind="attribute"),
    *(
        Seam("trl.generation.vllm_generation.VLLMGeneration", name, kind="instance")
        for name in (
            "repetition_penalty",
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "max_completion_length",
            "logprobs",
            "generation_kwargs",
            "structured_outputs_regex",
            "llm",
        )
    ),
)


def _resolve(path: str):
    """Import `a.b.C` as module `a.b` attribute `C` (or module `a.b.c`)."""
    import importlib

    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, attribute = path.rpartition(".")
        return getattr(importlib.import_module(module), attribute)


@functools.cache
def _source(owner) -> str:
    """The owner's source text, read once a process: tokenizing GRPOTrainer's source for each instance seam took
    about 2 s of every AdaGRPOTrainer construction. (Signatures and attributes are read live each time.)"""
    return inspect.getsource(owner)


def _problem(seam: Seam) -> str | None:
    where = f"{seam.owner}.{seam.name}"
    try:
        owner = _resolve(seam.owner)
    except (ImportError, AttributeError):
        return f"{seam.owner} is missing (needed for {where})"
    if seam.kind == "instance":
        if f"self.{seam.name}" not in _source(owner):
            return f"{where} is no longer set by {seam.owner.rpartition('.')[2]}"
        return None
    if not hasattr(owner, seam.name):
        return f"{where} is missing"
    if seam.kind == "method":
        found = tuple(inspect.signature(getattr(owner, seam.name)).parameters)
        if found[: len(seam.parameters)] != seam.parameters:
            return f"{where} takes ({', '.join(found)}), AdaGRPOTrainer calls it with ({', '.join(seam.parameters)})"
    return None


def seam_problems() -> list[str]:
    """Every seam that is missing or changed in the installed TRL (empty on a supported TRL)."""
    return [problem for seam in SEAMS if (problem := _problem(seam)) is not None]


def trl_is_supported(version: str | None = None) -> bool:
    return Version(version or trl.__version__) in SpecifierSet(SUPPORTED_TRL)


def check_seams() -> None:
    """Raise a RuntimeError naming every missing or changed seam, the installed TRL and the supported range."""
    problems = seam_problems()
    if problems:
        raise RuntimeError(
            f"AdaGRPOTrainer cannot run on the installed trl {trl.__version__}: it overrides private GRPOTrainer "
            f"methods, and these changed:\n  - " + "\n  - ".join(problems) + f"\ntrl-ada supports trl{SUPPORTED_TRL}: "
            f'pip install "trl{SUPPORTED_TRL}".'
        )


def warn_if_unsupported_trl() -> None:
    if not trl_is_supported():
        warnings.warn(
            f"trl-ada is tested with trl{SUPPORTED_TRL}; the installed trl is {trl.__version__}. AdaGRPOTrainer "
            f"overrides private GRPOTrainer methods and checks them when it is constructed; if it runs, results are "
            f'untested. Install "trl{SUPPORTED_TRL}" for the tested set.',
            UserWarning,
            stacklevel=3,
        )


def require_trl_internals() -> None:
    """Import the TRL internals trl-ada uses beside the seams (the pipelined rounds, the vLLM backend): a TRL that
    moved one fails here with the supported range, not with a bare ImportError deep inside a step."""
    try:
        from trl.chat_template_utils import parse_response  # noqa: F401
        from trl.data_utils import is_conversational  # noqa: F401
        from trl.generation.vllm_generation import VLLMGeneration  # noqa: F401
        from trl.trainer import grpo_trainer  # noqa: F401
        from trl.trainer.utils import get_config_model_id  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"trl-ada needs trl{SUPPORTED_TRL} (installed: trl {trl.__version__}): {error}. "
            f'pip install "trl{SUPPORTED_TRL}".'
        ) from error


__all__ = [
    "SEAMS",
    "SUPPORTED_TRL",
    "Seam",
    "check_seams",
    "require_trl_internals",
    "seam_problems",
    "trl_is_supported",
    "warn_if_unsupported_trl",
]
