"""`trl-ada-compare` end to end at toy size, and the paired bootstrap it reports with (`trl_ada.cli.paired`)."""

import json
import os
import warnings

import pytest

from tests.helpers import ROOT, documented_commands, launch_env
from trl_ada.cli import paired
from trl_ada.cli.compare import main as compare_main


def length_reward(completions, **kwargs):
    """A reward the tiny untrained model can move: longer answers score more (1 at 8 characters)."""
    return [min(len(c[-1]["content"]), 8) / 8 for c in completions]


RECIPE = """model_name_or_path: tiny
dataset_name: synthetic
synthetic_num_examples: 64
reward_funcs: [tests.cli.test_compare.length_reward]
num_generations: 4
per_device_train_batch_size: 8
max_completion_length: 8
learning_rate: 1.0e-3
use_cpu: true
bf16: false
round_repeat: 4
max_rounds: 2
positive_threshold: 0.5
"""


def grpo_against_balanced(recipe, out, max_steps: int, eval_every: int, eval_k: int) -> list[str]:
    """trl-ada-compare's argv for GRPO against balanced on seeds 0 and 1, six held-out questions."""
    return [
        *("--config", str(recipe), "--arm", "grpo", "sampler=grpo"),
        *("--arm", "balanced", "reinforce_ada_choice=balanced", "--seeds", "0", "1"),
        *("--max_steps", str(max_steps), "--eval_every", str(eval_every), "--eval_examples", "6"),
        *("--eval_min_examples", "6", "--eval_fraction", "0.2", "--eval_k", str(eval_k), "--output_dir", str(out)),
    ]


