"""What AdaGRPOTrainer's sampling takes of GRPOTrainer's arguments: checked before any model loads.

Adaptive rounds run GRPOTrainer's own rollout path, so tools, `environment_factory` (one or several environments,
environment-owned rewards and data), `rollout_func`, image prompts and every generation backend work with sampling on.
What is still refused, and why (the same reasons are in docs/agents.md and the README's compatibility table):

- `pipelined_rounds` with tools, environments, `rollout_func` or images: the pipelined driver feeds vLLM one token
  prompt per sample and scores it the moment it finishes; a tool loop is several engine requests per sample, run by
  TRL's `_generate` for a whole batch, and an image prompt needs the processor's inputs. The synchronous rounds run
  all of them.
- `prompt_memory` with environment-owned data (no `train_dataset`), whether set or turned on by the config for a
  sampler that reads it (`sampler="est"`, `"knapsack"`): every row is the same empty placeholder and the task comes
  from `reset()`, so there is no prompt to remember. A sampler that draws prompts does run there: it draws more
  placeholder rows from the data set GRPOTrainer builds, each a fresh `reset()`.
- a sampler that draws prompts (`draws_prompts`: `sampler="dapo"`, `"budget"`, `"retire_solved"`) with an
  `IterableDataset`: refills draw prompts by index from the whole training set (a seeded permutation that a resumed
  run continues exactly); a stream has no index.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import warnings

import torch
from accelerate.utils import str_to_bool
from datasets import Dataset


ROLLOUT_KINDS = ("tools", "rollout_func", "environment_factory")
WEIGHTED_SUM = "weighted_sum"  # positive_reward_func's name for the sum of every reward function
# What GRPOTrainer's `_calculate_rewards` passes every reward function besides the rows' columns (`environments` only
# with an environment_factory, where this check does not run).
TRL_REWARD_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
# Columns `_calculate_rewards` leaves out of the keyword arguments: the prompt arrives as `prompts`.
UNPASSED_COLUMNS = ("prompt", "completion", "completion_ids")
# What `remove_unused_columns=True` keeps of a row (GRPOTrainer's `_set_signature_columns_if_needed`).
SIGNATURE_COLUMNS = ("prompt", "image", "images")


def check_trainer_arguments(args, arguments: dict, draws: bool | None = None) -> None:
    """Raise a ValueError naming the argument and the fix for a combination sampling cannot run, a training set
    without the prompt column GRPOTrainer reads, or rewards that cannot decide a positive (an environment's reward is
    named inside TRL's constructor: checked after it). `draws`: the sampler's `draws_prompts` (None: not said)."""
    dataset = arguments.get("train_dataset")
    environments = arguments.get("environment_factory")
    check_prompt_column(dataset, environments)
    check_sampling_arguments(args, arguments, draws)
    if not environments and not arguments.get("rollout_func"):  # both add keyword arguments of their own
        check_reward_columns(arguments.get("reward_funcs"), dataset, getattr(args, "remove_unused_columns", False))
    if not environments:
        positive_reward_index(args, reward_names(arguments.get("reward_funcs")))


def check_sampling_arguments(args, arguments: dict, draws: bool | None = None) -> None:
    """The combinations sampling cannot run (the module's docstring says why), each named with its fix."""
    dataset = arguments.get("train_dataset")
    environments = arguments.get("environment_factory")
    if not args.sampling_active:
        return
    if dataset is None and not environments:
        # TRL's own check, raised before the model loads.
        raise ValueError(
            "`train_dataset` is required: AdaGRPOTrainer samples its prompts from it (pass "
            "train_dataset=datasets.Dataset.from_list([{'prompt': ..., 'answer': ...}, ...])), unless an "
            "environment_factory owns the data."
        )
    if args.pipelined_rounds:
        kinds = [name for name in ROLLOUT_KINDS if arguments.get(name)]
        if isinstance(dataset, Dataset) and {"image", "images"} & set(dataset.column_names):
            kinds.append("image prompts")
        if kinds:
            raise ValueError(
                f"pipelined_rounds=True cannot run {' and '.join(kinds)}: it drives vLLM one text prompt per sample, "
                "while a tool loop, an environment or a rollout_func makes several engine requests per sample inside "
                "TRL's batch generation, and an image prompt needs the processor's inputs. Set "
                "pipelined_rounds=False: the synchronous rounds run them."
            )
    if dataset is None:
        if args.prompt_memory:  # asked for, or turned on by the config for a sampler that reads it (est, knapsack)
            raise ValueError(
                f"prompt_memory needs a train_dataset (sampler={args.sampler_name!r} uses it): with environment-owned data "
                "every row is the same placeholder and the task comes from reset(), so there is no prompt to "
                "remember. Pass a train_dataset with a column per task (reset() receives the row), or choose a "
                "sampler without prompt memory and set prompt_memory=False."
            )
        return
    if draws is True and not isinstance(dataset, Dataset):
        raise ValueError(
            f"sampler={args.sampler_name!r} draws replacement prompts by index (its draws_prompts), so train_dataset must "
            f"be a map-style datasets.Dataset (got {type(dataset).__name__}). Convert an IterableDataset with "
            "Dataset.from_generator, or use a sampler that draws nothing (sampler='grpo', 'est' or 'knapsack')."
        )
    group_column = args.prompt_memory_group_column
    if group_column is not None and group_column not in dataset.column_names:
        raise ValueError(
            f"prompt_memory_group_column={group_column!r} is not a column of train_dataset (its columns: "
            f"{dataset.column_names}). Add the column or set the name of an existing one."
        )


def check_prompt_column(dataset, environment_factory=None) -> None:
    """GRPOTrainer reads every row's `prompt`; without the column it fails with a KeyError once the model has loaded
    and generation starts. Said here, before the model loads, with the columns there are. With an
    `environment_factory` the column is optional, as in GRPOTrainer: each rollout's `reset()` supplies the prompt (a
    routing dataset may hold only an `environment` column)."""
    if environment_factory is None and isinstance(dataset, Dataset) and "prompt" not in dataset.column_names:
        raise ValueError(
            f"train_dataset has no 'prompt' column (its columns: {dataset.column_names}). GRPOTrainer and "
            "AdaGRPOTrainer train on a 'prompt' column: text, or a list of chat messages such as [{'role': 'user', "
            "'content': ...}]. Rename your column (dataset.rename_column('question', 'prompt')) or build one with "
            "dataset.map; the recipe loader's dataset_prompt_template does it from a problem column. (Only with an "
            "environment_factory may the prompt come from each environment's reset() instead.)"
        )


def check_reward_columns(reward_funcs, dataset, remove_unused_columns: bool = False) -> None:
    """A reward function's parameter without a default is a keyword GRPOTrainer must pass: one of its own
    (`TRL_REWARD_ARGUMENTS`) or a column of the training rows. One the rows lack fails as a bare TypeError only once
    the model has loaded and the first batch is generated; said here with the data set's columns. Only plain callables
    on a map-style Dataset: a reward model takes tokens, and a stream's columns may not be known."""
    if not isinstance(dataset, Dataset):
        return
    columns = list(dataset.column_names)
    passed = set(columns) & set(SIGNATURE_COLUMNS) if remove_unused_columns else set(columns)
    passed = (passed - set(UNPASSED_COLUMNS)) | set(TRL_REWARD_ARGUMENTS)
    funcs = [] if reward_funcs is None else reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
    for func, name in zip(funcs, reward_names(funcs)):
        if isinstance(func, (str, torch.nn.Module)) or not callable(func):
            continue
        try:
            parameters = inspect.signature(func).parameters.values()
        except (TypeError, ValueError):  # a builtin without a readable signature: TRL's call will tell
            continue
        required = [
            p.name
            for p in parameters
            if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in passed
        ]
        if required:
            raise ValueError(missing_reward_column_message(name, required, columns, remove_unused_columns))


def missing_reward_column_message(name: str, missing: list[str], columns: list[str], removed: bool) -> str:
    first = missing[0]
    needs = f"reward function {name!r} requires the argument{'s' if len(missing) > 1 else ''} " + ", ".join(
        repr(m) for m in missing
    )
    if first in UNPASSED_COLUMNS:
        plural = {"prompt": "prompts", "completion": "completions", "completion_ids": "completion_ids"}[first]
        return (
            f"{needs}, but GRPOTrainer passes the {first!r} column under the name {plural!r} (one per completion), "
            f"never as {first!r}. Rename the parameter to {plural}, or give it a default ({first}=None)."
        )
    if removed and first in columns:
        return (
            f"{needs}: train_dataset has the column, but remove_unused_columns=True drops every column except "
            f"{list(SIGNATURE_COLUMNS)} before the reward functions see the rows. Set remove_unused_columns=False "
            "(GRPOConfig's default)."
        )
    return (
        f"{needs}, which GRPOTrainer passes from the train_dataset column of that name; train_dataset has no such "
        f"column (its columns: {columns}; besides them a reward function gets {list(TRL_REWARD_ARGUMENTS)}). Add the "
        f"column to train_dataset (dataset.add_column or dataset.map), or give the parameter a default ({first}=None) "
        "or take **kwargs and read what is there."
    )


def checked_reward(func, name: str):
    """`func` as GRPOTrainer calls it, with its output checked: one number (or None: unscorable) per completion.
    A string or a list where a number belongs would otherwise fail inside TRL as `too many dimensions 'str'`,
    naming neither the function nor the value. A reward model (an `nn.Module`) is returned as it is: TRL scores
    it itself."""
    if isinstance(func, torch.nn.Module):
        return func

    def check(rewards, completions):
        if rewards is None or isinstance(rewards, (str, bytes)) or not hasattr(rewards, "__len__"):
            raise TypeError(
                f"reward function {name!r} returned {type(rewards).__name__} {rewards!r:.80}; a reward "
                "function returns a list with one float (or None) per completion."
            )
        for index, value in enumerate(rewards):
            if (
                value is not None
                and not isinstance(value, numbers.Real)
                and not (isinstance(value, torch.Tensor) and value.numel() == 1)
            ):
                raise TypeError(
                    f"reward function {name!r} returned {type(value).__name__} {value!r:.80} for completion {index} "
                    f"(of {len(completions)}); a reward is a float, or None where the completion cannot be scored. "
                    "Convert it, e.g. float(...)."
                )
        return rewards

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def checked_async(*args, **kwargs):
            return check(await func(*args, **kwargs), kwargs.get("completions", args[1] if len(args) > 1 else []))

        return checked_async

    @functools.wraps(func)
    def checked(*args, **kwargs):
        return check(func(*args, **kwargs), kwargs.get("completions", args[1] if len(args) > 1 else []))

    return checked


def reward_names(reward_funcs) -> list[str]:
    """The names GRPOTrainer will give `reward_funcs` (`reward_func_names`), known before any model loads: a
    function's name, a reward model's id. An environment's `get_reward` joins them later, inside TRL's constructor."""
    from trl.trainer.utils import get_callable_name, get_config_model_id

    funcs = [] if reward_funcs is None else reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
    return [
        f.rstrip("/").split("/")[-1]
        if isinstance(f, str)
        else get_config_model_id(f.config).split("/")[-1]
        if isinstance(f, torch.nn.Module)
        else get_callable_name(f)
        for f in funcs
    ]


def positive_reward_index(args, names: list[str], sources: int | None = None) -> int | None:
    """Which reward function decides a positive (`positive_reward_func`), as an index into `names`; None: the
    weighted sum. Refuses a name that is not among them, and, wherever positives are read, a sum of several rewards
    left to decide alone: format rewards would count a well-formatted wrong answer as solved. `sources`: the rewards
    a sample's sum adds up (default: every name; the environments' count as one, each scoring only its own rows)."""
    name = args.positive_reward_func
    if name == WEIGHTED_SUM:  # the user's explicit choice: the sum decides, whatever it adds up
        return None
    if name is not None:
        if name not in names:
            raise ValueError(
                f"positive_reward_func={name!r} is not one of the reward functions: {names}. Set it to the name of "
                "the one that says an answer is correct (a function's __name__, a reward model's name)."
            )
        return names.index(name)
    if (len(names) if sources is None else sources) > 1 and args.reads_positives:
        raise ValueError(
            f"{len(names)} reward functions {names} are summed into one reward, and sampler={args.sampler_name!r} "
            f"decides which samples are solved by that sum > positive_threshold={args.positive_threshold}: a "
            "wrong answer can pass on the other rewards (format, tags) alone. Set positive_reward_func to the one "
            f"that says an answer is correct, e.g. positive_reward_func={names[0]!r} (the advantages keep using "
            f"the weighted sum); positive_reward_func={WEIGHTED_SUM!r} if a sum above the threshold does mean solved; "
            "or sampler='grpo', which reads no positives."
        )
    return None


def warn_if_threshold_outside(args, rewards: torch.Tensor, warned: set[str]) -> None:
    """Warn when `positive_threshold` lies outside the range of the rewards seen, once rewards differ (a first
    batch that is all wrong says nothing yet), where the threshold decides what counts as positive: the exit rules,
    the selection and the memory. Checked once per trainer (`warned` holds the warnings given)."""
    if "positive_threshold" in warned or not args.reads_positives:
        return
    scorable = rewards[~torch.isnan(rewards)]
    if scorable.numel() == 0 or scorable.max() == scorable.min():
        return
    warned.add("positive_threshold")
    threshold = args.positive_threshold
    low, high = scorable.min().item(), scorable.max().item()
    if threshold >= high or threshold < low:
        warnings.warn(
            f"positive_threshold={threshold} lies outside the rewards seen so far ({low:g} to {high:g}): "
            + (
                "no completion counts as positive (reward > positive_threshold), so no prompt can meet the exit rule "
                "and no group has a positive. "
                if threshold >= high
                else "every completion counts as positive. "
            )
            + "Set positive_threshold between your reward's values (0.5 for 0/1 rewards).",
            stacklevel=3,
        )


# What `accelerate launch` put in the environment, read when this module is imported: before any trainer is built,
# since TRL's colocated vLLM sets MASTER_ADDR for its own one-process group while the trainer is built.
LAUNCH_ENVIRONMENT = {name: os.environ.get(name) for name in ("ACCELERATE_USE_CPU", "MASTER_ADDR")}


def lone_cpu_launch(environment: dict, world_size: int) -> bool:
    """Whether `accelerate launch --cpu` was asked for more processes than run. Its CPU path is the simple launcher:
    one process, given MASTER_ADDR only when `--num_processes` (or `--num_machines`) is above 1. accelerate passes
    no requested count on, so that trace is all there is to read."""
    try:
        cpu = bool(str_to_bool(environment.get("ACCELERATE_USE_CPU") or "false"))
    except ValueError:
        return False
    return cpu and world_size == 1 and bool(environment.get("MASTER_ADDR"))


def warn_if_fewer_processes(world_size: int) -> None:
    """`accelerate launch --cpu --num_processes 2` runs one process, silently (accelerate has no CPU launcher for it)."""
    if lone_cpu_launch(LAUNCH_ENVIRONMENT, world_size):
        warnings.warn(
            "accelerate launch --cpu was asked for more than one process (it set MASTER_ADDR, which it does only "
            "then), but training runs on 1 process: on a CPU, `--cpu --num_processes N` starts one. These start N: "
            "accelerate launch --config_file recipes/accelerate_configs/fsdp_cpu.yaml ... (data-parallel on CPU), "
            "or torchrun --nproc_per_node N -m trl_ada.cli.train ...",
            stacklevel=3,
        )


__all__ = [
    "positive_reward_index",
    "reward_names",
    "check_prompt_column",
    "check_reward_columns",
    "check_trainer_arguments",
    "checked_reward",
    "warn_if_fewer_processes",
    "warn_if_threshold_outside",
]


def environment_names(rows: list[dict], factories: dict, multi_environment: bool) -> list:
    """The environment each row is rendered with, checked as TRL checks it, before its tokenizer looks one up."""
    names = [row.get("environment") if multi_environment else None for row in rows]
    unknown = sorted({str(name) for name in names if name not in factories})
    if unknown:
        raise ValueError(
            f"Example has `environment={unknown[0]!r}`, which is not among the environments passed to "
            f"`environment_factory`. Expected one of: {list(factories)}."
        )
    return names
