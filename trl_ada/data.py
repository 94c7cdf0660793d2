"""Prompts and data sets: the reference prompt template, the reference data sets, and recipe datasets as TRL takes them.

Every math loader returns a `datasets.Dataset` with a conversational `prompt` column (TRL's format) and an `answer`
column holding the gold answer, which `trl_ada.rewards.boxed_math_reward` reads. The offline arithmetic tasks are
examples, in `trl_ada.examples.arithmetic`.

    >>> from trl_ada.data import make_prompt
    >>> make_prompt("What is 2 + 3?")[1]["content"].endswith("within \\\\boxed{}.")
    True
"""

from __future__ import annotations

import os

from datasets import Dataset, load_dataset


SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
USER_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."

# Hub ids of the reference's training sets (columns `problem`, `gt`).
REFERENCE_TRAIN_SETS = (
    "RLHFlow/reinforce_ada_hard_prompt",
    "RLHFlow/reinforce_ada_easy_prompt",
    "RLHFlow/reinforce_ada_hard_prompt_1-5b",
    "RLHFlow/reinforce_ada_simple_prompt_1-5b",
    "RLHFlow/reinforce_ada_hard_prompt_llama",
)
ANSWER_COLUMNS = ("gt", "answer", "solution")
_LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def make_prompt(problem: str) -> list[dict[str, str]]:
    """The reference prompt: a system message and the problem with its step-by-step suffix."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem + USER_SUFFIX}]


def load_math_dataset(
    name_or_path: str,
    split: str = "train",
    problem_column: str = "problem",
    answer_column: str | None = None,
    num_examples: int | None = None,
) -> Dataset:
    """Load a math data set from the Hub or a local json/jsonl/parquet/csv file and convert it to TRL's format.

    `answer_column` defaults to the first of `gt` (training sets), `answer` (evaluation sets) or `solution` found.
    Raises a ValueError naming the columns found when the problem or answer column is missing.
    """
    raw = load_raw_dataset(name_or_path, split, local_split="any")
    return to_prompt_dataset(raw, problem_column, answer_column, source=name_or_path, num_examples=num_examples)


def is_local_file(name_or_path: str) -> bool:
    """Whether `name_or_path` names a single local data file (json, jsonl, parquet or csv) rather than a Hub id or a
    data set folder."""
    return os.path.splitext(name_or_path)[1].lower() in _LOCAL_FORMATS


def load_raw_dataset(name_or_path: str, split: str = "train", local_split: str = "train") -> Dataset:
    """A data set as its source holds it, columns unchanged: a Hub id or a local folder (`split` chosen there), or a
    single local json/jsonl/parquet/csv file, which holds one split. `local_split="train"` refuses any other `split`
    for such a file, so that a held-out split asked of it is never silently the training rows; `"any"` reads the file
    whatever `split` says (an evaluation file is its own split)."""
    if is_local_file(name_or_path):
        if not os.path.exists(name_or_path):
            raise FileNotFoundError(f"dataset file {name_or_path!r} does not exist.")
        if local_split != "any" and split != local_split:
            raise ValueError(
                f"split {split!r}: {name_or_path!r} is a single file, which holds one split ({local_split!r}). Give "
                "the held-out rows as a file of their own (trl-ada-compare --eval_dataset FILE), or a data set "
                "folder with one file per split (train.jsonl, test.jsonl)."
            )
        return load_dataset(
            _LOCAL_FORMATS[os.path.splitext(name_or_path)[1].lower()], data_files=name_or_path, split="train"
        )
    return load_dataset(name_or_path, split=split)  # a Hub id or a local data set folder


PROMPT_TEMPLATES = ("math", "user")


def to_trl_dataset(
    raw: Dataset,
    prompt_template: str | None = None,
    problem_column: str = "problem",
    answer_column: str | None = None,
    source: str = "dataset",
) -> Dataset:
    """A loaded data set in GRPOTrainer's format, as a recipe asks for it with `dataset_prompt_template`:

    - None (the default): the data set is used as it is. It must have a `prompt` column (text or conversational);
      every column keeps its name and reaches the reward functions, exactly as GRPOTrainer would hand them over.
    - "math": the reference's math prompt (`make_prompt`: a system message asking for \\boxed{}, the problem with
      its step-by-step suffix) built from `problem_column`, and the gold answer column renamed to `answer`, which
      `boxed_math_reward` reads (see `to_prompt_dataset`).
    - "user": `problem_column` as a single user message, every column unchanged.
    """
    columns = list(raw.column_names)
    if prompt_template == "math":
        return to_prompt_dataset(raw, problem_column, answer_column, source=source)
    if prompt_template == "user":
        if problem_column not in columns:
            raise ValueError(
                f"{source}: no problem column {problem_column!r}; columns found: {columns}. Pass "
                "--dataset_problem_column <name>."
            )
        return raw.map(lambda row: {"prompt": [{"role": "user", "content": str(row[problem_column])}]})
    if prompt_template is not None:
        raise ValueError(
            f"dataset_prompt_template={prompt_template!r}: use one of {PROMPT_TEMPLATES}, or leave it "
            "unset to train on the data set's own `prompt` column."
        )
    if "prompt" not in columns:
        raise ValueError(
            f"{source}: no 'prompt' column; columns found: {columns}. GRPOTrainer trains on a 'prompt' column (text, "
            "or a list of chat messages). Add one, or set dataset_prompt_template: user (the "
            f"{problem_column!r} column as a user message) or math (the reference's \\boxed{{}} prompt, gold answer "
            "renamed to 'answer'); --dataset_problem_column names the column."
        )
    return raw


def to_prompt_dataset(
    raw: Dataset,
    problem_column: str = "problem",
    answer_column: str | None = None,
    source: str = "dataset",
    num_examples: int | None = None,
) -> Dataset:
    """Convert a data set with a problem and an answer column into `prompt` + `answer` rows."""
    columns = list(raw.column_names)
    if problem_column not in columns:
        raise ValueError(
            f"{source}: no problem column {problem_column!r}; columns found: {columns}. "
            "Pass problem_column=<name> (--dataset_problem_column on the command line)."
        )
    if answer_column is None:
        answer_column = next((c for c in ANSWER_COLUMNS if c in columns), None)
    if answer_column is None or answer_column not in columns:
        raise ValueError(
            f"{source}: no answer column {answer_column or ' or '.join(ANSWER_COLUMNS)!r}; columns found: {columns}. "
            "Pass answer_column=<name> (--dataset_answer_column on the command line)."
        )
    if num_examples is not None:
        raw = raw.select(range(min(num_examples, len(raw))))

    def convert(row):
        return {"prompt": make_prompt(str(row[problem_column])), "answer": str(row[answer_column])}

    # Other columns stay: TRL passes them to reward functions as keyword arguments.
    replaced = [c for c in (problem_column, answer_column) if c not in ("prompt", "answer")]
    return raw.map(convert, remove_columns=replaced)
