"""Prompts and data sets: the reference prompt template, the reference data sets, and recipe datasets as TRL takes them.

Every math loader returns a `datasets.Dataset` with a conversational `prompt` column (TRL's format) and an `answer`
column holding the gold answer, which `trl_ada.rewards.boxed_math_reward` reads. The offline arithmetic tasks are
examples, in `trl_ada.examples.arithmetic`.

    >>> from trl_ada.data import make_prompt
    >>> make_prompt("What is 2 + 3?")[1]["content"].endswith("within \\\\boxed{}.")
    True
"""

from __future__ import annotations

import difflib
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


def looks_like_a_path(name: str) -> bool:
    """Whether `name` can only mean a local file or folder: a data file's extension, a leading `./`, `../`, `/` or
    `~`, or more folders than a Hub id's `owner/name` has. `datasets` would otherwise look such a name up on the Hub
    and fail after its retries with "Couldn't reach ... on the Hub", naming no local path."""
    if "://" in name:  # hf://, s3://, https://: a remote address, for datasets to resolve
        return False
    separators = tuple({os.sep, os.altsep or os.sep, "/"})
    return (
        is_local_file(name)
        or name.startswith(("~", *(prefix + sep for prefix in ("", ".", "..") for sep in separators)))
        or name.count("/") > 1
        or (os.sep != "/" and os.sep in name)
    )


def close_paths(name: str) -> list[str]:
    """Existing paths a typo or two from `name`: each part of it that does not exist matched (difflib) among the
    entries of the folder above it, at most three."""
    parts = os.path.normpath(os.path.expanduser(name)).split(os.sep)
    root = os.sep if parts[0] == "" else os.curdir
    return [os.path.normpath(path) for path in _close_paths(root, [part for part in parts if part])][:3]


def _close_paths(folder: str, parts: list[str]) -> list[str]:
    if not parts:
        return [folder]
    here = os.path.join(folder, parts[0])
    if os.path.exists(here):
        return _close_paths(here, parts[1:])
    try:
        entries = sorted(os.listdir(folder))
    except OSError:  # not a folder, or unreadable: nothing to suggest
        return []
    found = []
    for entry in difflib.get_close_matches(parts[0], entries, n=3):
        found.extend(_close_paths(os.path.join(folder, entry), parts[1:]))
    return found


def check_local_path(name: str, source: str = "dataset") -> None:
    """A name that can only be a local path (`looks_like_a_path`) must exist: said at once, with the folder a
    relative path is read from and the close names there, instead of the Hub's "Couldn't reach" after its retries."""
    if not looks_like_a_path(name) or os.path.exists(os.path.expanduser(name)):
        return
    close = close_paths(name)
    hint = f" Close names there: {', '.join(map(repr, close))}." if close else ""
    raise FileNotFoundError(
        f"{source}={name!r}: no such file or folder (a relative path is read from the current folder "
        f"{os.getcwd()}).{hint} Give an existing json/jsonl/csv/parquet file or data set folder, or a Hub id "
        "(owner/name)."
    )


def load_raw_dataset(
    name_or_path: str, split: str = "train", local_split: str = "train", source: str = "dataset"
) -> Dataset:
    """A data set as its source holds it, columns unchanged: a Hub id or a local folder (`split` chosen there), or a
    single local json/jsonl/parquet/csv file, which holds one split. `local_split="train"` refuses any other `split`
    for such a file, so that a held-out split asked of it is never silently the training rows; `"any"` reads the file
    whatever `split` says (an evaluation file is its own split). A name that can only be a local path and does not
    exist is a FileNotFoundError naming it (`source`: the argument it came from), before any Hub lookup."""
    check_local_path(name_or_path, source)
    if is_local_file(name_or_path):
        if local_split != "any" and split != local_split:
            raise ValueError(
                f"split {split!r}: {name_or_path!r} is a single file, which holds one split ({local_split!r}). Give "
                "the held-out rows as a file of their own (trl-ada-compare --eval_dataset FILE), or a data set "
                "folder with one file per split (train.jsonl, test.jsonl)."
            )
        return load_dataset(
            _LOCAL_FORMATS[os.path.splitext(name_or_path)[1].lower()],
            data_files=os.path.expanduser(name_or_path),
            split="train",
        )
    if name_or_path.startswith("~"):
        name_or_path = os.path.expanduser(name_or_path)
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
