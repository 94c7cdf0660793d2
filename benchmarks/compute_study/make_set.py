"""The compute study's prompt set: few enough distinct questions that every prompt comes back many times in a run.

    python benchmarks/compute_study/make_set.py      # rewrites train.jsonl, test_hard.jsonl, test_easy.jsonl here

Training (48 questions, drawn with a fixed seed from the hard set's screen, `benchmarks/hard_set/screen.jsonl`:
SmolLM2-135M-Instruct sampled at temperature 1.0 with the hard recipe's 96-token cap):
- 32 hard ones, answered right 1 or 2 times in 16 (the Reinforce-Ada paper's rule for its hard sets);
- 16 medium ones, answered right at least 3 times before the screen stopped sampling them.

At 4 prompts a step a run visits every training question once per 12 steps, so a run of 48 steps or more sees each
at least 4 times: the regime in which a per-prompt memory (Reinforce-Ada-Est, the budget's skipping) can act.

Held out: the hard set's `test_hard` questions (screened by the same rule) and its easy slice `test_easy`, without
any question whose canonical form (operands of a sum or a product sorted; a difference as written) is that of a
training question: "3 + 7 + 2" and "2 + 3 + 7" are one question.
"""

from __future__ import annotations

import json
import os
import random


HERE = os.path.dirname(os.path.abspath(__file__))
HARD_SET = os.path.join(os.path.dirname(HERE), "hard_set")
SEED = 71
HARD, MEDIUM = 32, 16


def canonical(problem: str) -> tuple:
    """ "What is 7 + 5 + 8?" -> ("+", 5, 7, 8): the question up to the order of commuting operands."""
    expression = problem.removeprefix("What is ").removesuffix("?")
    for operator in ("+", "x"):
        if f" {operator} " in expression:
            return (operator, *sorted(int(t) for t in expression.split(f" {operator} ")))
    a, b = expression.split(" - ")
    return ("-", int(a), int(b))


def row(record: dict) -> dict:
    """A row as GRPOTrainer takes it: a conversational `prompt`; `answer` for the reward; `problem`, `kind` kept."""
    return {
        "prompt": [{"role": "user", "content": record["problem"]}],
        "answer": record["answer"],
        "problem": record["problem"],
        "kind": record["kind"],
    }


def build() -> dict[str, list[dict]]:
    with open(os.path.join(HARD_SET, "screen.jsonl")) as f:
        screen = [json.loads(line) for line in f if line.strip()]
    train_pool = [r for r in screen if r["split"] == "train"]
    hard = sorted((r for r in train_pool if r["right"] in (1, 2) and r["drawn"] == 16), key=lambda r: r["problem"])
    medium = sorted((r for r in train_pool if r["right"] >= 3), key=lambda r: r["problem"])
    rng = random.Random(SEED)
    train = rng.sample(hard, HARD) + rng.sample(medium, MEDIUM)
    rng.shuffle(train)
    seen = {canonical(r["problem"]) for r in train}
    sets = {"train": [dict(row(r), difficulty="hard" if r["right"] <= 2 else "medium") for r in train]}
    for split in ("test_hard", "test_easy"):
        with open(os.path.join(HARD_SET, f"{split}.jsonl")) as f:
            held = [json.loads(line) for line in f if line.strip()]
        sets[split] = [row(r) for r in held if canonical(r["problem"]) not in seen]
    return sets


def main() -> None:
    for split, rows in build().items():
        with open(os.path.join(HERE, f"{split}.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        print(f"{split}: {len(rows)} questions")


if __name__ == "__main__":
    main()
