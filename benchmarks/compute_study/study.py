"""The compute study as plan.md registers it: its arms, seeds and budget (`run`), and its analysis (`analyse`): the
primary endpoint, the secondary endpoints with Holm's correction, the plateau rule, and the plot of held-out
accuracy against generated tokens.

    python benchmarks/compute_study/study.py command confirm             # print the trl-ada-compare command
    python benchmarks/compute_study/study.py run confirm --jobs 2        # the two pairs, seeds 200-207
    python benchmarks/compute_study/study.py run confirm --arms grpo_n4 --seeds 200   # one arm-seed
    python benchmarks/compute_study/study.py status confirm                # which runs are done, cut or to run
    python benchmarks/compute_study/study.py analyse runs/study --out benchmarks/compute_study/study

`run` is `trl-ada-compare` with the registered recipe, flags and arms (a rerun skips finished runs and continues cut
ones); run it from a clone pinned at the plan's commit, with the vLLM environment (`make install-vllm smollm2`).
`analyse` reads a `trl-ada-compare --output_dir`'s results (one JSON per arm and seed), writes `<out>.json` and
`<out>.png` and prints the tables. A comparison whose arms are not both in the folder is reported as not run; a seed whose run stops
short of the window (unfinished, or cut and not yet continued) is left out and named. Every number comes from
`endpoints.py` beside this file (windows, plateau, Holm) and `trl_ada.cli.paired` (the one interval method: the paired
bootstrap over seeds and questions, 4000 replicates).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__":  # a study runs the package of the clone it is in (plan.md: pinned), not an installed copy
    sys.path.insert(0, REPO)

from trl_ada.cli import paired


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the study's own statistics, beside this file
import endpoints  # noqa: E402 (windows, the plateau rule, Holm's correction)

from benchmarks import study_runs  # noqa: E402 (the arms and seeds registered, the runs' status, the pinned clone)
from trl_ada.cli.plotting import pyplot, save
from trl_ada.cli.records import load_results
from trl_ada.cli.report import compare


# What plan.md registers. Changing any of these after the first confirmatory result is a deviation from the plan.
RECIPE = "recipes/SmolLM2-135M-Instruct/hard_grpo.yaml"
SHARED = [
    "dataset_name=benchmarks/compute_study/train.jsonl",
    "use_vllm=true",
    "vllm_mode=colocate",
    "vllm_enable_sleep_mode=false",
    "vllm_importance_sampling_correction=false",
]
# The arms as the selector names them. The runs were made at the plan's commit with the older switches
# (multiround_adaptive_downsampling, sampling_budget, reinforce_ada_est, dynamic_sampling), which select the same
# samplers with the same settings; the recipes now name `sampler: grpo`, which those switches would contradict.
ARMS = {  # name: overrides of the recipe (4 prompts a step throughout: per_device_train_batch_size = 4 x n)
    "grpo_n4": [],
    "budget4": ["sampler=budget", "sampling_budget=4", "prompt_memory=true"],
    "grpo_n8": ["num_generations=8", "per_device_train_batch_size=32"],
    "est_n8": ["sampler=est", "num_generations=8", "per_device_train_batch_size=32"],
    "dapo": ["sampler=dapo"],
    "balanced": ["sampler=reinforce_ada", "reinforce_ada_choice=balanced"],
    "est_n4": ["sampler=est"],
    "positive_focused": ["sampler=reinforce_ada", "reinforce_ada_choice=positive_focused"],
}
STAGES = {  # stage: (arms, the first of them the baseline of trl-ada-compare's own report; seeds; output folder)
    "pilot": (["grpo_n4", "budget4"], [100, 101, 102], "runs/study-pilot"),
    "confirm": (["grpo_n4", "budget4", "grpo_n8", "est_n8"], list(range(200, 208)), "runs/study"),
    "explore": (["grpo_n4", "dapo", "balanced", "est_n4", "positive_focused"], [200], "runs/study"),
}
BUDGET = 64_000  # generated tokens a run
WINDOW = (48_000, 64_000)  # the last quarter of the budget
POINTS = 5  # positions in the window: 48k, 52k, 56k, 60k, 64k
HELD_OUT_TOLERANCE = 0.06  # the plateau rule: the fitted rise across the last quarter, held-out greedy
REWARD_TOLERANCE = 0.08  # and training reward (plan.md: why these)
PRIMARY = ("budget4", "grpo_n4", "items", WINDOW)
SECONDARY = {  # name: (arm, baseline, held-out set, window); Holm over these four
    "est_n8 vs grpo_n8, hard, window": ("est_n8", "grpo_n8", "items", WINDOW),
    "budget4 vs grpo_n4, hard, at the budget": ("budget4", "grpo_n4", "items", (BUDGET, BUDGET)),
    "budget4 vs grpo_n4, easy, window": ("budget4", "grpo_n4", "extra_items", WINDOW),
    "est_n8 vs grpo_n8, easy, window": ("est_n8", "grpo_n8", "extra_items", WINDOW),
}
EXPLORATORY = ("balanced", "positive_focused", "est_n4", "dapo")  # against grpo_n4, hard, window: no verdict
BASELINES = ("grpo_n4", "grpo_n8")  # whose plateau the budget must reach
DESCRIPTIVE = ("equal_completions", "equal_trained_tokens", "equal_gpu_cost")  # each pair, beside equal steps


def comparison(results, arm, baseline, key, window, registered=None):
    """One registered comparison over the seeds both arms ran through the window (the others are named: `short`;
    the `registered` seeds without a record in both arms: `missing`), or why it cannot be read (an arm not run, a
    held-out set not scored per question)."""
    if not results.get(arm) or not results.get(baseline):
        return {"arm": arm, "baseline": baseline, "not_run": True}
    low, high = window
    points = 1 if low == high else POINTS
    runs = list(results[arm].values()) + list(results[baseline].values())
    if not all(key in p for r in runs for p in r["curve"]):
        return {"arm": arm, "baseline": baseline, "not_run": True, "why": f"no per-question {key!r} in the records"}

    seeds = sorted(set(results[arm]) & set(results[baseline]))
    missing = sorted(set(registered or seeds) - set(seeds))  # registered, with no record in one arm or both
    scores = {
        (name, s): endpoints.window_items(results[name][s]["curve"], "tokens", low, high, points, key)
        for name in (arm, baseline)
        for s in seeds
    }  # each run's window, read once
    short = [s for s in seeds if scores[arm, s] is None or scores[baseline, s] is None]  # unfinished or cut
    unpaired = sorted(set(results[arm]) ^ set(results[baseline]))
    done = [s for s in seeds if s not in short]
    if not done:
        return {
            "arm": arm,
            "baseline": baseline,
            "not_run": True,
            "why": f"no seed through the window (short: {short})",
        }
    out = endpoints.window_difference(
        {s: results[arm][s] for s in done},
        {s: results[baseline][s] for s in done},
        "tokens",
        low,
        high,
        points,
        key=key,
    )
    per_seed = [float(np.mean(scores[arm, s] - scores[baseline, s])) for s in done]
    compared = compare(
        {arm: {s: results[arm][s] for s in done}, baseline: {s: results[baseline][s] for s in done}}, [baseline, arm]
    )["arms"][arm]
    by_step = [row for row in compared["equal_steps"] if row["seeds"] == len(done)]  # the last step every pair reached
    # Descriptive, on the hard set (trl-ada-compare's report reads "items"): each pair at equal optimizer steps,
    # generated completions, trained tokens and modelled GPU cost.
    descriptive = {axis: compared.get(axis) for axis in DESCRIPTIVE} if key == "items" else None
    return {
        "arm": arm,
        "baseline": baseline,
        "held_out": key,
        **out,
        "short": short,
        "unpaired": unpaired,
        "missing": missing,
        "descriptive": descriptive,
        "per_seed": per_seed,
        "equal_steps": by_step[-1] if by_step and key == "items" else None,
        "seed_sd": float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else None,
        "resumed": sorted(
            {f"{name}-seed{s}" for name in (arm, baseline) for s in done if results[name][s].get("resumed_at")}
        ),
    }


def analyse(results: dict[str, dict[int, dict]], seeds: list[int] | None = None) -> dict:
    """The registered endpoints from a stage's records (arm -> seed -> record). With `seeds` (the stage's registered
    ones), a record of any other seed is set aside and named (`not_registered`), and each comparison names the
    registered seeds it lacks (`missing`)."""
    not_registered = sorted(
        f"{arm}-seed{s}" for arm, by_seed in results.items() for s in by_seed if seeds is not None and s not in seeds
    )
    if seeds is not None:
        results = {arm: {s: r for s, r in by_seed.items() if s in seeds} for arm, by_seed in results.items()}
    primary = comparison(results, *PRIMARY, registered=seeds)
    secondary = {name: comparison(results, *spec, registered=seeds) for name, spec in SECONDARY.items()}
    # Holm over the registered four: one not (yet) run counts with p = 1, so the family never shrinks
    holm = endpoints.holm({name: 1.0 if c.get("not_run") else c["p"] for name, c in secondary.items()})
    for name, c in secondary.items():
        if not c.get("not_run"):
            c["holm"] = holm[name]
            c["verdict"] = c["verdict"] if holm[name]["rejected"] else paired.NO_DIFFERENCE  # the Holm-adjusted one
    exploratory = {arm: comparison(results, arm, "grpo_n4", "items", WINDOW) for arm in EXPLORATORY}  # seed 200
    for c in exploratory.values():
        if not c.get("not_run"):
            c["verdict"] = "exploratory: no verdict"
    plateaus = {}
    for arm in BASELINES:
        reached = {s: r for s, r in results.get(arm, {}).items() if r["curve"][-1]["tokens"] >= BUDGET}
        named = {
            "short": sorted(set(results.get(arm, {})) - set(reached)),
            "missing": sorted(set(seeds or []) - set(results.get(arm, {}))),
        }  # registered, no record
        if reached:  # a seed whose line cannot be fitted is named in the rule's `unreadable`
            plateaus[arm] = {**endpoints.plateau(reached, BUDGET, HELD_OUT_TOLERANCE, REWARD_TOLERANCE), **named}
        else:
            plateaus[arm] = {"plateaued": None, "not_run": True, **named}
    runs = {
        arm: {
            s: {
                "steps": r["steps"],
                "tokens": r["generated_tokens"],
                "resumed_at": r.get("resumed_at"),
                "cut": bool(r.get("cut")),
                "train_hours": r["train_seconds"] / 3600,
                "eval_hours": r.get("eval_seconds", 0) / 3600,
            }
            for s, r in sorted(by_seed.items())
        }
        for arm, by_seed in sorted(results.items())
    }
    return {
        "plan": {
            "budget": BUDGET,
            "window": WINDOW,
            "points": POINTS,
            "held_out_tolerance": HELD_OUT_TOLERANCE,
            "reward_tolerance": REWARD_TOLERANCE,
        },
        "not_registered": not_registered,
        "primary": primary,
        "secondary": secondary,
        "exploratory": exploratory,
        "plateau": plateaus,
        "runs": runs,
        "cpu_hours": sum(r["train_hours"] + r["eval_hours"] for a in runs.values() for r in a.values()),
    }


def line(name: str, c: dict) -> str:
    if c.get("not_run"):
        return f"| {name} | - | not run{': ' + c['why'] if c.get('why') else ''} | - |"
    holm = f"; Holm p {c['holm']['adjusted']:.3f}" if "holm" in c else ""
    sd = "" if c["seed_sd"] is None else f"; per-seed SD {100 * c['seed_sd']:.1f}"
    notes = f"; resumed: {', '.join(c['resumed'])}" if c["resumed"] else ""
    notes += f"; short of the window, left out: seeds {c['short']}" if c["short"] else ""
    notes += f"; missing: seeds {c['missing']}" if c.get("missing") else ""
    steps = (
        "-" if c["equal_steps"] is None else f"{paired.describe(c['equal_steps'])} at step {c['equal_steps']['step']}"
    )
    return f"| {name} | {len(c['seeds'])} | {paired.describe(c)} (p {c['p']:.3f}{holm}{sd}{notes}) | {steps} |"


def plateau_line(arm: str, p: dict) -> str:
    named = (f" (short of the budget, left out: seeds {p['short']})" if p["short"] else "") + (
        f" (missing: seeds {p['missing']})" if p["missing"] else ""
    )
    if p.get("not_run"):
        return f"Plateau of {arm}: no run reached the budget{named}"

    def rise(value, points):
        return "-" if value is None else f"{100 * value:+.1f} pt" if points else f"{value:+.3f}"

    seeds = ", ".join(
        f"{s}: {rise(r['held_out'], True)} / {rise(r['reward'], False)}" for s, r in p["per_seed"].items()
    )
    bounds = " / ".join(
        "unreadable" if q is None else rise(q["upper"], name == "held_out") for name, q in p["over_seeds"].items()
    )
    verdict = {True: "plateaued", False: "NOT plateaued", None: "unreadable"}[p["plateaued"]]
    unreadable = "; ".join(
        f"{name} line unreadable (fewer than 3 points in the quarter), left out: seeds {seeds_}"
        for name, seeds_ in p["unreadable"].items()
        if seeds_
    )
    return (
        f"Plateau of {arm} at {BUDGET:,} tokens (fitted rise across the last quarter, held-out / reward; "
        f"tolerances +{100 * HELD_OUT_TOLERANCE:.0f} pt / +{REWARD_TOLERANCE}): per seed {seeds}; "
        f"{p['seeds_plateaued']} of {len(p['per_seed'])} seeds within; over resampled seeds, upper 95% "
        f"{bounds}: {verdict}" + (f" ({unreadable})" if unreadable else "") + named
    )


def print_tables(report: dict) -> None:
    before = report["plateau"].get("grpo_n4", {}).get("plateaued") is False
    print(
        f"\nPoints of held-out greedy accuracy, arm minus baseline, mean over generated tokens "
        f"{WINDOW[0]:,}-{WINDOW[1]:,} ({POINTS} positions); 95% bootstrap over seeds and questions (with eight "
        "seeds a percentile bootstrap is about 7% narrower than a t interval over seeds).\n"
    )
    print(
        "| comparison | seeds | at equal generated tokens (the window) | at equal optimizer steps (descriptive) |\n"
        "|---|---:|---|---|"
    )
    print(
        line(
            "PRIMARY budget4 vs grpo_n4, hard, window" + (", BEFORE grpo_n4's plateau" if before else ""),
            report["primary"],
        )
    )
    for name, c in report["secondary"].items():
        print(line(name, c))
    for arm, c in report["exploratory"].items():
        print(line(f"(exploratory) {arm} vs grpo_n4, hard, window", c))
    print(
        "\nDescriptive, hard set, at the last point each pair shares:\n\n"
        "| pair | equal completions | equal trained tokens | equal modelled GPU cost |\n|---|---|---|---|"
    )
    pairs = [report["primary"], report["secondary"]["est_n8 vs grpo_n8, hard, window"]]
    for c in pairs:
        if not c.get("not_run"):
            print(
                f"| {c['arm']} vs {c['baseline']} | "
                + " | ".join(
                    "-" if c["descriptive"][axis] is None else paired.describe(c["descriptive"][axis])
                    for axis in DESCRIPTIVE
                )
                + " |"
            )
    for arm, p in report["plateau"].items():
        print("\n" + plateau_line(arm, p))
    if report["not_registered"]:
        print(f"\nNot registered, set aside: {', '.join(report['not_registered'])}")
    print(f"\nCPU-hours in these records: {report['cpu_hours']:.1f} (runs lost and trained again are not in them)")


def plot(results: dict[str, dict[int, dict]], path: str) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharex=True)
    grid = np.linspace(0, BUDGET, 33)
    for i, (arm, by_seed) in enumerate(sorted(results.items())):
        for ax, key in zip(axes, ("greedy", "extra_greedy")):
            curves = []
            for record in by_seed.values():
                xs = [p["tokens"] for p in record["curve"] if key in p]
                ys = [p[key] for p in record["curve"] if key in p]
                ax.plot(
                    xs,
                    ys,
                    color=f"C{i}",
                    alpha=0.25,
                    linewidth=0.8,
                    linestyle="--" if record.get("resumed_at") else "-",
                )  # a resumed run is drawn dashed
                curves.append(np.interp(grid, xs, ys, right=np.nan))
            if curves:
                ax.plot(
                    grid,
                    np.nanmean(curves, axis=0),
                    color=f"C{i}",
                    linewidth=2,
                    label=f"{arm} ({len(curves)} seed{'s' * (len(curves) > 1)})",
                )
    for ax, title in zip(axes, ("held-out hard (test_hard), greedy", "held-out easy (test_easy), greedy")):
        ax.axvspan(*WINDOW, color="0.9", zorder=0)
        ax.set_xlabel("generated tokens")
        ax.set_title(title)
    axes[0].set_ylabel("accuracy")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        "Compute study: accuracy against generated tokens (thin: a seed, dashed if resumed; thick: the mean; "
        "grey: the window)"
    )
    save(fig, path)


def command(
    stage: str,
    arms: list[str] | None = None,
    seeds: list[int] | None = None,
    jobs: int = 1,
    deadline_s: float | None = None,
    output_dir: str | None = None,
) -> list[str]:
    """The trl-ada-compare arguments of a stage (or of some of its arms and seeds)."""
    arms, seeds, stage_dir = study_runs.registered(STAGES, stage, arms, seeds)
    argv = ["--config", RECIPE, "--set", *SHARED]
    for name in arms:
        argv += ["--arm", name, *ARMS[name]]
    argv += [
        "--seeds",
        *map(str, seeds),
        "--max_steps",
        "1000",
        "--max_tokens",
        str(BUDGET),
        "--eval_every",
        "16",
        "--eval_dataset",
        "benchmarks/compute_study/test_hard.jsonl",
        "--eval_extra_dataset",
        "benchmarks/compute_study/test_easy.jsonl",
        "--eval_examples",
        "256",
        "--eval_k",
        "0",
        "--threads",
        "1",
        "--jobs",
        str(jobs),
        "--output_dir",
        output_dir or stage_dir,
    ]
    return argv + (["--deadline_s", str(deadline_s)] if deadline_s is not None else [])


def main(argv=None) -> dict | list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    study_runs.add_run_actions(sub, STAGES, run_memory="5-12 GB")
    p = sub.add_parser("analyse", help="the registered endpoints from a stage's results")
    p.add_argument("output_dir", help="a trl-ada-compare --output_dir (its results/ folder is read)")
    p.add_argument("--out", required=True, help="writes <out>.json and <out>.png")
    p.add_argument(
        "--stage",
        default="confirm",
        choices=sorted(STAGES),
        help="whose registered seeds are analysed (default: confirm); records of others are set aside",
    )
    args = parser.parse_args(argv)
    if args.action in ("run", "command"):
        compare_argv = command(args.stage, args.arms, args.seeds, args.jobs, args.deadline_s, args.output_dir)
        return study_runs.run_or_print(args.action, args.stage, compare_argv, REPO)
    if args.action == "status":
        return study_runs.status(STAGES, args.stage, args.output_dir)
    if not os.path.isdir(os.path.join(args.output_dir, "results")):
        raise SystemExit(f"{args.output_dir}/results: no such folder (give the --output_dir of trl-ada-compare)")
    results = load_results(args.output_dir)
    report = analyse(results, seeds=STAGES[args.stage][1])
    print_tables(report)
    with open(f"{args.out}.json", "w") as f:
        json.dump(report, f, indent=1)
    plot(results, f"{args.out}.png")
    return report


if __name__ == "__main__":
    main()
