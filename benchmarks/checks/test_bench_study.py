"""The bench study's registered analysis (benchmarks/bench_study/study.py) on hand-built `trl-ada-compare` records
whose answers are known: the area over the token grid, the verdicts with Holm's correction, the secondary endpoints,
and the registered command."""

import numpy as np
import pytest

from tests.helpers import load_script


study = load_script("benchmarks/bench_study/study.py", "bench_study")


def run(scores, tokens=None, validation=None):
    """A record whose questions all score `scores[i]` at its i-th evaluation (every 8k tokens unless `tokens`)."""
    tokens = tokens or [8000 * i for i in range(len(scores))]
    curve = [
        {"step": i, "tokens": t, "items": list(s), "extra_items": list(v)}
        for i, (t, s, v) in enumerate(zip(tokens, scores, validation or scores))
    ]
    return {
        "curve": curve,
        "steps": len(scores) - 1,
        "generated_tokens": tokens[-1],
        "train_seconds": 3600.0,
        "eval_seconds": 360.0,
        "signal": [0.5, 0.25],
    }


def noisy_runs(rng):
    """Runs whose 40 questions score about `level` (SD half a point) at every grid point, drawn from `rng`."""
    return lambda level: run([list(np.clip(level + rng.normal(0, 0.005, 40), 0, 1)) for _ in range(9)])


def flat(value, questions=4, points=9):
    return [[value] * questions] * points


def test_the_area_is_the_trapezoid_mean_over_the_budget_and_needs_the_whole_budget():
    assert list(study.auc_items(run(flat(0.3))["curve"])) == pytest.approx([0.3] * 4)
    ramp = run([[i / 8] * 2 for i in range(9)])  # 0 -> 1 linearly over [0, 64k]: the mean is 1/2
    assert list(study.auc_items(ramp["curve"])) == pytest.approx([0.5, 0.5])
    # Evaluations off the grid are interpolated: a run evaluated at 0 and 64k only has the same area as the ramp.
    sparse = run([[0.0, 0.0], [1.0, 1.0]], tokens=[0, 64000])
    assert list(study.auc_items(sparse["curve"])) == pytest.approx([0.5, 0.5])
    step = run([[0.0], [1.0]] + [[1.0]] * 7)  # 0 at 0, 1 from 8k: the first interval counts half
    assert study.auc_items(step["curve"])[0] == pytest.approx(1 - 0.5 / 8)
    assert study.auc_items(run(flat(0.3, points=8))["curve"]) is None  # stops at 56k


def test_tokens_to_level_and_the_best_checkpoint_by_validation():
    curve = run([[0.1], [0.3], [0.5]])["curve"]
    assert study.tokens_to_level(curve, 0.4) == pytest.approx(12000)  # halfway from 8k (0.3) to 16k (0.5)
    assert study.tokens_to_level(curve, 0.1) == 0.0 and study.tokens_to_level(curve, 0.6) is None
    picked = run([[0.1], [0.9], [0.2]], validation=[[0.2], [0.1], [0.7]])["curve"]
    assert list(study.best_by_validation(picked)) == [0.2]  # the test score where validation peaked


def test_holm_and_the_verdicts():
    adjusted = study.holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})
    assert study.verdict({"mean": 0.1}, 0.01, 0.9) == "ahead" and study.verdict({"mean": -0.1}, 0.01, 0.9) == "behind"
    assert study.verdict({"mean": 0.0}, 0.5, 0.01) == "equivalent"
    assert study.verdict({"mean": 0.0}, 0.5, 0.5) == "no difference measured"


