"""The sampler bench's task (benchmarks/sampler_bench): a held-out test set of at least 300 questions, splits with no
question in common up to commuted operands, a training pool drawn from the train split, right answers, and split
files and summary that say what the screen measured."""

import json
import os
import re
from collections import Counter

from tests.helpers import ROOT, load_script


BENCH = os.path.join(ROOT, "benchmarks", "sampler_bench")
SPLITS = ("train", "validation", "test")


def read(name):
    with open(os.path.join(BENCH, name)) as f:
        return [json.loads(line) for line in f if line.strip()]


def operands(problem):
    """An independent canonical form: the operator and the multiset of operands (the order kept for a difference)."""
    numbers = [int(n) for n in re.findall(r"\d+", problem)]
    operator = re.search(r" ([+x-]) ", problem).group(1)
    return (operator, *(numbers if operator == "-" else sorted(numbers)))


def value(problem):
    numbers = [int(n) for n in re.findall(r"\d+", problem)]
    operator = re.search(r" ([+x-]) ", problem).group(1)
    if operator == "+":
        return sum(numbers)
    if operator == "x":
        return numbers[0] * numbers[1]
    return numbers[0] - numbers[1]


def test_the_held_out_test_set_has_at_least_300_questions_and_a_validation_set_beside_it():
    assert len(read("test.jsonl")) >= 300
    assert len(read("validation.jsonl")) >= 50


def test_no_question_is_in_two_splits_in_any_order_of_its_operands():
    forms = {name: [operands(r["problem"]) for r in read(f"{name}.jsonl")] for name in SPLITS}
    for name, rows in forms.items():
        assert len(set(rows)) == len(rows), f"{name} repeats a question"
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            assert not set(forms[a]) & set(forms[b]), (a, b)
    # the check can fail: a commuted question is the same question to it
    assert operands("What is 7 + 5?") == operands("What is 5 + 7?") != operands("What is 7 - 5?")


def test_the_training_pool_is_drawn_from_the_train_split_and_loads_as_the_recipe_reads_it():
    build = load_script(os.path.join(BENCH, "build.py"))
    pool, train = read("pool.jsonl"), read("train.jsonl")
    assert len(pool) == build.POOL_SIZE and len({r["key"] for r in pool}) == build.POOL_SIZE
    assert {r["key"] for r in pool} <= {r["key"] for r in train}
    assert pool == build.pool_of(train)  # the seeded draw, whatever order the train file is in
    assert build.pool_of(list(reversed(train))) == pool
    for r in pool + train + read("test.jsonl"):
        assert r["prompt"] == [{"role": "user", "content": r["problem"]}]


def test_answers_are_right_and_counts_are_the_screen_s():
    screen = {r["key"]: r for r in read("screen.jsonl")}
    for name in SPLITS:
        for r in read(f"{name}.jsonl"):
            assert int(r["answer"]) == value(r["problem"]), r
            record = screen[r["key"]]
            assert record["problem"] == r["problem"] and record["right"] == r["right_of_16"]
            assert record["rewards"].count("1") == record["right"] and len(record["rewards"]) == 16
    assert sum(len(read(f"{name}.jsonl")) for name in SPLITS) == len(screen)


def test_the_summary_histogram_is_the_screen_s():
    summary = json.load(open(os.path.join(BENCH, "summary.json")))
    counts = Counter(r["right"] for r in read("screen.jsonl"))
    assert summary["right_of_16_histogram"] == [counts[n] for n in range(17)]
    for name in (*SPLITS, "pool"):
        rows = read(f"{name}.jsonl")
        per = Counter(r["right_of_16"] for r in rows)
        assert summary["per_split"][name]["right_of_16_histogram"] == [per[n] for n in range(17)]
