"""The benchmark scripts still run against the package, at toy sizes (their numbers come from full runs, not here)."""

import importlib.util
import json
import os

import pytest
import yaml

pytestmark = pytest.mark.slow

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(BENCHMARKS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tables(text):
    return [line for line in text.splitlines() if line.startswith("|")]


def test_learning_benchmark_matches_grpo_samples_and_rerenders(tmp_path, capsys):
    learning = load("learning")
    with open(learning.DEFAULT_RECIPE) as f:
        recipe = yaml.safe_load(f)
    recipe.update(per_device_train_batch_size=8, max_completion_length=8, synthetic_num_examples=64)  # 2 prompts/step
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    out = tmp_path / "run"
    assert learning.main(["--config", str(tmp_path / "recipe.yaml"), "--output_dir", str(out), "--steps", "2",
                          "--eval_every", "2", "--seeds", "0", "--eval_examples", "8", "--warm_start_steps", "2",
                          "--plot", str(tmp_path / "a.png")]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((out / "learning.json").read_text())
    runs = {r["method"]: r for r in saved["runs"]}
    assert set(runs) == {"grpo", "ada_pos", "ada_balance"} and saved["steps"] == 2

    most = max(sum(runs[m]["generated"]) for m in ("ada_pos", "ada_balance"))
    for method in ("ada_pos", "ada_balance"):
        assert len(runs[method]["round1_reward"]) == 2
        assert all(g >= 2 * 8 for g in runs[method]["generated"])  # every step: at least one round of M=8, 2 prompts
    # GRPO trains on, in whole evaluation intervals, until it has generated as much as the costliest Ada run
    grpo_steps = len(runs["grpo"]["generated"])
    assert runs["grpo"]["generated"] == [8.0] * grpo_steps and sum(runs["grpo"]["generated"]) >= most
    assert grpo_steps % 2 == 0
    assert grpo_steps == 2 or (grpo_steps - 2) * 8 < most  # and not a whole interval more than needed
    for run in runs.values():
        assert [s for s, _ in run["held_out"]][0] == 2 and all(0 <= a <= 1 for _, a in run["held_out"])
        assert len(run["wall_clock"]) == len(run["generated"])
    assert "### Equal steps" in printed and "### GRPO at the same cost" in printed
    assert (tmp_path / "a.png").stat().st_size > 0

    assert learning.main(["--from_json", str(out / "learning.json"), "--plot", str(tmp_path / "b.png")]) == 0
    assert tables(capsys.readouterr().out) == tables(printed)


def test_step_time_benchmark_runs(tmp_path, capsys):
    assert load("step_time").main(["--steps", "1", "--prompts", "2", "--plot", str(tmp_path / "s.png")]) == 0
    rows = [r for r in tables(capsys.readouterr().out) if "Trainer" in r]
    assert len(rows) == 4 and (tmp_path / "s.png").exists()


def test_sampling_efficiency_benchmark_runs(tmp_path, capsys):
    load("sampling_efficiency").main(["--num-prompts", "300", "--batch-size", "32",
                                      "--output", str(tmp_path / "e.png")])
    printed = capsys.readouterr().out
    assert "GRPO n=4" in printed and "Ada balanced" in printed and (tmp_path / "e.png").exists()


def test_reward_throughput_benchmark_runs(tmp_path, capsys):
    load("reward_throughput").main(["--num-completions", "20", "--batch-size", "10", "--repeats", "1",
                                    "--output", str(tmp_path / "r.png")])
    rows = tables(capsys.readouterr().out)
    assert len(rows) == 5 and "adversarial" in rows[-1] and (tmp_path / "r.png").exists()