@pytest.mark.slow
def test_compare_pairs_seeds_counts_every_completion_and_resumes(tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "compare"
    argv = grpo_against_balanced(recipe, out, max_steps=2, eval_every=1, eval_k=2) + ["--eval_extra_split", "train"]
    report = compare_main(argv)
    results = {(r["arm"], r["seed"]): r for r in (json.load(open(p)) for p in (out / "results").glob("*.json"))}
    assert set(results) == {(arm, seed) for arm in ("grpo", "balanced") for seed in (0, 1)}
    for seed in (0, 1):  # paired: the same initial weights and held-out questions, so the same score at step 0
        assert results[("grpo", seed)]["curve"][0]["items"] == results[("balanced", seed)]["curve"][0]["items"]
    for record in results.values():
        assert [p["step"] for p in record["curve"]] == [0, 1, 2] and record["steps"] == 2
        assert len(record["signal"]) == 2 and all(0.0 <= x <= 1.0 for x in record["signal"])  # one share a step
        assert len(record["curve"][0]["items"]) == record["held_out_questions"] == 6
        assert "avg@k" in record["curve"][0] and "avg@k" in record["curve"][-1]
    # every generated completion counted: GRPO makes 8 a step; the rounds make 8 or 16 per prompt-pair and step
    assert all(results[("grpo", s)]["generated_completions"] == 16 for s in (0, 1))
    assert all(16 <= results[("balanced", s)]["generated_completions"] <= 2 * 2 * 2 * 4 * 2 for s in (0, 1))
    assert report["cost"]["grpo"]["signal_share"] == pytest.approx(
        sum(x for s in (0, 1) for x in results[("grpo", s)]["signal"]) / 4
    )
    arm = report["arms"]["balanced"]
    assert arm["seeds"] == [0, 1] and [row["step"] for row in arm["equal_steps"]] == [0, 1, 2]
    assert arm["equal_steps"][0]["mean"] == 0.0  # step 0: the same model on both sides of every pair
    assert arm["equal_completions"]["completions"] == [16, 16]  # where both runs of a seed have generated as many
    # the trainer's own count, tokens too: the report's equal-tokens axis stops where the thriftier run of a seed did
    assert arm["equal_tokens"]["tokens"] == [
        min(results[(a, s)]["generated_tokens"] for a in ("grpo", "balanced")) for s in (0, 1)
    ]
    assert all(
        r["curve"][-1]["tokens"] == r["generated_tokens"] > r["generated_completions"] for r in results.values()
    )
    # --eval_extra_split: a second held-out set scored at every evaluation, reported beside the comparison
    assert all(0 <= p["extra_greedy"] <= 1 for r in results.values() for p in r["curve"])
    assert all(
        p["extra_greedy"] == sum(p["extra_items"]) / len(p["extra_items"])  # per question too, to pair them
        for r in results.values()
        for p in r["curve"]
    )
    assert {"extra_before", "extra_after"} <= set(report["cost"]["balanced"])
    printed = capsys.readouterr().out
    assert "The second held-out set" in printed
    assert (
        "| balanced | 2 |" in printed and "no difference measured" in printed and "equal generated tokens" in printed
    )
    assert (out / "compare.png").stat().st_size > 0 and (out / "report.json").exists()

    # Resumable: a rerun trains nothing and recomputes the same report from the results.
    stamp = {p: p.stat().st_mtime_ns for p in (out / "results").glob("*.json")}
    again = compare_main(argv)
    assert {p: p.stat().st_mtime_ns for p in (out / "results").glob("*.json")} == stamp
    assert "0 runs to train (4 already" in capsys.readouterr().out
    assert again == json.loads((out / "report.json").read_text()) or again["arms"].keys() == report["arms"].keys()


def test_the_report_compares_at_equal_generated_completions_and_tokens(capsys, tmp_path):
    """Each seed is compared where both its runs have generated as much, on each cost axis: here the arm is a point
    ahead at every evaluation per completion, but spends 4 times the tokens per completion, so at equal tokens it
    is compared with the baseline's later, better scores and falls behind."""
    from trl_ada.cli.compare import compare, plot, print_report

    def run(arm, seed, tokens_per_completion, offset):
        curve = [
            {
                "step": step,
                "samples": 8 * step,
                "tokens": 8 * step * tokens_per_completion,
                "items": [min(1.0, 0.1 * step + offset + 0.01 * q) for q in range(5)],
            }
            for step in range(6)
        ]
        for point in curve:
            point["greedy"] = sum(point["items"]) / 5
        return {
            "arm": arm,
            "seed": seed,
            "steps": 5,
            "curve": curve,
            "generated_completions": 40,
            "generated_tokens": 40 * tokens_per_completion,
            "trained_completions": 40,
            "train_seconds": 1.0,
        }

    results = {
        "grpo": {s: run("grpo", s, 10, 0.0) for s in (0, 1)},
        "long": {s: run("long", s, 40, 0.01 * (s + 1)) for s in (0, 1)},
    }
    report = compare(results, ["grpo", "long"])
    arm = report["arms"]["long"]
    assert arm["equal_completions"]["completions"] == [40, 40] and arm["equal_completions"]["verdict"] == "ahead"
    assert arm["equal_tokens"]["tokens"] == [400, 400]  # the baseline's whole run; the arm's first 10 completions
    assert arm["equal_tokens"]["verdict"] == "behind" and arm["equal_tokens"]["mean"] < 0
    assert (arm["tokens_per_step"], arm["baseline_tokens_per_step"]) == (320.0, 80.0)
    assert report["cost"]["long"]["generated_tokens_per_step"] == 320.0
    print_report(report)
    printed = capsys.readouterr().out
    assert "equal generated tokens" in printed and "behind at 400-400" in printed
    plot(results, ["grpo", "long"], str(tmp_path / "compare.png"))
    assert (tmp_path / "compare.png").stat().st_size > 0


def test_arm_specs_are_checked():
    with pytest.raises(ValueError, match="field=value"):
        compare_main(["--config", "x.yaml", "--arm", "a", "oops", "--max_steps", "1"])
    with pytest.raises(ValueError, match="names must differ"):
        compare_main(["--config", "x.yaml", "--arm", "a", "--arm", "a", "--max_steps", "1"])


def test_paired_difference_resamples_seeds_and_questions():
    ahead = paired.paired_difference([[1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    assert ahead["verdict"] == "ahead" and ahead["mean"] == 0.75 and 0 < ahead["low"] <= 0.75 <= ahead["high"] <= 1
    assert (ahead["seeds"], ahead["questions"]) == (3, 4)
    level = paired.paired_difference([[1.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 1.0]])
    assert level["verdict"] == paired.NO_DIFFERENCE and level["low"] < 0 < level["high"] and level["mean"] == 0.0
    assert paired.paired_difference([[-1.0, -1.0]])["verdict"] == "behind"
    weighted = paired.paired_difference([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], weights=[2.0, 1.0, 1.0])
    assert weighted["mean"] == 0.5 and weighted["low"] <= 0.5 <= weighted["high"]  # the first question counts twice
    assert paired.describe(ahead).endswith("ahead") and "no difference measured" in paired.describe(level)
    # Equivalence (two one-sided tests): a difference held tightly near 0 lies inside a margin of 0.5, not of 0.001;
    # one held near 0.75 is outside a margin of 0.5.
    tight = [[0.01, -0.01, 0.02, 0.0]] * 6
    assert paired.paired_difference(tight, margin=0.5)["p_equivalent"] == 0.0
    assert paired.paired_difference(tight, margin=0.001)["p_equivalent"] > 0.05
    assert paired.paired_difference([[0.8, 0.7]] * 3, margin=0.5)["p_equivalent"] == 1.0
    assert "p_equivalent" not in ahead
    curve = [{"samples": 0, "items": [0.0, 1.0]}, {"samples": 10}, {"samples": 20, "items": [1.0, 1.0]}]
    assert list(paired.interpolate_items(curve, "samples", "items", 5)) == [0.25, 1.0]
    assert paired.interpolate_items(curve, "samples", "items", 30) is None


def test_the_evaluation_before_training_is_scored_once_per_model_and_read_back_exactly(tiny_model, tmp_path):
    """HeldOutScore(cache_dir=...): a reuse call keys its scores by the model's weights and every setting they depend
    on; a second call with the same key reads them (shown by planting other scores under the key), another model or
    setting scores afresh, and a call without reuse never reads the cache."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.cli.compare import HeldOutScore

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    held = Dataset.from_list([{"prompt": [{"role": "user", "content": f"question {i}"}]} for i in range(3)])
    cache = tmp_path / "eval_cache"
    score = HeldOutScore(tokenizer, held, [length_reward], None, 8, 1234, str(cache))
    fresh = score(model, reuse=True)
    [entry] = cache.glob("*.json")
    assert json.loads(entry.read_text()) == fresh == score(model)  # the same noise: cache or not, the same scores
    entry.write_text(json.dumps([7.0, 7.0, 7.0]))  # plant other scores: a hit must return them
    assert score(model, reuse=True) == [7.0, 7.0, 7.0] and score(model) == fresh
    assert score(model, k=2, temperature=1.0, reuse=True) != [7.0, 7.0, 7.0]  # another setting: another key

    def zero_reward(completions, **kwargs):
        return [0.0] * len(completions)

    zero_reward.__name__ = zero_reward.__qualname__ = length_reward.__qualname__  # same name, other code
    other = HeldOutScore(tokenizer, held, [zero_reward], None, 8, 1234, str(cache))
    assert other(model, reuse=True) == [0.0, 0.0, 0.0]
    with torch.no_grad():
        model.model.norm.weight.add_(1.0)  # another model
    assert score(model, reuse=True) != [7.0, 7.0, 7.0] and len(list(cache.glob("*.json"))) == 4


def test_runs_starting_together_score_the_initial_model_once(tiny_model, tmp_path):
    """Runs that start at once (a parallel comparison's first wave) wait for the first to score the model they all
    start from and read its scores, instead of each scoring it at the same time."""
    import threading
    import time

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.cli.compare import HeldOutScore

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    held = Dataset.from_list([{"prompt": [{"role": "user", "content": f"question {i}"}]} for i in range(3)])
    scored, results = [], {}

    models = {name: AutoModelForCausalLM.from_pretrained(tiny_model) for name in ("a", "b")}  # the same weights

    def run(name):
        model = models[name]
        score = HeldOutScore(tokenizer, held, [length_reward], None, 8, 1234, str(tmp_path / "eval_cache"))
        own = score._score

        def slow_score(*args):
            scored.append(name)
            time.sleep(1.0)  # long enough for the other run to arrive while this one scores
            return own(*args)

        score._score = slow_score
        results[name] = score(model, reuse=True)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2  # both ended (an exception in a thread would leave its result out)
    assert len(scored) == 1 and results["a"] == results["b"] and len(results["a"]) == 3


def test_the_deadline_starts_no_run_that_would_end_after_it():
    import time

    from trl_ada.cli.compare import Deadline

    assert all(Deadline(None, 1).may_start() for _ in range(5))
    clock = Deadline(100.0, jobs=2)
    assert clock.may_start() and clock.may_start()  # the first wave starts: nothing is known of a run's length yet
    clock.finished(60.0)
    clock.start = time.time() - 30  # 30 s in, runs take 60 s: one more fits
    assert clock.may_start()
    clock.start = time.time() - 50  # 50 s in: it would end at 110 s
    assert not clock.may_start() and clock.refused == 1
    assert not Deadline(0.0, 4).may_start()  # past the deadline, even the first wave waits
    continued = Deadline(1000.0, jobs=1, continued=True, min_left=100.0)  # cut runs continue: a start is progress
    continued.finished(5000.0)
    continued.start = time.time() - 800  # 200 s left: the run will be cut, and continued next time
    assert continued.may_start()
    continued.start = time.time() - 950  # 50 s left: too little to do anything but start and stop
    assert not continued.may_start()


@pytest.mark.slow
def test_a_deadline_cuts_a_run_where_it_is_and_a_rerun_continues_it(tmp_path, capsys):
    """A run still training at the deadline stops after the step in hand, kept as cut (its evaluations count at the
    steps it reached; the cut itself, off the evaluation grid, is not evaluated: the run's end will be) with a
    checkpoint; a rerun continues it from there into the run an uncut one is: the same evaluations, rewards and
    counts. --max_completions stops every arm at the same
    generation budget."""
    import time

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "compare"
    argv = grpo_against_balanced(recipe, out, max_steps=3, eval_every=2, eval_k=0)
    compare_main(argv + ["--only", "grpo", "1", "--stop_at", repr(time.time())])  # the deadline has passed
    cut = json.loads((out / "results" / "grpo-seed1.json").read_text())
    assert cut["cut"] and cut["stopped"] == "deadline" and cut["steps"] == 1 and cut["max_steps"] == 3
    assert [p["step"] for p in cut["curve"]] == [0] and cut["train_seconds"] > 0  # no evaluation at the cut
    assert cut["threads"] == 1  # what its seconds are per (--threads, as a cost table must know)
    assert os.path.isdir(out / "runs" / "grpo-seed1" / "checkpoint-1")  # though the comparison saves nothing else
    with pytest.raises(ValueError, match="continue it with --max_steps 3"):  # not silently another run
        compare_main(
            [
                *argv[: argv.index("--max_steps") + 1],
                "4",
                *argv[argv.index("--max_steps") + 2 :],
                "--only",
                "grpo",
                "1",
            ]
        )
    for arm in ("grpo", "balanced"):
        compare_main(argv + ["--only", arm, "0"])
    compare_main(argv + ["--only", "balanced", "1"])
    report = compare_main(argv + ["--report_only"])
    rows = {row["step"]: row["seeds"] for row in report["arms"]["balanced"]["equal_steps"]}
    assert rows == {0: 2, 2: 1, 3: 1}  # seed 1's baseline was cut at step 1
    # ... before any evaluation after step 0: at equal cost it would add exactly 0, so it waits until it goes on
    assert len(report["arms"]["balanced"]["equal_completions"]["completions"]) == 1
    assert report["cost"]["grpo"]["cut"] == 1 and report["cost"]["grpo"]["trained_per_step"] == 8
    assert report["cost"]["balanced"]["generated_per_step"] >= 16  # M=4 for each of 2 prompts, at least one round
    assert "| grpo | 2 (1) |" in capsys.readouterr().out

    compare_main(argv + ["--keep_cut"])  # a job with a hard time limit keeps the cut run: nothing to train
    assert "0 runs to train (4 already" in capsys.readouterr().out
    report = compare_main(argv)  # the rerun continues the cut run, and only it
    printed = capsys.readouterr().out
    assert "1 runs to train (3 already" in printed and "continuing from the cut at step 1" in printed
    again = json.loads((out / "results" / "grpo-seed1.json").read_text())
    assert not again["cut"] and again["steps"] == 3 and again["resumed_at"] == [1]
    assert not list((out / "runs" / "grpo-seed1").glob("checkpoint-*"))  # finished: its checkpoint is removed
    compare_main(argv[:-1] + [str(tmp_path / "uncut"), "--only", "grpo", "1"])
    whole = json.loads((tmp_path / "uncut" / "results" / "grpo-seed1.json").read_text())
    assert [(p["step"], p["samples"], p["tokens"], p["items"]) for p in again["curve"]] == [
        (p["step"], p["samples"], p["tokens"], p["items"]) for p in whole["curve"]
    ]
    assert again["reward"] == whole["reward"] and again["generated_tokens"] == whole["generated_tokens"]
    assert again["signal"] == whole["signal"] and len(again["signal"]) == 3
    assert whole["resumed_at"] == [] and again["train_seconds"] > cut["train_seconds"]
    assert again["eval_seconds"] > cut["eval_seconds"] > 0  # the cut part's evaluations are counted, not dropped
    # generation time is a part of training time, and a continued run's clock goes on from its cut's
    assert (
        0 < cut["generation_seconds"] < cut["train_seconds"]
        and again["generation_seconds"] > cut["generation_seconds"]
    )
    assert [row["seeds"] for row in report["arms"]["balanced"]["equal_steps"]] == [2, 2, 2]

    final = (
        tmp_path / "final"
    )  # --keep_cut (a job with a hard time limit): the cut is final, scored greedily, not saved
    compare_main(
        argv[: argv.index("--eval_k") + 1]
        + ["1"]
        + argv[argv.index("--eval_k") + 2 : -1]
        + [str(final), "--only", "grpo", "1", "--keep_cut", "--stop_at", repr(time.time())]
    )
    kept = json.loads((final / "results" / "grpo-seed1.json").read_text())
    assert kept["cut"] and kept["steps"] == 1 and [p["step"] for p in kept["curve"]] == [0, 1]
    assert "avg@k" in kept["curve"][0] and "avg@k" not in kept["curve"][1] and "greedy" in kept["curve"][1]
    assert not list((final / "runs" / "grpo-seed1").glob("checkpoint-*"))

    budget = tmp_path / "budget"
    compare_main(argv[:-1] + [str(budget), "--only", "grpo", "0", "--max_completions", "16"])
    stopped = json.loads((budget / "results" / "grpo-seed0.json").read_text())
    assert stopped["stopped"] == "max_completions" and not stopped["cut"]
    assert stopped["steps"] == 2 and stopped["generated_completions"] == 16  # 8 a step: the budget is met at step 2


def test_a_final_cut_stops_early_enough_for_its_evaluation():
    """With --keep_cut a cut is evaluated where it stops, within the deadline: training stops 1.5 times the last grid
    evaluation's duration before it, so that the evaluation ends before the call does and the record is kept. A cut that will be continued is not evaluated, so it trains up to the deadline."""
    import time

    from transformers import TrainerControl, TrainerState

    from trl_ada.cli.compare import Progress

    def step(progress, global_step=5):
        state, control = TrainerState(), TrainerControl()
        state.global_step, state.max_steps = global_step, 40
        progress._point = lambda *args, **kwargs: None  # the stopping rule alone: no model to score here
        progress.on_step_end(None, state, control)
        return progress.stopped, control.should_training_stop, control.should_save

    def progress(stop_in, estimate, continue_cut):
        p = Progress(
            score=None, every=10, eval_k=4, label="x", stop_at=time.time() + stop_in, continue_cut=continue_cut
        )
        p.count, p.started, p.eval_estimate = None, time.time(), estimate
        p.training_seconds = lambda: 1.0
        return p

    assert step(progress(80.0, 60.0, continue_cut=False)) == ("deadline", True, False)  # 90 s of scoring needed
    assert step(progress(80.0, 60.0, continue_cut=True)) == (None, False, False)  # continued: trains on
    assert step(progress(80.0, 30.0, continue_cut=False)) == (None, False, False)  # 45 s needed: trains on
    assert step(progress(80.0, None, continue_cut=False)) == (None, False, False)  # nothing measured yet
    assert step(progress(-1.0, None, continue_cut=True)) == ("deadline", True, True)  # continued: checkpointed


def test_runs_in_parallel_get_their_own_master_port(monkeypatch):
    """Two runs with a colocated vLLM engine each set up a torch.distributed group; with accelerate's default port
    (29500) for both, one failed with EADDRINUSE (the hard-set pilot, --jobs 2 --vllm). Every run at once gets its
    own free port."""
    import argparse
    import socket
    import subprocess
    import threading

    from trl_ada.cli import compare

    ports = compare.free_ports(3)
    assert len(set(ports)) == 3
    for port in ports:  # free: each can be bound
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    started = []
    together = threading.Barrier(2, timeout=30)  # a run ends only once another runs beside it: --jobs 2 at once

    def run(command, env):
        started.append(env["MASTER_PORT"])
        together.wait()
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(subprocess, "run", run)
    arms = [compare.Arm("a"), compare.Arm("b")]
    args = argparse.Namespace(threads=1, jobs=2, stop_at=None)
    failed = compare.run_parallel(
        [], [(arm, seed) for seed in (0, 1) for arm in arms], args, compare.Deadline(None, 2)
    )
    assert failed == [] and len(started) == 4
    assert started[0] != started[1] and started[2] != started[3]  # the runs that ran together


def test_runs_in_parallel_start_no_run_past_the_deadline_and_name_the_failed(monkeypatch):
    """Under --deadline_s a worker asks the clock when it would start a run: a run that failed says nothing of how
    long runs take, and once the runs that ended say the next would end past the deadline, the rest do not start.
    The failed run is named."""
    import argparse
    import subprocess

    from trl_ada.cli import compare

    now = [0.0]
    monkeypatch.setattr(compare.time, "time", lambda: now[0])
    ran = []

    def run(command, env):
        ran.append(command[-2:])
        fails = command[-2:] == ["a", "0"]
        now[0] += 1.0 if fails else 60.0  # a failed run ends at once; a run trains for 60 s
        return subprocess.CompletedProcess(command, 1 if fails else 0)

    monkeypatch.setattr(subprocess, "run", run)
    clock = compare.Deadline(100.0, jobs=1)
    args = argparse.Namespace(threads=1, jobs=1, stop_at=None)
    pending = [(compare.Arm(name), seed) for seed in (0, 1) for name in ("a", "b")]
    assert compare.run_parallel([], pending, args, clock) == ["a seed 0"]
    # 61 s in, runs take 60 s: the seed-1 runs would end past 100 s
    assert ran == [["a", "0"], ["b", "0"]] and clock.durations == [60.0] and clock.refused == 2


def test_runs_one_after_another_use_a_free_port_not_accelerates_default(monkeypatch):
    """--jobs 1 beside another comparison: both took accelerate's default MASTER_PORT (29500) and the second failed
    with EADDRINUSE (the hard-set pilot). Unset, the serial runs get a port free now, and the caller's environment is
    left as it was; a MASTER_PORT the caller set is kept."""
    import argparse
    import socket

    from trl_ada.cli import compare

    seen = []
    monkeypatch.setattr(compare, "run_one", lambda args, arm, seed: seen.append(os.environ.get("MASTER_PORT")))
    args = argparse.Namespace(threads=1, jobs=1, stop_at=None)
    pending = [(compare.Arm("a"), 0), (compare.Arm("a"), 1)]
    monkeypatch.delenv("MASTER_PORT", raising=False)
    compare.run_serial(pending, args, compare.Deadline(None, 1))
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0] not in (None, "29500")
    with socket.socket() as s:  # free when chosen: nothing else holds it now
        s.bind(("127.0.0.1", int(seen[0])))
    assert "MASTER_PORT" not in os.environ
    monkeypatch.setenv("MASTER_PORT", "29517")
    seen.clear()
    compare.run_serial(pending, args, compare.Deadline(None, 1))
    assert seen == ["29517", "29517"] and os.environ["MASTER_PORT"] == "29517"


def failing_reward(completions, **kwargs):
    raise RuntimeError("a reward that fails at its first call")


def test_every_arm_and_flag_is_checked_before_the_first_run(tmp_path):
    """A typo in the last arm's overrides, a recipe that is not there, a flag out of range: refused before any run
    trains, naming the arm (or the flag) and, for a typo, the closest field."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "compare"
    common = ["--config", str(recipe), "--seeds", "0", "--max_steps", "1", "--output_dir", str(out)]
    with pytest.raises(ValueError, match=r"--arm bad .*'max_roundz' in the command line \(did you mean 'max_rounds'"):
        compare_main([*common, "--arm", "grpo", "sampler=grpo", "--arm", "bad", "max_roundz=3"])
    with pytest.raises(ValueError, match="--arm other: its recipe .*missing.yaml' is not a file"):
        compare_main([*common, "--arm", "grpo", "--arm", "other", str(tmp_path / "missing.yaml")])
    with pytest.raises(ValueError, match="--eval_every 0: must be at least 1"):
        compare_main([*common, "--arm", "grpo", "--eval_every", "0"])
    with pytest.raises(ValueError, match="--eval_fraction 1.5: must lie strictly between 0 and 1"):
        compare_main([*common, "--arm", "grpo", "--eval_fraction", "1.5"])
    assert not out.exists()  # nothing ran, nothing was written


def test_arms_that_build_the_same_run_are_named_before_any_run(tmp_path):
    """An override its sampler makes moot (reinforce_ada_choice, max_rounds under a recipe's `sampler: grpo`) leaves an
    arm the baseline's twin: the check names the twins and the sampler; an arm that differs is not named."""
    from trl_ada.cli.compare import Arm, build_parser, check_inputs

    recipe = tmp_path / "grpo.yaml"
    recipe.write_text(RECIPE + "sampler: grpo\n")
    args = build_parser().parse_args(
        [
            *("--config", str(recipe), "--arm", "grpo", "--arm", "balanced", "reinforce_ada_choice=balanced"),
            *("--arm", "ada", "sampler=reinforce_ada", "reinforce_ada_choice=balanced"),
            *("--arm", "rounds6", "max_rounds=6", "--seeds", "0", "--max_steps", "1"),
            *("--eval_min_examples", "6", "--eval_fraction", "0.2", "--output_dir", str(tmp_path / "compare")),
        ]
    )
    args.set_argv = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_inputs(args, [Arm.parse(tokens) for tokens in args.arm])
    twins = [str(w.message) for w in caught if "build the same configuration" in str(w.message)]
    assert (
        len(twins) == 1
        and twins[0].startswith("--arm grpo and --arm balanced, rounds6 build the same")
        and ("sampler='grpo'" in twins[0])
    ), twins


@pytest.mark.slow
def test_a_failed_run_in_parallel_still_leaves_the_report_of_the_others(tmp_path, monkeypatch):
    """--jobs 2: one arm's run fails (its reward raises at the first call); the other's result and the report are
    written before the command fails, naming the run to retry."""
    monkeypatch.setenv("PYTHONPATH", launch_env()["PYTHONPATH"])  # the runs import this module's reward
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "compare"
    with pytest.raises(RuntimeError, match=r"failed \(rerun to retry them\): \['bad seed 0'\]"):
        compare_main(
            [
                "--config",
                str(recipe),
                "--arm",
                "grpo",
                "multiround_adaptive_downsampling=false",
                "--arm",
                "bad",
                "reward_funcs=tests.cli.test_compare.failing_reward",
                "--seeds",
                "0",
                "--max_steps",
                "1",
                "--eval_every",
                "1",
                "--eval_examples",
                "4",
                "--eval_min_examples",
                "4",
                "--eval_fraction",
                "0.2",
                "--eval_k",
                "0",
                "--jobs",
                "2",
                "--output_dir",
                str(out),
            ]
        )
    assert (out / "results" / "grpo-seed0.json").exists() and not (out / "results" / "bad-seed0.json").exists()
    assert json.loads((out / "report.json").read_text())["cost"]["grpo"]["runs"] == 1


def test_runs_scored_on_other_held_out_sets_are_refused_by_name(tmp_path):
    """A comparison's folder holding runs of another design (the GPU kit's dry run met the committed GPU runs: 4
    questions against 131) fails with the reason and the fix, not a numpy broadcast error in the report."""
    from trl_ada.cli.compare import load_results

    (tmp_path / "results").mkdir()
    for arm, n in (("a", 4), ("b", 131)):
        record = {"arm": arm, "seed": 0, "curve": [{"step": 0, "items": [0.0] * n}]}
        (tmp_path / "results" / f"{arm}-seed0.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"\[4, 131\] questions.*own --output_dir"):
        load_results(str(tmp_path))
    (tmp_path / "results" / "b-seed0.json").unlink()
    assert list(load_results(str(tmp_path))) == ["a"]


def on_token_grid(argv: list[str], every_tokens: int) -> list[str]:
    """`argv` with its --eval_every replaced by --eval_every_tokens."""
    at = argv.index("--eval_every")
    return [*argv[:at], "--eval_every_tokens", str(every_tokens), *argv[at + 2 :]]


def grid_evaluations(record: dict) -> dict[int, dict]:
    """Grid point -> the evaluation taken for it; each grid point once (a second would fail here)."""
    points = [(g, point) for point in record["curve"] for g in point.get("grid_tokens", [])]
    assert len({g for g, _ in points}) == len(points), f"a grid point evaluated twice: {[g for g, _ in points]}"
    return dict(points)


def assert_on_the_token_grid(record: dict, every: int) -> None:
    """Every grid point up to what the run generated is evaluated exactly once, at the first step whose logged
    sampling/generated_tokens_total is at or past it, and that evaluation holds the logged count of its step."""
    logged = [0, *record["generated_tokens_by_step"]]  # by step; nothing generated before training
    assert len(logged) == record["steps"] + 1 and logged[-1] == record["generated_tokens"]
    grid = grid_evaluations(record)
    assert sorted(grid) == list(range(0, record["generated_tokens"] + 1, every))  # none skipped
    for g, point in grid.items():
        assert point["step"] == next(s for s, tokens in enumerate(logged) if tokens >= g), (g, logged)
        assert point["tokens"] == logged[point["step"]]


@pytest.mark.slow
def test_eval_every_tokens_evaluates_at_the_first_step_past_each_grid_point(tmp_path, capsys):
    """--eval_every_tokens 100: every arm is evaluated at the first optimizer step at or past each multiple of 100
    generated tokens (by the trainer's logged count), before training and at the end, and at no other step; the
    report's equal-tokens comparison reads the grid (each seed at the last grid point both runs reached, scored by the
    evaluations taken for it), not an interpolation, and says so."""
    import numpy as np

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "compare"
    argv = on_token_grid(grpo_against_balanced(recipe, out, max_steps=3, eval_every=1, eval_k=0), 100)
    report = compare_main(argv)
    results = {(r["arm"], r["seed"]): r for r in (json.load(open(p)) for p in (out / "results").glob("*.json"))}
    assert len(results) == 4
    skipped = 0
    for record in results.values():
        assert record["eval_every_tokens"] == 100 and record["eval_every"] is None
        assert_on_the_token_grid(record, 100)
        grid_steps = {p["step"] for p in record["curve"] if p.get("grid_tokens")}
        assert [p["step"] for p in record["curve"]] == sorted(grid_steps | {0, 3})  # off the grid: only the end
        skipped += 3 - len(grid_steps - {0} | {3})
    assert skipped > 0  # some step was passed over: a grid of tokens, not of steps
    arm = report["arms"]["balanced"]
    assert arm["equal_tokens"]["method"] == "grid" and arm["equal_tokens"]["every_tokens"] == 100
    for i, seed in enumerate((0, 1)):
        run, base = grid_evaluations(results[("balanced", seed)]), grid_evaluations(results[("grpo", seed)])
        x = max(set(run) & set(base))
        assert arm["equal_tokens"]["tokens"][i] == x > 0
        assert arm["equal_tokens"]["generated"][i] == [run[x]["tokens"], base[x]["tokens"]]
    expected = np.mean(
        [
            np.subtract(
                grid_evaluations(results[("balanced", s)])[x]["items"],
                grid_evaluations(results[("grpo", s)])[x]["items"],
            )
            for s, x in zip((0, 1), arm["equal_tokens"]["tokens"])
        ]
    )
    assert arm["equal_tokens"]["mean"] == pytest.approx(expected)
    rows = {row["tokens"]: row["seeds"] for row in arm["equal_tokens_grid"]}
    assert rows[0] == 2 and all(g % 100 == 0 for g in rows)
    assert json.loads((out / "report.json").read_text())["arms"]["balanced"]["equal_tokens"]["method"] == "grid"
    printed = capsys.readouterr().out
    assert "on the token grid (--eval_every_tokens)" in printed and "on the generated-token grid" in printed

    # The step grid's report is unchanged: interpolated between evaluations, and saying so.
    steps = grpo_against_balanced(recipe, tmp_path / "steps", max_steps=1, eval_every=1, eval_k=0)
    assert compare_main(steps + ["--seeds", "0"])["arms"]["balanced"]["equal_tokens"]["method"] == "interpolated"


def test_eval_every_and_eval_every_tokens_are_one_grid_or_the_other(tmp_path):
    """Both grids at once is refused, naming both flags; without either, the step grid of 5 stays the default."""
    from trl_ada.cli.compare import build_parser, resolve_eval_grid

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "compare"
    argv = grpo_against_balanced(recipe, out, max_steps=1, eval_every=2, eval_k=0)
    with pytest.raises(ValueError, match=r"--eval_every 2 and --eval_every_tokens 100: give one evaluation grid"):
        compare_main(argv + ["--eval_every_tokens", "100"])
    with pytest.raises(ValueError, match="--eval_every_tokens 0: must be at least 1"):
        compare_main(on_token_grid(argv, 0))
    assert not out.exists()
    base = ["--config", "x.yaml", "--arm", "a", "--max_steps", "1"]
    for extra, grid in (
        ([], (5, None)),
        (["--eval_every_tokens", "4000"], (None, 4000)),
        (["--eval_every", "3"], (3, None)),
    ):
        args = build_parser().parse_args(base + extra)
        resolve_eval_grid(args)
        assert (args.eval_every, args.eval_every_tokens) == grid


@pytest.mark.slow
def test_a_cut_run_on_the_token_grid_reports_the_grid_points_it_reached_and_a_rerun_continues_the_grid(
    tmp_path, capsys
):
    """A run cut by a deadline holds the grid points it reached, and the report pairs it there only; a rerun
    continues the grid from the saved records (none evaluated twice, none skipped) into the evaluations of a run never
    cut; continuing it on another grid is refused."""
    import time

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "compare"
    argv = on_token_grid(grpo_against_balanced(recipe, out, max_steps=3, eval_every=1, eval_k=0), 50)
    compare_main(argv + ["--only", "grpo", "0", "--stop_at", repr(time.time())])  # the deadline has passed
    cut = json.loads((out / "results" / "grpo-seed0.json").read_text())
    assert cut["cut"] and cut["steps"] == 1
    assert_on_the_token_grid(cut, 50)
    reached = sorted(grid_evaluations(cut))
    assert len(reached) >= 2  # step 1 passed a grid point: evaluated there, though the run was cut
    compare_main(argv + ["--only", "balanced", "0"])
    report = compare_main(argv + ["--seeds", "0", "--report_only"])
    arm = report["arms"]["balanced"]
    assert [
        row["tokens"] for row in arm["equal_tokens_grid"]
    ] == reached  # balanced went further: paired up to the cut
    assert arm["equal_tokens"]["tokens"] == [reached[-1]] and arm["equal_tokens"]["method"] == "grid"

    with pytest.raises(ValueError, match="continue it with --eval_every_tokens 50"):
        at = argv.index("--eval_every_tokens") + 1
        compare_main([*argv[:at], "40", *argv[at + 1 :], "--only", "grpo", "0"])
    compare_main(argv + ["--only", "grpo", "0"])
    assert "continuing from the cut at step 1" in capsys.readouterr().out
    again = json.loads((out / "results" / "grpo-seed0.json").read_text())
    assert not again["cut"] and again["steps"] == 3 and again["resumed_at"] == [1]
    assert_on_the_token_grid(again, 50)
    compare_main(argv[:-1] + [str(tmp_path / "uncut"), "--only", "grpo", "0"])
    whole = json.loads((tmp_path / "uncut" / "results" / "grpo-seed0.json").read_text())
    assert [(p["step"], p["tokens"], p.get("grid_tokens"), p["items"]) for p in again["curve"]] == [
        (p["step"], p["tokens"], p.get("grid_tokens"), p["items"]) for p in whole["curve"]
    ]


def test_the_token_grid_evaluates_at_the_first_step_at_or_past_each_point_and_resumes_after_the_last():
    """The rule alone, on a scripted count: a step that lands exactly on a grid point is evaluated for it, one that
    passes several is evaluated once for all of them, a step that passes none is not evaluated (the end is); a resumed
    run goes on after the last grid point its saved curve holds."""
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    from trl_ada.cli.compare import Progress

    class Score:
        seconds = 0.0

        def __call__(self, model, **kwargs):
            return [1.0]

    def train(progress, tokens_by_step, first=1):
        state, control = TrainerState(), TrainerControl()
        state.max_steps = first + len(tokens_by_step) - 1
        progress.count = SimpleNamespace(completions=0, tokens=0, trained_tokens=0)
        progress.on_train_begin(None, state, control)
        for step, tokens in enumerate(tokens_by_step, start=first):
            state.global_step, progress.count.tokens = step, tokens
            progress.on_step_end(None, state, control)
        return [(p["step"], p["tokens"], p.get("grid_tokens")) for p in progress.curve]

    def progress():
        return Progress(score=Score(), every=None, eval_k=0, label="x", every_tokens=64)

    assert train(progress(), [30, 64, 100, 250, 260, 300]) == [
        (0, 0, [0]),
        (2, 64, [64]),  # exactly on the grid point
        (4, 250, [128, 192]),  # one step past two: one evaluation for both
        (5, 260, [256]),
        (6, 300, None),  # the end, past no grid point
    ]
    resumed = progress()
    resumed.resume(
        {
            "curve": [
                {"step": 0, "tokens": 0, "grid_tokens": [0], "items": [1.0]},
                {"step": 2, "tokens": 64, "grid_tokens": [64], "items": [1.0]},
                {"step": 3, "tokens": 100, "items": [1.0]},
            ],
            "train_seconds": 1.0,
        }
    )
    assert train(resumed, [250, 260, 300], first=4) == [
        (0, 0, [0]),
        (2, 64, [64]),  # the cut's own off-grid evaluation dropped: its end is later
        (4, 250, [128, 192]),
        (5, 260, [256]),
        (6, 300, None),
    ]


@pytest.mark.slow
def test_field_compares_a_users_sampler_with_the_fields_rules_on_the_token_grid(tmp_path, monkeypatch):
    """`--field` and one `--arm` of the user's: every field rule and the user's sampler train on the same seed, GRPO is
    the baseline, and each arm is compared with it at equal generated tokens on the grid."""
    from tests.samplers.test_samplers import docs_example

    code, _ = docs_example()
    (tmp_path / "my_sampler.py").write_text(code)
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "compare"
    argv = [
        *("--config", str(recipe), "--field", "--arm", "mine", "sampler=my_sampler.SkipSolved"),
        *("--seeds", "0", "--max_steps", "1", "--eval_every_tokens", "40", "--eval_examples", "6"),
        *("--eval_min_examples", "6", "--eval_fraction", "0.2", "--eval_k", "0", "--output_dir", str(out)),
    ]
    report = compare_main(argv)
    runs = {json.load(open(p))["arm"] for p in (out / "results").glob("*.json")}
    assert runs == {"grpo", "balanced", "dapo", "knapsack", "retire_solved", "maxrl", "mine"}
    assert set(report["arms"]) == runs - {"grpo"}  # each against the baseline, GRPO
    assert all(report["arms"][arm]["equal_tokens"]["method"] == "grid" for arm in report["arms"])
    with pytest.raises(SystemExit):  # nothing to compare
        compare_main(["--config", str(recipe), "--max_steps", "1", "--output_dir", str(out)])


# ---------------------------------------------------------------------------------------------------------------------
# The comparisons the pages print, as printed: every flag, recipe, override and held-out set passes the checks compare
# makes before its first run (docs/own-task.md's comparison trains in tests/cli/test_user_task.py).


COMPARISONS = documented_commands("trl-ada-compare")


@pytest.mark.parametrize(
    "page, words", [pytest.param(*found, id=f"{found[0]}-{i}") for i, found in enumerate(COMPARISONS)]
)
def test_every_comparison_the_docs_print_passes_the_checks_before_any_run(page, words, tmp_path, monkeypatch):
    from tests.samplers.test_samplers import docs_example
    from trl_ada.cli.compare import parse_command

    if "upper_ada.yaml" in words:
        pytest.skip("docs/own-task.md's comparison runs on the files that page writes: tests/cli/test_user_task.py")
    (tmp_path / "my_sampler.py").write_text(docs_example()[0])  # the user's file samplers.md writes first
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(ROOT)  # the pages' paths are from the root of a clone
    out = tmp_path / "compare"  # the page's --output_dir, moved out of the clone
    words = words + ["--output_dir", str(out)] if "--output_dir" not in words else list(words)
    words[words.index("--output_dir") + 1] = str(out)
    args, arms = parse_command(words)
    assert len(arms) >= 2 and os.path.isfile(args.config)
    assert not (out / "results").exists()  # checked, nothing trained


def test_the_docs_print_the_comparisons_the_test_above_checks():
    pages = {page for page, _ in COMPARISONS}
    assert {"docs/compare.md", "docs/samplers.md"} <= pages and len(COMPARISONS) >= 4
