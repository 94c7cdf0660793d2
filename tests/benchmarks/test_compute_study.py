"""The compute study's prompt set (benchmarks/compute_study): prompts that come back, a mix of difficulties, and a
held-out set with no training question in it, up to commuted operands or reordered terms."""

import json
import os
import re
from collections import Counter

from tests.helpers import ROOT

STUDY = os.path.join(ROOT, "benchmarks", "compute_study")


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def operands(problem):
    """An independent canonical form: the operator and the multiset of operands (the order kept for a difference)."""
    numbers = [int(n) for n in re.findall(r"\d+", problem)]
    operator = re.search(r" ([+x-]) ", problem).group(1)
    return (operator, *(numbers if operator == "-" else sorted(numbers)))


def test_held_out_questions_are_not_training_questions_in_any_order():
    train = read(os.path.join(STUDY, "train.jsonl"))
    seen = {operands(r["problem"]) for r in train}
    for split in ("test_hard", "test_easy"):
        held = read(os.path.join(STUDY, f"{split}.jsonl"))
        assert len(held) >= 60
        assert not {operands(r["problem"]) for r in held} & seen, split
    # the filter removed what it had to: the hard set's own held-out file does share questions with this set
    original = read(os.path.join(ROOT, "benchmarks", "hard_set", "test_hard.jsonl"))
    assert {operands(r["problem"]) for r in original} & seen


def test_training_set_mixes_difficulties_from_the_screen_and_its_rows_are_what_grpo_trainer_takes():
    train = read(os.path.join(STUDY, "train.jsonl"))
    screen = {r["problem"]: r for r in read(os.path.join(ROOT, "benchmarks", "hard_set", "screen.jsonl"))}
    assert len({r["problem"] for r in train}) == len(train) == 48
    assert Counter(r["difficulty"] for r in train) == {"hard": 32, "medium": 16}
    for row in train:
        record = screen[row["problem"]]
        assert record["split"] == "train"
        assert (1 <= record["right"] <= 2 and record["drawn"] == 16) if row["difficulty"] == "hard" \
            else record["right"] >= 3
        assert row["prompt"] == [{"role": "user", "content": row["problem"]}] and row["answer"] == record["answer"]
    # 4 prompts a step: every question comes back every 12 steps, at least 4 times in 48 steps
    assert len(train) / 4 == 12
