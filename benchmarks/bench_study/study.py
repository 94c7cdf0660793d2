"""The bench study (plan.md): which allocation rule pays on the sampler bench, at equal generated tokens.

    python benchmarks/bench_study/study.py pilot benchmarks/bench_study/pilot --out benchmarks/bench_study/pilot_analysis
    python benchmarks/bench_study/study.py command confirm              # print the trl-ada-compare command
    python benchmarks/bench_study/study.py run confirm --jobs 2 --deadline_s 3600
    python benchmarks/bench_study/study.py status confirm               # runs done, cut, to run; CPU-hours (no accuracy)
    python benchmarks/bench_study/study.py analyse runs/bench-study --out benchmarks/bench_study/study

`pilot` reads the pilot's records (what the plan's seeds and levels come from): each run's held-out curve on the
token grid, its area, the paired difference per seed and their SD, each arm's CPU-hours. `run` is `trl-ada-compare`
with the registered recipe, arms and seeds (a rerun skips finished runs and continues cut ones), from a clone pinned at
the plan's commit. `analyse` computes the registered endpoints, writes `<out>.json`, `<out>.png` and `<out>.md` (the
README's table), prints the verdicts.

The primary endpoint is the area under the held-out accuracy curve over generated tokens [0, BUDGET]: each question's
greedy score, interpolated linearly between evaluations at every grid point 0, 8k, ..., 64k, integrated by the
trapezoid rule and divided by BUDGET (a mean accuracy over the budget, in points). Each arm is paired with GRPO n=4 by
seed and question (`trl_ada.cli.paired`: the bootstrap over seeds and questions, 4000 replicates).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys

import numpy as np


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__":  # a study runs the package of the clone it is in (plan.md: pinned), not an installed copy
    sys.path.insert(0, REPO)

from benchmarks import study_runs  # noqa: E402 (the arms and seeds registered, the runs' status, the pinned clone)
from benchmarks.study_runs import cpu_hours  # noqa: E402
from trl_ada.cli import paired  # noqa: E402
from trl_ada.cli.plotting import pyplot, save  # noqa: E402


# What plan.md registers. Changing any of these after the first confirmatory record is a deviation from the plan.
RECIPE = "recipes/SmolLM2-135M-Instruct/bench_grpo.yaml"  # GRPO n=4, 8 prompts a step, 96 tokens, pool.jsonl
SHARED = [
    "use_vllm=true",
    "vllm_mode=colocate",
    "vllm_enable_sleep_mode=false",
    "vllm_importance_sampling_correction=false",
]
ARMS = {  # name: overrides of the recipe; every arm trains groups of num_generations=4
    "grpo_n4": [],
    "balanced": ["sampler=reinforce_ada", "reinforce_ada_choice=balanced"],
    "dapo": ["sampler=dapo"],
    "knapsack": ["sampler=knapsack"],
    "retire_solved": ["sampler=retire_solved"],
    "maxrl": ["advantage_estimator=maxrl"],
    "est": ["sampler=est"],  # registered but not run: the cap does not allow them (plan.md)
    "budget": ["sampler=budget", "sampling_budget=4"],
}
BASELINE = "grpo_n4"
STAGES = {  # stage: (arms, seeds, output folder)
    "pilot": (["grpo_n4", "balanced"], [300, 301], "runs/bench-pilot"),
    "confirm": (
        ["grpo_n4", "balanced", "dapo", "knapsack", "retire_solved", "maxrl"],
        list(range(400, 412)),
        "runs/bench-study",
    ),
}
BUDGET = 64_000  # generated tokens a run
GRID = 8_000  # an evaluation at the first step at or past every multiple
MARGIN = 0.02  # equivalence: the primary difference within +-2 points
ALPHA = 0.05  # family-wise, Holm over the arms, for "ahead"/"behind" and for "equivalent" alike
LEVEL = 0.35  # secondary: the generated tokens a run needs to reach this held-out greedy accuracy (plan.md: why)
DROP_ORDER = ["maxrl", "retire_solved", "knapsack", "dapo"]  # arms that stop taking seeds first if the cap binds
CPU_HOURS_CAP = 60.0  # the whole study, pilot included


def records(folder: str) -> dict[str, dict[int, dict]]:
    """arm -> seed -> `trl-ada-compare` record, from `folder/results/*.json` (a compare output) or `folder/*.json`."""
    paths = sorted(glob.glob(os.path.join(folder, "results", "*.json")) or glob.glob(os.path.join(folder, "*.json")))
    out: dict[str, dict[int, dict]] = {}
    for path in paths:
        with open(path) as f:
            record = json.load(f)
        out.setdefault(record["arm"], {})[record["seed"]] = record
    return out


def grid_points(budget: int = BUDGET, grid: int = GRID) -> np.ndarray:
    return np.arange(0, budget + 1, grid, dtype=float)


def auc_items(curve: list[dict], key: str = "items", budget: int = BUDGET, grid: int = GRID) -> np.ndarray | None:
    """Each question's mean score over generated tokens [0, budget]: the trapezoid rule over the grid points, each
    score interpolated between the evaluations around it; None when the curve does not reach the budget."""
    values = [paired.interpolate_items(curve, "tokens", key, x) for x in grid_points(budget, grid)]
    if any(v is None for v in values):
        return None
    weights = np.full(len(values), float(grid))
    weights[[0, -1]] /= 2  # the trapezoid rule
    return weights @ np.stack(values) / budget


def mean_curve(curve: list[dict], key: str = "items") -> list[float | None]:
    """The run's held-out accuracy at every grid point (None past its last evaluation)."""
    values = [paired.interpolate_items(curve, "tokens", key, x) for x in grid_points()]
    return [None if v is None else float(np.mean(v)) for v in values]