def test_the_primary_endpoint_tells_ahead_equivalent_and_too_few_seeds_apart():
    noisy = noisy_runs(np.random.default_rng(0))
    seeds = list(range(400, 408))

    results = {
        "grpo_n4": {s: noisy(0.30) for s in seeds},
        "balanced": {s: noisy(0.40) for s in seeds},  # 10 points ahead
        "dapo": {s: noisy(0.30) for s in seeds},  # the same: within +-2 points
        "knapsack": {400: noisy(0.30)},  # one seed: the interval cannot say
        "maxrl": {s: run(flat(0.5, 40, 8)) for s in seeds},  # every run stops short of the budget
    }
    report = study.primary(results, seeds)
    arms = report["arms"]
    assert arms["balanced"]["verdict"] == "ahead" and arms["balanced"]["mean"] == pytest.approx(0.10, abs=0.01)
    assert arms["dapo"]["verdict"] == "equivalent" and arms["dapo"]["p_equivalent_holm"] < 0.05
    assert arms["knapsack"]["seeds"] == 1 and arms["knapsack"]["verdict"] != "ahead"
    assert "maxrl" not in arms and report["short"]["maxrl"] == seeds
    assert arms["dapo"]["low"] <= arms["dapo"]["low90"] <= arms["dapo"]["high90"] <= arms["dapo"]["high"]


def test_the_pilot_summary_and_the_seed_count():
    results = {
        "grpo_n4": {300: run(flat(0.3)), 301: run(flat(0.3))},
        "balanced": {300: run(flat(0.33)), 301: run(flat(0.31))},
    }
    summary = study.pilot(results)
    pair = summary["pairs"]["balanced"]
    assert pair["per_seed"] == pytest.approx({300: 0.03, 301: 0.01})
    assert pair["sd"] == pytest.approx(np.std([0.03, 0.01], ddof=1))
    assert summary["runs"]["grpo_n4 300"]["cpu_hours"] == pytest.approx(1.1)
    assert study.seeds_needed(0.001) == 6  # never fewer than 6
    assert study.seeds_needed(0.03) > study.seeds_needed(0.02) > 6  # an SD at the margin: 13 seeds


def test_the_registered_command_runs_the_baseline_first_and_refuses_what_is_not_registered():
    argv = study.command("confirm", arms=["dapo"], seeds=[400])
    arms = [argv[i + 1] for i, a in enumerate(argv) if a == "--arm"]
    assert arms == ["grpo_n4", "dapo"] and argv[argv.index("--max_tokens") + 1] == "64000"
    assert "benchmarks/sampler_bench/test.jsonl" in argv and argv[argv.index("--seeds") + 1] == "400"
    with pytest.raises(ValueError, match="not registered"):
        study.command("confirm", seeds=[300])  # a pilot seed is never reused


def test_the_analysis_writes_the_readme_table_with_every_verdict_and_every_run_it_lacks():
    noisy = noisy_runs(np.random.default_rng(1))
    seeds = list(range(400, 412))

    results = {
        "grpo_n4": {s: noisy(0.30) for s in seeds},
        "balanced": {s: noisy(0.40) for s in seeds},
        "dapo": {s: noisy(0.30) for s in seeds[:-1]},  # seed 411 never ran
        "maxrl": {s: noisy(0.20) for s in seeds} | {300: noisy(0.9)},  # a pilot seed is not analysed
    }
    used, report = study.analyse(results)
    assert 300 not in used["maxrl"] and report["primary"]["arms"]["maxrl"]["seeds"] == 12
    text = study.table(report)
    rows = {line.split(" (")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "ahead" in rows["balanced"] and "`reinforce_ada_choice=balanced`" in rows["balanced"]  # how to select it
    assert "equivalent" in rows["dapo"] and "| 11 |" in rows["dapo"]
    assert "behind" in rows["maxrl"]
    for arm, result in report["primary"]["arms"].items():
        assert study.interval(result) in rows[arm]  # the mean and 95% interval the verdict came from, in points
    assert study.interval(report["primary"]["arms"]["balanced"]).startswith("+10.")
    missing = [line for line in text.splitlines() if line.startswith("- not analysed")]
    assert "- not analysed: dapo, seeds [411]" in missing
    assert any(line.startswith("- not analysed: knapsack") for line in missing)  # registered, no record
