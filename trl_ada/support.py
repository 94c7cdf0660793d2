"""What AdaGRPOTrainer's sampling takes of GRPOTrainer's arguments: checked before any model loads.

Adaptive rounds run GRPOTrainer's own rollout path, so tools, `environment_factory` (one or several environments,
environment-owned rewards and data), `rollout_func`, image prompts and every generation backend work with sampling on.
What is still refused, and why (the same reasons are in docs/agents.md and the README's compatibility table):

- `pipelined_rounds` with tools, environments, `rollout_func` or images: the pipelined driver feeds vLLM one token
  prompt per sample and scores it the moment it finishes; a tool loop is several engine requests per sample, run by
  TRL's `_generate` for a whole batch, and an image prompt needs the processor's inputs. The synchronous rounds run
  all of them.
- `prompt_memory` and `sampling_budget` with environment-owned data (no `train_dataset`): every row is the same empty
  placeholder and the task comes from `reset()`, so there is no prompt to remember.
- `dynamic_sampling` and `sampling_budget` with an `IterableDataset`: refills draw prompts by index from the whole
  training set (a seeded permutation that a resumed run continues exactly); a stream has no index.
"""

from __future__ import annotations

from datasets import Dataset

ROLLOUT_KINDS = ("tools", "rollout_func", "environment_factory")


def check_trainer_arguments(args, arguments: dict) -> None:
    """Raise a ValueError naming the argument and the fix for a combination sampling cannot run."""
    if not args.sampling_active:
        return
    dataset = arguments.get("train_dataset")
    environments = arguments.get("environment_factory")
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
        for name, on in (("prompt_memory", args.prompt_memory), ("sampling_budget", args.sampling_budget is not None)):
            if on:
                raise ValueError(
                    f"{name} needs a train_dataset: with environment-owned data every row is the same placeholder and "
                    "the task comes from reset(), so there is no prompt to remember. Pass a train_dataset with a "
                    f"column per task (reset() receives the row), or turn {name} off."
                )
        return
    refills = args.dynamic_sampling or args.sampling_budget is not None
    if refills and not isinstance(dataset, Dataset):
        name = "dynamic_sampling=True" if args.dynamic_sampling else f"sampling_budget={args.sampling_budget}"
        raise ValueError(
            f"{name} draws replacement prompts by index, so train_dataset must be a map-style datasets.Dataset (got "
            f"{type(dataset).__name__}). Convert an IterableDataset with Dataset.from_generator, or turn it off."
        )
    group_column = args.prompt_memory_group_column
    if group_column is not None and group_column not in dataset.column_names:
        raise ValueError(
            f"prompt_memory_group_column={group_column!r} is not a column of train_dataset (its columns: "
            f"{dataset.column_names}). Add the column or set the name of an existing one."
        )


__all__ = ["check_trainer_arguments"]