def tokens_to_level(curve: list[dict], level: float = LEVEL) -> float | None:
    """The generated tokens at which the run's held-out accuracy (the mean over questions, linear between
    evaluations) first reaches `level`; None if it never does within its curve."""
    points = [(p["tokens"], float(np.mean(p["items"]))) for p in curve if "items" in p]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if y0 >= level:
            return float(x0)
        if y1 >= level:
            return float(x0 + (x1 - x0) * (level - y0) / (y1 - y0))
    return float(points[0][0]) if points and points[0][1] >= level else None


def best_by_validation(curve: list[dict]) -> np.ndarray | None:
    """The test scores of the evaluation whose validation score is highest (the earliest of ties)."""
    points = [p for p in curve if "items" in p and "extra_items" in p]
    if not points:
        return None
    best = max(range(len(points)), key=lambda i: (np.mean(points[i]["extra_items"]), -i))
    return np.asarray(points[best]["items"], dtype=float)


def holm(p_values: dict[str, float], alpha: float = ALPHA) -> dict[str, float]:
    """Holm's step-down adjusted p-values: the k-th smallest of m scaled by (m - k + 1), kept monotone, capped at 1."""
    adjusted, running = {}, 0.0
    for k, name in enumerate(sorted(p_values, key=p_values.get)):
        running = max(running, min(1.0, (len(p_values) - k) * p_values[name]))
        adjusted[name] = running
    return adjusted


def verdict(result: dict, p_superiority: float, p_equivalence: float, alpha: float = ALPHA) -> str:
    if p_superiority < alpha:
        return "ahead" if result["mean"] > 0 else "behind"
    if p_equivalence < alpha:
        return "equivalent"
    return paired.NO_DIFFERENCE


def area_differences(results, arm: str, seeds: list[int], key: str = "items") -> tuple[dict, list[int]]:
    """seed -> each question's area difference (arm minus GRPO n=4), over the seeds both ran to the budget; and the
    seeds left out because a run stops short of it (unfinished, or cut and not yet continued)."""
    diffs, short = {}, []
    for seed in seeds:
        if seed not in results.get(arm, {}) or seed not in results.get(BASELINE, {}):
            continue
        a, b = (auc_items(results[name][seed]["curve"], key) for name in (arm, BASELINE))
        if a is None or b is None:
            short.append(seed)
        else:
            diffs[seed] = a - b
    return diffs, short


