"""The offline arithmetic tasks of the examples, tests and benchmarks: synthetic sums (the tiny model's task), word
problems, chat arithmetic (the SmolLM2 task) and the screened hard arithmetic set shipped with the package.

    >>> from trl_ada.examples.arithmetic import synthetic_arithmetic
    >>> ds = synthetic_arithmetic(num_examples=3, difficulty=1, seed=0)
    >>> ds[0]["prompt"][1]["content"].endswith("within \\\\boxed{}.")
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import random

from datasets import Dataset

from trl_ada.data import make_prompt
from trl_ada.examples import RESOURCES


def synthetic_problem(rng: random.Random, difficulty: int) -> tuple[str, str]:
    """One arithmetic problem with a verifiable integer answer. Difficulty 1: one-digit sums; each level up adds a
    digit to the operands (2: two digits, 3: three digits, ...)."""
    high = 10**difficulty - 1
    a, b = rng.randint(0, high), rng.randint(0, high)
    return f"What is {a} + {b}?", str(a + b)


def synthetic_arithmetic(num_examples: int = 256, difficulty: int = 1, seed: int = 0) -> Dataset:
    """The offline task of the demo, tests and benchmarks, generated deterministically from `seed`."""
    rng = random.Random(seed)
    rows = [synthetic_problem(rng, difficulty) for _ in range(num_examples)]
    return Dataset.from_dict(
        {"prompt": [make_prompt(p) for p, _ in rows], "answer": [a for _, a in rows], "problem": [p for p, _ in rows]}
    )


def synthetic_solution(problem: str, answer: str) -> str:
    """A reference completion for a synthetic problem, in the format the reward expects (used by the warm start)."""
    expression = problem.removeprefix("What is ").removesuffix("?")
    return f"{expression} = {answer}. The answer is \\boxed{{{answer}}}."


# --- Easy arithmetic word problems (the real-model task) --------------------------------------------------------

_NAMES = ("Anna", "Ben", "Carla", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jamal", "Kira", "Leo")
_ITEMS = ("apples", "marbles", "stickers", "pencils", "books", "cookies", "coins", "shells", "cards", "balloons")


def word_problem(rng: random.Random, difficulty: int = 1) -> tuple[str, str]:
    """One short arithmetic word problem (one operation: +, -, x or an even split) and its integer answer.

    Difficulty 1 keeps the numbers small (sums and differences up to 20, products of one-digit factors); each level
    up multiplies the ranges by 10."""
    scale = 10 ** (difficulty - 1)
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randint(2, 12 * scale), rng.randint(2, 8 * scale)
        return f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?", str(a + b)
    if kind == 1:
        a = rng.randint(5, 20 * scale)
        b = rng.randint(1, a - 1)
        return f"{name} had {a} {item} and gave {b} of them away. How many {item} does {name} have left?", str(a - b)
    if kind == 2:
        a, b = rng.randint(2, 9 * scale), rng.randint(2, 9)
        return f"There are {a} bags with {b} {item} in each bag. How many {item} are there in total?", str(a * b)
    per, people = rng.randint(2, 9 * scale), rng.randint(2, 6)
    return (
        f"{name} shares {per * people} {item} equally among {people} friends. How many {item} does each friend get?",
        str(per),
    )


def word_problems(num_examples: int = 256, difficulty: int = 1, seed: int = 0) -> Dataset:
    """Easy arithmetic word problems with the reference prompt (system + user suffix asking for \\boxed{}),
    generated deterministically from `seed` (a 135M model learns next to nothing from it: the arithmetic tasks suit
    it better)."""
    rng = random.Random(seed)
    rows = [word_problem(rng, difficulty) for _ in range(num_examples)]
    return Dataset.from_dict(
        {"prompt": [make_prompt(p) for p, _ in rows], "answer": [a for _, a in rows], "problem": [p for p, _ in rows]}
    )


# --- Chat arithmetic (the SmolLM2 task: plain questions, a number as the answer) ---------------------------------

# (kind, operator, smallest operand, largest operand). One-digit sums and products an instruct model of 135M
# parameters gets right often but not always; two-digit sums it rarely gets right at first: headroom.
ARITHMETIC_KINDS = (
    ("1-digit +", "+", 0, 9),
    ("1-digit x", "x", 1, 9),
    ("2-digit +", "+", 10, 99),
)
ARITHMETIC_SPLITS = ("train", "test")
HELD_OUT_SHARE = 4  # one problem in 4 belongs to the held-out split


def arithmetic_split_of(problem: str) -> str:
    """The split a problem belongs to, from a content hash of its text: the same for every seed, size and process,
    so a training set and a held-out set never share a question, whatever their seeds."""
    bucket = int.from_bytes(hashlib.sha256(problem.encode()).digest()[:4], "big") % HELD_OUT_SHARE
    return "test" if bucket == 0 else "train"


def arithmetic_problems(num_examples: int = 2048, seed: int = 0, split: str = "train") -> Dataset:
    """Chat arithmetic: "What is 7 + 5?", "What is 3 x 8?", "What is 47 + 38?" as a single user message (the
    model's own chat template adds its system prompt), the integer answer, and the problem `kind`.

    The kinds take equal shares, in a seeded random order. A question belongs to one split only (see
    `arithmetic_split_of`); `split="test"` rows are distinct questions (the smallest kind there, one-digit products,
    has 24 questions: up to 72 rows of equal shares), `split="train"` rows are drawn with replacement from the training
    questions. The answer is meant for a lenient reward (`trl_ada.rewards.last_number_reward`): no \\boxed{} asked.
    """
    if split not in ARITHMETIC_SPLITS:
        raise ValueError(f"split must be one of {ARITHMETIC_SPLITS}, got {split!r}")
    rng = random.Random(seed)
    questions = {kind: [] for kind, *_ in ARITHMETIC_KINDS}
    for kind, operator, low, high in ARITHMETIC_KINDS:
        for a in range(low, high + 1):
            for b in range(low, high + 1):
                problem = f"What is {a} {operator} {b}?"
                if arithmetic_split_of(problem) == split:
                    questions[kind].append((problem, str(a + b if operator == "+" else a * b)))
    kinds = [ARITHMETIC_KINDS[i % len(ARITHMETIC_KINDS)][0] for i in range(num_examples)]
    rng.shuffle(kinds)
    if split == "test":
        for kind in questions:
            needed = kinds.count(kind)
            if needed > len(questions[kind]):
                raise ValueError(
                    f"arithmetic_problems: the test split has only {len(questions[kind])} distinct "
                    f"{kind!r} questions, {needed} asked for ({num_examples} rows in equal shares)."
                )
            rng.shuffle(questions[kind])
        taken = {kind: iter(questions[kind]) for kind in questions}
        rows = [(*next(taken[kind]), kind) for kind in kinds]
    else:
        rows = [(*rng.choice(questions[kind]), kind) for kind in kinds]
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": problem}] for problem, _, _ in rows],
            "answer": [answer for _, answer, _ in rows],
            "problem": [problem for problem, _, _ in rows],
            "kind": [kind for _, _, kind in rows],
        }
    )


# --- Hard chat arithmetic: harder kinds and the screened hard prompt set ----------------------------------------
# ARITHMETIC_KINDS above stay as they are (the demo, tests and benchmarks depend on their questions). These kinds are
# candidates for a hard prompt set built the Reinforce-Ada paper's way: benchmarks/hard_set/hard_set.py samples the base model
# 16 times per question at temperature 1.0 and keeps the questions it answers right once or twice. Same question form
# ("What is 47 + 38?", a plain user message) and the same content-hash split as `arithmetic_problems`, so a hard
# held-out question is never a training question of either set.

HARD_ARITHMETIC_KINDS = (
    "2-digit + carry",  # 47 + 38: the units carry
    "2-digit -",  # 83 - 27: first operand larger
    "2-digit - borrow",  # 83 - 27 where the units borrow (3 < 7)
    "2-digit x 1-digit",  # 47 x 6
    "3-term 1-digit +",  # 7 + 5 + 8
    "3-term 2-digit +",  # 47 + 38 + 12
    "3-digit +",  # 472 + 386
    "2-digit + no carry",  # 43 + 25: easier than a carry (harder kinds are almost never right at T=1.0)
    "2-digit + 1-digit",  # 47 + 8
)
_TERMS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "x": lambda a, b: a * b}


def hard_arithmetic_problem(rng: random.Random, kind: str) -> tuple[str, str]:
    """One question of a hard kind (see HARD_ARITHMETIC_KINDS) and its integer answer, drawn with `rng`."""
    if kind == "2-digit + carry":
        while True:
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            if a % 10 + b % 10 >= 10:
                return f"What is {a} + {b}?", str(a + b)
    if kind in ("2-digit -", "2-digit - borrow"):
        while True:
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            if a > b and (kind == "2-digit -" or a % 10 < b % 10):
                return f"What is {a} - {b}?", str(a - b)
    if kind == "2-digit x 1-digit":
        a, b = rng.randint(11, 99), rng.randint(2, 9)
        return f"What is {a} x {b}?", str(a * b)
    if kind in ("3-term 1-digit +", "3-term 2-digit +"):
        low, high = (1, 9) if kind == "3-term 1-digit +" else (10, 99)
        terms = [rng.randint(low, high) for _ in range(3)]
        return "What is " + " + ".join(map(str, terms)) + "?", str(sum(terms))
    if kind == "2-digit + no carry":
        while True:
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            if a % 10 + b % 10 < 10:
                return f"What is {a} + {b}?", str(a + b)
    if kind == "2-digit + 1-digit":
        a, b = rng.randint(10, 99), rng.randint(1, 9)
        return f"What is {a} + {b}?", str(a + b)
    if kind == "3-digit +":
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        return f"What is {a} + {b}?", str(a + b)
    raise ValueError(f"unknown hard arithmetic kind {kind!r}; the kinds are {HARD_ARITHMETIC_KINDS}")


def hard_arithmetic_candidates(seed: int = 0, split: str = "train", kinds=HARD_ARITHMETIC_KINDS, exclude=()):
    """Endless, seeded stream of distinct candidate questions of `split` (by `arithmetic_split_of`), as dicts with
    `problem`, `answer`, `kind`, `split`. `kinds` is a sequence of kind names, repeated to weight them ("3-digit +"
    twice draws it twice as often); they take turns in that order. Questions in `exclude` are never drawn. A kind
    whose questions of this split run out (50,000 draws without a new one) leaves the rotation; the stream ends when
    all have."""
    if split not in ARITHMETIC_SPLITS:
        raise ValueError(f"split must be one of {ARITHMETIC_SPLITS}, got {split!r}")
    for kind in kinds:
        hard_arithmetic_problem(random.Random(0), kind)  # an unknown kind fails now, not mid-stream
    rng, seen, order = random.Random(f"{seed}/{split}"), set(exclude), list(kinds)
    while order:
        for kind in list(order):
            for _ in range(50_000):
                problem, answer = hard_arithmetic_problem(rng, kind)
                if problem not in seen and arithmetic_split_of(problem) == split:
                    seen.add(problem)
                    yield {"problem": problem, "answer": answer, "kind": kind, "split": split}
                    break
            else:
                order = [k for k in order if k != kind]


HARD_SET_SPLITS = ("train", "test_hard", "test_easy")
HARD_SET_DIR = os.path.join(RESOURCES, "hard_arithmetic")


def hard_arithmetic(split: str = "train", directory: str | None = None, num_examples: int | None = None) -> Dataset:
    """The screened hard chat-arithmetic set (benchmarks/hard_set/hard_set.py writes it): `train` (questions the base
    SmolLM2-135M-Instruct answers right 1 or 2 times in 16 samples at temperature 1.0), `test_hard` (held-out
    questions kept by the same rule) or `test_easy` (held-out questions of the easy kinds of `arithmetic_problems`,
    unscreened: a run that forgets them shows it). Rows as `arithmetic_problems` gives them: `prompt` (a plain user
    message), `answer`, `problem`, `kind`. `directory` defaults to the copy that ships in the package
    (trl_ada/examples/resources/hard_arithmetic; benchmarks/hard_set links to it)."""
    if split not in HARD_SET_SPLITS:
        raise ValueError(f"hard_arithmetic: split must be one of {HARD_SET_SPLITS}, got {split!r}")
    path = os.path.join(directory or HARD_SET_DIR, f"{split}.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"hard_arithmetic: {path} does not exist. It ships in the package (trl_ada/examples/resources/hard_arithmetic); "
            "rebuild it from a checkout with: OMP_NUM_THREADS=1 python benchmarks/hard_set/hard_set.py --deadline_s 3600"
        )
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if num_examples is not None:
        rows = rows[:num_examples]
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": row["problem"]}] for row in rows],
            "answer": [row["answer"] for row in rows],
            "problem": [row["problem"] for row in rows],
            "kind": [row["kind"] for row in rows],
        }
    )
