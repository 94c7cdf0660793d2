"""Training entry point, TRL style: one YAML recipe, overridable from the command line: parse, load, train, save.

    accelerate launch --config_file recipes/accelerate_configs/zero2.yaml -m trl_ada.cli.train \\
        --config recipes/Qwen2.5-Math-1.5B/ada_balance.yaml [--max_steps 10 ...]

The YAML keys are the fields of `ScriptArguments` below, `AdaGRPOConfig` and TRL's `ModelConfig` (peft LoRA with
`use_peft: true`). `dataset_name` and `model_name_or_path` are a Hub id or a local file or folder, or the name of an
offline task or model (`trl_ada.examples.offline`: `--model_name_or_path tiny --dataset_name synthetic` smoke-tests
any recipe on a CPU without a hub).

Agents: `--tools pkg.module:f1 pkg.module:f2` (several after one flag; `pkg.module.f1` works too) hands tools to the
trainer and `--environment_factory pkg.module:Class` an environment, as TRL's GRPOTrainer takes them.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
import warnings
from dataclasses import dataclass, field

from transformers.trainer_utils import get_last_checkpoint
from trl import ModelConfig, TrlParser, get_peft_config

from trl_ada.config import AdaGRPOConfig
from trl_ada.data import PROMPT_TEMPLATES, load_raw_dataset, to_trl_dataset
from trl_ada.examples import RESOURCES
from trl_ada.examples.models import missing_model_message
from trl_ada.examples.offline import TASKS, offline_model, offline_task
from trl_ada.integration.resume import check_checkpoint
from trl_ada.integration.support import check_reward_columns
from trl_ada.rewards import boxed_math_reward, check_gold_answers, last_number_reward
from trl_ada.samplers import import_path
from trl_ada.trainer import AdaGRPOTrainer


@dataclass
class ScriptArguments:
    dataset_name: str = field(
        default="synthetic",
        metadata={
            "help": "Hub id (e.g. RLHFlow/reinforce_ada_hard_prompt), local json/jsonl/parquet file, or an offline "
            "task of trl_ada.examples.offline: 'synthetic' (arithmetic), 'word_problems', 'arithmetic' (chat "
            "arithmetic, the real-model task), 'hard_arithmetic' (its screened hard set) or 'products' (tool use)."
        },
    )
    dataset_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_prompt_template: str | None = field(
        default=None,
        metadata={
            "help": "How the rows of a Hub id or local file become prompts. Unset (the default): as "
            "GRPOTrainer takes them, the data set's own `prompt` column (text or conversational), every "
            "column unchanged. 'math': the reference's prompt (a system message asking for \\boxed{}, the "
            "problem with a step-by-step suffix) built from dataset_problem_column, the gold answer column "
            "renamed to `answer` (boxed_math_reward reads it): the math recipes set it. 'user': "
            "dataset_problem_column as a single user message, every column unchanged."
        },
    )
    dataset_problem_column: str = field(
        default="problem", metadata={"help": "With dataset_prompt_template: the column with the problem text."}
    )
    dataset_answer_column: str | None = field(
        default=None,
        metadata={
            "help": "With dataset_prompt_template=math: the column with the gold answer "
            "(default: the first of gt, answer, solution)."
        },
    )
    dataset_num_examples: int | None = field(
        default=None,
        metadata={
            "help": "Train on the first N examples only (a Hub id, a local file or hard_arithmetic; the other built-in "
            "tasks take synthetic_num_examples)."
        },
    )
    synthetic_difficulty: int = field(
        default=1,
        metadata={
            "help": "Digits per operand of the synthetic task (word_problems: 1 = small numbers, each level up x10)."
        },
    )
    synthetic_num_examples: int = field(
        default=2048, metadata={"help": "Size of the synthetic (word_problems, arithmetic) training set."}
    )
    warm_start_steps: int = field(
        default=300,
        metadata={"help": "Supervised warm-start steps of `--model_name_or_path tiny-warm` (the demo's 300)."},
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["boxed_math_reward"],
        metadata={
            "help": "'boxed_math_reward' (the reference reward), 'last_number_reward' (the last number of the "
            "text equals the gold: chat arithmetic) or dotted import paths of reward functions."
        },
    )
    tools: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Tools for the model to call, as import paths ('trl_ada.examples.agents:multiply' or "
            "'trl_ada.examples.agents.multiply'): TRL's tool-calling loop runs inside every round."
        },
    )
    environment_factory: str | None = field(
        default=None,
        metadata={
            "help": "Import path of an environment class or factory (TRL's environment_factory): one instance "
            "per sample of every round, reset with its row; its public methods are tools."
        },
    )

    def __post_init__(self):
        for name in ("reward_funcs", "tools"):  # `reward_funcs: boxed_math_reward` in YAML is one name, not letters
            if isinstance(getattr(self, name), str):
                setattr(self, name, [getattr(self, name)])
        if self.dataset_prompt_template is not None and self.dataset_prompt_template not in PROMPT_TEMPLATES:
            raise ValueError(
                f"dataset_prompt_template={self.dataset_prompt_template!r}: use one of "
                f"{list(PROMPT_TEMPLATES)}, or leave it unset (the data set's own `prompt` column)."
            )
        for name in ("synthetic_num_examples", "synthetic_difficulty", "dataset_num_examples"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(
                    f"{name}={value!r} must be an integer >= 1 (a training set needs rows; difficulty "
                    "counts digits from 1)."
                )
        # A built-in task builds its own prompts: a recipe's data fields are ignored for it, said aloud (a math recipe
        # smoke-tested with `--dataset_name synthetic` still runs). They stay set: a held-out file
        # (`trl-ada-compare --eval_dataset`) is loaded as the recipe's data, with them.
        ignored = file_only_fields(self)
        if ignored:
            sized = "dataset_num_examples" if self.dataset_name == "hard_arithmetic" else "synthetic_num_examples"
            warnings.warn(
                f"{', '.join(f'{k}={v!r}' for k, v in ignored.items())}: for a Hub id or a local file; the "
                f"built-in task dataset_name={self.dataset_name!r} builds its own prompts and columns "
                f"({sized} sizes it), so its training set ignores them.",
                UserWarning,
                stacklevel=3,
            )
        unknown = [
            name for name in self.reward_funcs if name not in NAMED_REWARDS and not ("." in name or ":" in name)
        ]
        if unknown:
            raise ValueError(
                f"reward_funcs: unknown {unknown[0]!r}; use one of {sorted(NAMED_REWARDS)} or a dotted "
                "import path (my_task.my_reward for my_task.py in the current folder)."
            )


# The offline tasks (trl_ada.examples.offline) build their own prompts, so the fields below are for files only (and
# dataset_num_examples for hard_arithmetic too, which it cuts).
_FILE_ONLY_DEFAULTS = {
    "dataset_prompt_template": None,
    "dataset_problem_column": "problem",
    "dataset_answer_column": None,
    "dataset_num_examples": None,
}


def file_only_fields(values) -> dict:
    """The data fields set away from their defaults that the built-in task `values.dataset_name` does not read."""
    values = values if isinstance(values, dict) else vars(values)
    if values["dataset_name"] not in TASKS:
        return {}
    ignored = [
        n
        for n in _FILE_ONLY_DEFAULTS
        if not (n == "dataset_num_examples" and values["dataset_name"] == "hard_arithmetic")
    ]
    return {n: values[n] for n in ignored if values[n] != _FILE_ONLY_DEFAULTS[n]}


def with_dataset(script_args: ScriptArguments, **changes) -> ScriptArguments:
    """The recipe's arguments with another data set (a held-out file, another split): a built-in task drops the
    recipe's file-only fields quietly (the recipe's own data needs them), a file keeps them (it is loaded as the
    recipe loads its own)."""
    values = {**vars(script_args), **changes}
    values.update({name: _FILE_ONLY_DEFAULTS[name] for name in file_only_fields(values)})
    return ScriptArguments(**values)


# Reward functions a recipe can name without an import path.
NAMED_REWARDS = {"boxed_math_reward": boxed_math_reward, "last_number_reward": last_number_reward}


def load_reward_funcs(names: list[str]):
    funcs = []
    for name in names:
        if name in NAMED_REWARDS:
            funcs.append(NAMED_REWARDS[name])
        elif "." in name or ":" in name:
            funcs.append(load_object(name, "reward_funcs"))
        else:
            raise ValueError(
                f"reward_funcs: unknown {name!r}; use one of {sorted(NAMED_REWARDS)} or a dotted import path."
            )
    return funcs


def load_agents(script_args: ScriptArguments) -> dict:
    """The recipe's `tools` and `environment_factory`, imported, as AdaGRPOTrainer takes them (None: the recipe names
    none)."""
    factory = script_args.environment_factory
    return dict(
        tools=[load_object(path, "tools") for path in script_args.tools] or None,
        environment_factory=load_object(factory, "environment_factory") if factory else None,
    )


def load_object(path: str, field_name: str):
    """`pkg.module:name` or `pkg.module.name`, imported from the current folder first (`trl_ada.samplers.import_path`,
    the one loader of every import path); a clear error naming the field when it is not there."""
    return import_path(path, field_name)


RECIPE_CLASSES = (ScriptArguments, AdaGRPOConfig, ModelConfig)

# Recipe keys TRL used to take under another name (open-r1's recipes still write them): read as the new name, with
# the deprecation message TRL gave while it took them (TRL 0.27 dropped `torch_dtype` from its ModelConfig).
RENAMED_KEYS = {"torch_dtype": "dtype"}

# Keys of other GRPO recipes (open-r1's ScriptArguments) that have no field here: what to do instead.
NO_COUNTERPART = {
    "system_prompt": "trl-ada has no system_prompt field (open-r1's); put the system message in the data set's "
    "prompts instead: a conversational `prompt` column whose first message is {'role': 'system', 'content': ...} "
    "(docs/own-task.md), or `dataset_prompt_template: math`, which adds the reference's system message",
}

RECIPE_USAGE = "%(prog)s --config RECIPE.yaml [--FIELD VALUE ...]"


def _renamed(old: str, new: str, value, where: str) -> None:
    warnings.warn(
        f"`{old}` is deprecated, please use `{new}` instead: {where}'s {old}={value!r} is read as {new}={value!r}.",
        FutureWarning,
        stacklevel=2,
    )


class RecipeParser(TrlParser):
    """TrlParser with `--config` in the first lines of `--help` (usage and description), TRL's older names of renamed keys, and a short usage line
    on an argparse error (the full usage lists every field: some 240 lines above the message)."""

    def __init__(self, classes=RECIPE_CLASSES):
        super().__init__(
            classes,
            usage=RECIPE_USAGE,
            description="Train with Reinforce-Ada from a YAML recipe: --config RECIPE.yaml (e.g. "
            "recipes/Qwen2.5-Math-1.5B/ada_balance.yaml). Every key of the recipe is a flag below, and flags given on "
            "the command line override the recipe's values.",
        )
        group = self.add_argument_group("recipe")
        # SUPPRESS: TrlParser takes `--config` out of the arguments before argparse sees them, so this entry only
        # documents it and never lands in the parsed namespace.
        group.add_argument(
            "--config",
            metavar="RECIPE.yaml",
            default=argparse.SUPPRESS,
            help="The YAML recipe (e.g. recipes/Qwen2.5-Math-1.5B/ada_balance.yaml); its keys are the fields listed "
            "below.",
        )

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n(`{self.prog} --help` lists every field.)\n")

    def set_defaults_with_config(self, **kwargs) -> list[str]:
        for old, new in RENAMED_KEYS.items():
            if old not in kwargs:
                continue
            value = kwargs.pop(old)
            if new in kwargs and kwargs[new] != value:
                raise ValueError(
                    f"the recipe sets both {old}={value!r} and {new}={kwargs[new]!r}; {old} is TRL's older name of "
                    f"{new}: keep only {new}."
                )
            _renamed(old, new, value, "the recipe")
            kwargs[new] = value
        return super().set_defaults_with_config(**kwargs)


def _command_line(argv, parser: RecipeParser) -> list[str]:
    """The arguments as TrlParser takes them: `--config=X` split in two (it looks for `--config` alone), the older
    names of renamed keys replaced by the new ones."""
    given = list(argv if argv is not None else sys.argv[1:])
    args = []
    for i, item in enumerate(given):
        if item.startswith("--config="):
            args.extend(["--config", item.split("=", 1)[1]])
            continue
        for old, new in RENAMED_KEYS.items():
            for spelling in (f"--{old}", f"--{old.replace('_', '-')}"):
                if item == spelling or item.startswith(spelling + "="):
                    value = item.partition("=")[2] if "=" in item else (given[i + 1] if i + 1 < len(given) else "")
                    _renamed(old, new, value, "the command line")
                    item = f"--{new}" + item[len(spelling) :]
        args.append(item)
    if args.count("--config") > 1:
        parser.error("--config given more than once: one recipe per run (override its keys with flags).")
    if args and args[-1] == "--config":
        parser.error("argument --config: expected one argument (the recipe's path)")
    if "--config" in args:
        at = args.index("--config") + 1
        args[at] = recipe_path(args[at], parser)
    return args


SHIPPED_RECIPES = os.path.join(RESOURCES, "recipes")  # package data: what `recipes/...` names from any folder


def recipe_path(path: str, parser: RecipeParser) -> str:
    """The recipe's file: the path as given, or, where no such file exists here, the recipe of that name shipped with
    trl-ada (`recipes/tiny/ada_balance.yaml` names one from any folder, as the docs print it)."""
    if os.path.exists(path):
        return path
    shipped = os.path.join(SHIPPED_RECIPES, os.path.relpath(path, "recipes")) if path.startswith("recipes/") else None
    if shipped is not None and os.path.isfile(shipped):
        print(f"[trl-ada] {path} is not in {os.getcwd()}: using the recipe shipped with trl-ada, {shipped}")
        return shipped
    names = sorted(
        os.path.join("recipes", os.path.relpath(os.path.join(folder, name), SHIPPED_RECIPES))
        for folder, _, files in os.walk(SHIPPED_RECIPES)
        for name in files
        if name.endswith(".yaml")
    )
    parser.error(f"--config {path}: no such file here ({os.getcwd()}), nor shipped with trl-ada (shipped: {names}).")


def parse_recipe(argv=None, classes=RECIPE_CLASSES) -> tuple:
    """TrlParser over the recipe's dataclasses (a YAML `--config` and command-line overrides), as TRL's scripts parse
    them. A key that is no field, in the YAML or on the command line, is an error that names it, where it came
    from and the closest field (or, for another recipe format's key with no counterpart, what to do instead)."""
    parser = RecipeParser(classes)
    *parsed, from_config, from_command_line = parser.parse_args_and_config(
        args=_command_line(argv, parser), return_remaining_strings=True, separate_remaining_strings=True
    )
    if len(parsed) > len(classes):  # argparse took an abbreviation (`--conf`) for --config, which TrlParser reads
        parser.error("write --config in full, once: it names the recipe.")
    if from_config or from_command_line:
        names = [f.name for cls in classes for f in dataclasses.fields(cls)]
        problems = []
        for where, strings in (("the recipe", from_config), ("the command line", from_command_line)):
            for item in strings:
                if not item.startswith("--"):
                    continue
                key = item[2:].split("=", 1)[0]
                if key.replace("-", "_") in NO_COUNTERPART:
                    problems.append(f"{key!r} in {where}: {NO_COUNTERPART[key.replace('-', '_')]}")
                    continue
                close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
                problems.append(f"{key!r} in {where}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        stray = [item for item in (*from_config, *from_command_line) if not item.startswith("--")]
        raise ValueError(
            f"unknown recipe key{'s' if len(problems) > 1 else ''}: {'; '.join(problems) or stray}. A recipe's keys "
            "are the fields of trl_ada.cli.train.ScriptArguments, trl_ada.AdaGRPOConfig and trl.ModelConfig (`python -m "
            "trl_ada.cli.train --help` lists them)."
        )
    return tuple(parsed)


def load_train_dataset(script_args: ScriptArguments, seed: int):
    dataset = offline_task(script_args, seed)
    if dataset is not None:
        return dataset
    raw = load_raw_dataset(script_args.dataset_name, script_args.dataset_split, source="dataset_name")
    if script_args.dataset_num_examples is not None:
        raw = raw.select(range(min(script_args.dataset_num_examples, len(raw))))
    dataset = to_trl_dataset(
        raw,
        script_args.dataset_prompt_template,
        script_args.dataset_problem_column,
        script_args.dataset_answer_column,
        source=script_args.dataset_name,
    )
    if script_args.dataset_prompt_template == "math":
        check_gold_answers(dataset["answer"])  # a bad gold answer is a data error: fail before any GPU time is spent
    return dataset


def _looks_local(name: str) -> bool:
    return name.startswith((".", "/", "~", "runs" + os.sep)) or os.sep + "models" + os.sep in name


def resolve_model(name: str | None, training_args, warm_start_steps: int = 300) -> str:
    """The model folder or Hub id to train: an offline model name is built (`trl_ada.examples.offline`); a local
    folder that does not exist is an error that says how to create it. A folder is returned as an absolute path: a
    LoRA run's saved adapter names its base model by it, so the adapter loads from anywhere."""
    built = offline_model(name, training_args, warm_start_steps)
    if built is not None:
        return os.path.abspath(built)
    if not os.path.isdir(os.path.expanduser(name)) and (_looks_local(name) or missing_model_message(name)):
        raise FileNotFoundError(
            missing_model_message(name)
            or f"model_name_or_path: local folder {name!r} does not exist (give a model "
            "folder, or a Hub id like Qwen/Qwen2.5-Math-1.5B)."
        )
    folder = os.path.expanduser(name)
    return os.path.abspath(folder) if os.path.isdir(folder) else name


def build_trainer(
    model: str, reward_funcs, training_args, model_args, train_dataset, agents: dict, **kwargs
) -> AdaGRPOTrainer:
    """AdaGRPOTrainer as trl-ada-train and trl-ada-compare build it from a recipe: `model` from `resolve_model`, LoRA
    from `model_args` (`use_peft`), the tools or environment of `load_agents`; `kwargs` (e.g. callbacks) go to the
    trainer as they are."""
    return AdaGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        peft_config=get_peft_config(model_args),
        **agents,
        **kwargs,
    )


def resolve_resume(value, output_dir: str) -> str | None:
    """The checkpoint folder a run resumes from, as transformers' Trainer reads `resume_from_checkpoint`: unset or
    `false` is none, `true` (the flag's value is a string) the latest `checkpoint-<step>` in output_dir, anything else
    a folder. A folder that is missing, or that holds a file cut short, is an error naming it, before any model is
    built."""
    if value is None or (isinstance(value, bool) and not value) or str(value).strip().lower() in ("", "false"):
        return None
    if value is True or str(value).strip().lower() == "true":
        latest = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        if latest is None:
            raise FileNotFoundError(
                f"resume_from_checkpoint=true: output_dir {output_dir!r} holds no checkpoint-<step> folder to resume "
                "from. Give the output_dir of the run to continue, a checkpoint folder (--resume_from_checkpoint "
                "path/to/checkpoint-<step>), or leave resume_from_checkpoint out to start a new run."
            )
        folder = latest
    else:
        folder = os.path.expanduser(str(value))
        if not os.path.isdir(folder):
            latest = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
            raise FileNotFoundError(
                f"resume_from_checkpoint: checkpoint folder {value!r} does not exist. Give a checkpoint-<step> "
                "folder of an earlier run"
                + (f" ({latest} is the latest in output_dir)" if latest else "")
                + ", or `--resume_from_checkpoint true` for the latest checkpoint in output_dir."
            )
        if not os.path.isfile(os.path.join(folder, "trainer_state.json")):
            inside = get_last_checkpoint(folder)
            raise FileNotFoundError(
                f"resume_from_checkpoint: {value!r} is no checkpoint folder (it holds no trainer_state.json)"
                + (
                    f"; it holds checkpoints, the latest {inside}: give that, or --output_dir {value} "
                    "--resume_from_checkpoint true"
                    if inside
                    else "; give a checkpoint-<step> folder"
                )
                + "."
            )
    check_checkpoint(folder)
    return folder


def warn_overwrite(training_args, resume: str | None) -> None:
    """A new run (no resume) into an output_dir that holds checkpoints replaces them step by step as it saves: said
    aloud, unless the user opted in with transformers' `overwrite_output_dir` where their transformers still has it."""
    output_dir = training_args.output_dir
    if resume is not None or getattr(training_args, "overwrite_output_dir", False) or not os.path.isdir(output_dir):
        return
    latest = get_last_checkpoint(output_dir)
    if latest is not None:
        opt_in = (
            "; to replace them knowingly, --overwrite_output_dir true"
            if hasattr(training_args, "overwrite_output_dir")
            else ""
        )
        warnings.warn(
            f"output_dir {output_dir!r} already holds checkpoints (the latest: {os.path.basename(latest)}) and this "
            "run starts anew, writing its checkpoints among them: it overwrites those of the same step, and a later "
            "`--resume_from_checkpoint true` may pick an old one of a higher step. To continue that run instead, add "
            f"`--resume_from_checkpoint true`; to keep them, give another --output_dir{opt_in}.",
            UserWarning,
            stacklevel=2,
        )


def main(argv=None):
    script_args, training_args, model_args = parse_recipe(argv)
    resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    warn_overwrite(training_args, resume)
    # The recipe's imports and data first: a typo there fails in seconds, before a model is built or warm-started.
    reward_funcs = load_reward_funcs(script_args.reward_funcs)
    agents = load_agents(script_args)
    train_dataset = load_train_dataset(script_args, training_args.seed)
    if not (agents.get("environment_factory") or agents.get("rollout_func")):  # those add columns of their own
        check_reward_columns(reward_funcs, train_dataset, training_args.remove_unused_columns)
    model = resolve_model(model_args.model_name_or_path, training_args, script_args.warm_start_steps)
    if model_args.dtype not in (None, "auto"):
        training_args.model_init_kwargs = {**(training_args.model_init_kwargs or {}), "dtype": model_args.dtype}

    trainer = build_trainer(model, reward_funcs, training_args, model_args, train_dataset, agents)
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json beside the model: what trl-ada-eval hands a reward that reads it
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)


if __name__ == "__main__":
    main()