def primary(results: dict[str, dict[int, dict]], seeds: list[int]) -> dict:
    """Each arm against GRPO n=4 by the area over [0, BUDGET], paired by seed and question: the 95% interval and its
    two-sided p, the 90% interval and the equivalence p (margin MARGIN); Holm over the arms for each family."""
    out, short = {}, {}
    for arm in sorted(a for a in results if a != BASELINE):
        diffs, short[arm] = area_differences(results, arm, seeds)
        if diffs:
            d = np.stack(list(diffs.values()))
            out[arm] = paired.paired_difference(d, level=0.95, margin=MARGIN)
            ninety = paired.paired_difference(d, level=0.90)
            out[arm].update(low90=ninety["low"], high90=ninety["high"], seeds_used=list(diffs))
    superiority = holm({arm: r["p"] for arm, r in out.items()})
    equivalence = holm({arm: r["p_equivalent"] for arm, r in out.items()})
    for arm, r in out.items():
        r.update(p_holm=superiority[arm], p_equivalent_holm=equivalence[arm])
        r["verdict"] = verdict(r, superiority[arm], equivalence[arm])
    return {"arms": out, "short": {arm: s for arm, s in short.items() if s}}


def secondary(results: dict[str, dict[int, dict]], seeds: list[int]) -> dict:
    """Tokens to reach LEVEL (arm minus GRPO n=4 per seed; a run that never reaches it is named), and the test score
    of the best checkpoint by the validation set, paired by seed and question. No verdicts: intervals only."""
    out = {}
    for arm in [a for a in results if a != BASELINE]:
        both = [s for s in seeds if s in results[arm] and s in results.get(BASELINE, {})]
        reach = {
            s: (tokens_to_level(results[arm][s]["curve"]), tokens_to_level(results[BASELINE][s]["curve"]))
            for s in both
        }
        gaps = [a - b for a, b in reach.values() if a is not None and b is not None]
        best = [
            (best_by_validation(results[arm][s]["curve"]), best_by_validation(results[BASELINE][s]["curve"]))
            for s in both
        ]
        best_diffs = [a - b for a, b in best if a is not None and b is not None]
        out[arm] = {
            "tokens_to_level": {
                "level": LEVEL,
                "mean_gap": float(np.mean(gaps)) if gaps else None,
                "per_seed": reach,
            },
            "best_by_validation": paired.paired_difference(np.stack(best_diffs)) if best_diffs else None,
        }
    return out


def descriptive(results: dict[str, dict[int, dict]]) -> dict:
    """Per arm: optimizer steps, tokens per step, the share of trained groups with signal, CPU-hours."""
    out = {}
    for arm, runs in results.items():
        rs = list(runs.values())
        out[arm] = {
            "runs": len(rs),
            "steps": float(np.mean([r["steps"] for r in rs])),
            "tokens_per_step": float(np.mean([r["generated_tokens"] / max(r["steps"], 1) for r in rs])),
            "signal": float(np.mean([np.mean(r["signal"]) for r in rs if r.get("signal")] or [math.nan])),
            "cpu_hours": float(sum(cpu_hours(r) for r in rs)),
        }
    return out


def pilot(results: dict[str, dict[int, dict]]) -> dict:
    """What the plan needs from the pilot: each run's curve and area, the per-seed paired differences of the area
    and their SD, each arm's CPU-hours, and the seeds the SD asks for."""
    runs = {
        f"{arm} {seed}": {
            "curve": mean_curve(r["curve"]),
            "validation": mean_curve(r["curve"], "extra_items"),
            "area": None if (a := auc_items(r["curve"])) is None else float(a.mean()),
            "steps": r["steps"],
            "generated_tokens": r["generated_tokens"],
            "cut": bool(r.get("cut")),
            "cpu_hours": cpu_hours(r),
        }
        for arm, by_seed in results.items()
        for seed, r in sorted(by_seed.items())
    }
    hours = {arm: sum(cpu_hours(r) for r in by_seed.values()) for arm, by_seed in results.items()}
    out = {"grid": grid_points().tolist(), "runs": runs, "cpu_hours": hours, "pairs": {}}
    for arm in [a for a in results if a != BASELINE]:
        seeds = sorted(set(results[arm]) & set(results.get(BASELINE, {})))
        per_seed = {
            s: runs[f"{arm} {s}"]["area"] - runs[f"{BASELINE} {s}"]["area"]
            for s in seeds
            if runs[f"{arm} {s}"]["area"] is not None and runs[f"{BASELINE} {s}"]["area"] is not None
        }
        sd = float(np.std(list(per_seed.values()), ddof=1)) if len(per_seed) > 1 else None
        out["pairs"][arm] = {"per_seed": per_seed, "sd": sd, "seeds_needed": seeds_needed(sd)}
    return out


def seeds_needed(sd: float | None, margin: float = MARGIN, arms: int = 5, power: float = 0.8) -> int | None:
    """Seeds for the equivalence test to succeed with `power` when the true difference is 0: n = (z_(1-a) +
    z_(1-b/2))^2 sd^2 / margin^2, a = ALPHA / arms (Holm's first step), at least 6."""
    if sd is None:
        return None
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    n = (z(1 - ALPHA / arms) + z(1 - (1 - power) / 2)) ** 2 * sd**2 / margin**2
    return max(6, math.ceil(n))


def plot(results: dict[str, dict[int, dict]], report: dict | None, path: str) -> None:
    """Left: each arm's mean held-out curve over the grid with its seeds' range. Right (an analysis): each arm's
    area difference against GRPO n=4, the 95% and 90% intervals, and the equivalence margin."""
    plt = pyplot()
    if plt is None:
        return
    arms = [BASELINE] + sorted(a for a in results if a != BASELINE)
    fig, axes = plt.subplots(1, 2 if report else 1, figsize=(11 if report else 6, 4), squeeze=False)
    left, x = axes[0][0], grid_points() / 1000
    for arm in arms:
        curves = [mean_curve(r["curve"]) for r in results.get(arm, {}).values()]
        curves = np.array([[math.nan if v is None else 100 * v for v in c] for c in curves])
        if len(curves):
            (line,) = left.plot(x, np.nanmean(curves, axis=0), lw=2, label=f"{arm} ({len(curves)} seeds)")
            left.fill_between(
                x, np.nanmin(curves, axis=0), np.nanmax(curves, axis=0), color=line.get_color(), alpha=0.15
            )
    left.set(
        xlabel="generated tokens (thousands)", ylabel="held-out greedy accuracy (%)", title="test split, 314 questions"
    )
    left.legend(fontsize=8)
    if report:
        right, rows = axes[0][1], sorted(report["primary"]["arms"].items())
        for i, (arm, r) in enumerate(rows):
            right.plot([100 * r["low"], 100 * r["high"]], [i, i], color="tab:gray", lw=1)
            right.plot([100 * r["low90"], 100 * r["high90"]], [i, i], color="tab:blue", lw=4)
            right.plot([100 * r["mean"]], [i], "ko")
        for bound in (-100 * MARGIN, 100 * MARGIN):
            right.axvline(bound, color="tab:red", ls="--", lw=1)
        right.axvline(0, color="black", lw=0.5)
        right.set_yticks(range(len(rows)), [f"{arm}: {r['verdict']}" for arm, r in rows])
        right.set(xlabel="area difference vs grpo_n4 (points; thin 95%, thick 90%)", title="primary endpoint")
    save(fig, path)


def analyse(results: dict[str, dict[int, dict]]) -> tuple[dict, dict]:
    """The registered analysis of the confirmatory records (pilot seeds left out): the records it used, and the
    primary, secondary and descriptive endpoints with the registered runs it lacks."""
    arms, seeds, _ = STAGES["confirm"]
    results = {arm: {s: r for s, r in runs.items() if s in seeds} for arm, runs in results.items()}
    report = {
        "primary": primary(results, seeds),
        "secondary": secondary(results, seeds),
        "descriptive": descriptive(results),
        "missing": {arm: [s for s in seeds if s not in results.get(arm, {})] for arm in arms},
    }
    return results, report


def setting(arm: str) -> str:
    """How a user selects the arm: its overrides of GRPOTrainer's defaults, as config fields."""
    return ", ".join(f"`{o}`" for o in ARMS[arm]) or "GRPOTrainer"


def interval(result: dict) -> str:
    """A paired difference in points: its mean and 95% interval."""
    return f"{100 * result['mean']:+.1f} [{100 * result['low']:+.1f}, {100 * result['high']:+.1f}]"


def table(report: dict) -> str:
    """The primary endpoint as the README's "Which sampling should I use?" rows (arm, regime, interval, verdict),
    with the secondary endpoints beside it; every registered run not in the analysis is named under the table."""
    regime = "the sampler bench: 96 questions revisited 6-8 times, area over [0, 64k] generated tokens"
    lines = [
        f"| arm vs `{BASELINE}` | regime | seeds | area difference, points: 95% [90%] | verdict | tokens to reach "
        f"{LEVEL:.0%}, arm minus `{BASELINE}` | best checkpoint by validation, on test: 95% |",
        "|---|---|---:|---|---|---:|---|",
    ]
    for arm, r in sorted(report["primary"]["arms"].items()):
        second = report["secondary"].get(arm, {})
        gap = second.get("tokens_to_level", {}).get("mean_gap")
        best = second.get("best_by_validation")
        lines.append(
            f"| {arm} ({setting(arm)}) | {regime} | {r['seeds']} | {interval(r)} [{100 * r['low90']:+.1f}, "
            f"{100 * r['high90']:+.1f}] | {r['verdict']} | {'-' if gap is None else f'{gap:+,.0f}'} | "
            f"{'-' if best is None else interval(best)} |"
        )
    gaps = {arm: seeds for arm, seeds in report["missing"].items() if seeds}
    gaps.update({f"{arm} (short of the budget)": seeds for arm, seeds in report["primary"]["short"].items()})
    lines += [""] + [f"- not analysed: {arm}, seeds {seeds}" for arm, seeds in sorted(gaps.items())]
    return "\n".join(lines).rstrip() + "\n"


def command(stage: str, arms=None, seeds=None, jobs: int = 1, deadline_s=None, output_dir=None) -> list[str]:
    """The trl-ada-compare arguments of a stage, or of some of its arms and seeds; the baseline is always the first
    arm, so that compare's own report pairs against it."""
    arms, seeds, stage_dir = study_runs.registered(STAGES, stage, arms, seeds)
    argv = ["--config", RECIPE, "--set", *SHARED]
    for name in [BASELINE] + [a for a in arms if a != BASELINE]:
        argv += ["--arm", name, *ARMS[name]]
    argv += ["--eval_dataset", "benchmarks/sampler_bench/test.jsonl", "--eval_examples", "1000", "--eval_k", "0"]
    argv += ["--eval_extra_dataset", "benchmarks/sampler_bench/validation.jsonl"]
    argv += ["--seeds", *map(str, seeds), "--max_steps", "400", "--max_tokens", str(BUDGET)]
    argv += ["--eval_every_tokens", str(GRID), "--threads", "1", "--jobs", str(jobs), "--output_dir"]
    argv += [output_dir or stage_dir] + (["--deadline_s", str(deadline_s)] if deadline_s is not None else [])
    return argv


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    study_runs.add_run_actions(sub, STAGES, run_memory="7-10 GiB")
    for action in ("pilot", "analyse"):
        p = sub.add_parser(action)
        p.add_argument("folder", help="a trl-ada-compare --output_dir, or a folder of its records")
        p.add_argument("--out", required=True, help="writes <out>.json and <out>.png (analyse: and <out>.md)")
    args = parser.parse_args(argv)
    if args.action in ("run", "command"):
        compare_argv = command(args.stage, args.arms, args.seeds, args.jobs, args.deadline_s, args.output_dir)
        return study_runs.run_or_print(args.action, args.stage, compare_argv, REPO)
    if args.action == "status":
        return study_runs.status(STAGES, args.stage, args.output_dir, cap=CPU_HOURS_CAP)
    results = records(args.folder)
    if args.action == "pilot":
        report = pilot(results)
        plot(results, None, f"{args.out}.png")
    else:
        results, report = analyse(results)
        plot(results, report, f"{args.out}.png")
        with open(f"{args.out}.md", "w") as f:
            f.write(table(report))
        for arm, r in sorted(report["primary"]["arms"].items()):
            print(
                f"{arm:>14} vs {BASELINE}: {100 * r['mean']:+.1f} points, 95% [{100 * r['low']:+.1f}, "
                f"{100 * r['high']:+.1f}], 90% [{100 * r['low90']:+.1f}, {100 * r['high90']:+.1f}], "
                f"{r['seeds']} seeds: {r['verdict']}"
            )
    with open(f"{args.out}.json", "w") as f:
        json.dump(report, f, indent=1, default=float)
    return report


if __name__ == "__main__":
    main()
