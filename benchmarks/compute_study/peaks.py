"""Where each arm's held-out curve peaks, and the best-so-far curve at equal generated tokens: descriptive, not
registered (plan.md's endpoints are `study.py analyse`'s). Written before the last confirmatory record was read.

The pilot saw the 48 training questions overfit: GRPO n=4's held-out accuracy peaked before the registered window
(48k-64k generated tokens) and fell back by the budget. Then the window measures the level each arm holds after its
peak, not how fast it learns; this script says whether the confirmatory runs do the same.

    python benchmarks/compute_study/peaks.py benchmarks/compute_study/confirm --out benchmarks/compute_study/peaks

Per arm and seed: the held-out hard greedy peak (the evaluation with the highest accuracy, the first of equals) as
(generated tokens, accuracy), and the accuracy at the last evaluation; over seeds: their mean, SD and range, and how
many seeds peaked before the window. The best-so-far curve is each run's running maximum, interpolated on a grid of
generated tokens and averaged over seeds; it reads as "stopped at its best held-out evaluation", which needs a held-out
set to choose the stop and so flatters every arm alike. Writes `<out>.json` and `<out>.png`, prints a table.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from trl_ada.cli.plotting import pyplot, save
from trl_ada.cli.records import load_results


BUDGET = 64_000  # study.py's
WINDOW = (48_000, 64_000)
GRID = np.linspace(0, BUDGET, 33)


def run_peak(record: dict, key: str = "greedy") -> dict:
    """One run's held-out peak (the first evaluation at the highest accuracy) and its last evaluation."""
    points = [p for p in record["curve"] if key in p]
    best = max(range(len(points)), key=lambda i: (points[i][key], -i))
    return {
        "peak_tokens": points[best]["tokens"],
        "peak_step": points[best]["step"],
        "peak": points[best][key],
        "last_tokens": points[-1]["tokens"],
        "last": points[-1][key],
        "resumed": bool(record.get("resumed_at")),
    }


def spread(values: list[float]) -> dict:
    values = np.asarray(values, dtype=float)
    return {
        "mean": float(values.mean()),
        "sd": float(values.std(ddof=1)) if values.size > 1 else None,
        "min": float(values.min()),
        "max": float(values.max()),
    }


def best_so_far(record: dict, key: str = "greedy") -> np.ndarray:
    """The run's running maximum of held-out accuracy on GRID (NaN past its last evaluation)."""
    points = [p for p in record["curve"] if key in p]
    xs = [p["tokens"] for p in points]
    ys = np.maximum.accumulate([p[key] for p in points])
    return np.interp(GRID, xs, ys, right=np.nan)


def peaks(results: dict[str, dict[int, dict]], key: str = "greedy") -> dict:
    """Per arm: each seed's peak and last evaluation, their spread over seeds, the seeds that peaked before the
    window, and the mean best-so-far curve on GRID."""
    report = {"window": list(WINDOW), "budget": BUDGET, "held_out": key, "grid": GRID.tolist(), "arms": {}}
    for arm, by_seed in sorted(results.items()):
        per_seed = {seed: run_peak(record, key) for seed, record in sorted(by_seed.items())}
        curves = np.array([best_so_far(record, key) for record in by_seed.values()])
        report["arms"][arm] = {
            "seeds": sorted(by_seed),
            "per_seed": per_seed,
            "peak_tokens": spread([p["peak_tokens"] for p in per_seed.values()]),
            "peak": spread([p["peak"] for p in per_seed.values()]),
            "last": spread([p["last"] for p in per_seed.values()]),
            "fall_from_peak": spread([p["peak"] - p["last"] for p in per_seed.values()]),
            "peaked_before_window": sum(p["peak_tokens"] < WINDOW[0] for p in per_seed.values()),
            "best_so_far": np.nanmean(curves, axis=0).tolist() if len(curves) else [],
        }
    return report


def print_table(report: dict) -> None:
    def cell(s: dict, scale: float = 100.0, unit: str = "") -> str:
        sd = "" if s["sd"] is None else f" ± {s['sd'] * scale:.1f}"
        return f"{s['mean'] * scale:.1f}{sd}{unit} [{s['min'] * scale:.1f}, {s['max'] * scale:.1f}]"

    print(
        "| arm | seeds | peak at (k tokens) | peak (%) | at the last evaluation (%) | fall from peak (points) "
        "| seeds peaking before the window |\n|---|---:|---|---|---|---|---:|"
    )
    for arm, a in report["arms"].items():
        print(
            f"| {arm} | {len(a['seeds'])} | {cell(a['peak_tokens'], 1e-3)} | {cell(a['peak'])} | {cell(a['last'])} "
            f"| {cell(a['fall_from_peak'])} | {a['peaked_before_window']} of {len(a['seeds'])} |"
        )
    print("mean ± SD over seeds [range]; descriptive, not registered")


def plot(results: dict[str, dict[int, dict]], report: dict, path: str) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharex=True, sharey=True)
    key = report["held_out"]
    for i, (arm, by_seed) in enumerate(sorted(results.items())):
        curves = []
        for record in by_seed.values():
            points = [p for p in record["curve"] if key in p]
            curves.append(np.interp(GRID, [p["tokens"] for p in points], [p[key] for p in points], right=np.nan))
        label = f"{arm} ({len(curves)} seeds)"
        axes[0].plot(GRID, np.nanmean(curves, axis=0), color=f"C{i}", linewidth=2, label=label)
        axes[1].plot(GRID, report["arms"][arm]["best_so_far"], color=f"C{i}", linewidth=2, label=label)
        for seed in report["arms"][arm]["per_seed"].values():
            axes[0].plot(seed["peak_tokens"], seed["peak"], "o", color=f"C{i}", alpha=0.5, markersize=4)
    for ax, title in zip(axes, ("held-out hard, greedy: mean over seeds (dots: each seed's peak)", "best so far")):
        ax.axvspan(*WINDOW, color="0.9", zorder=0)
        ax.set_xlabel("generated tokens")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("accuracy")
    axes[0].legend(fontsize=8)
    save(fig, path, "Compute study, descriptive: where the held-out curves peak (grey: the registered window)")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", help="a trl-ada-compare --output_dir (its results/ folder is read)")
    parser.add_argument("--out", required=True, help="writes <out>.json and <out>.png")
    args = parser.parse_args(argv)
    results = load_results(args.output_dir)
    report = peaks(results)
    print_table(report)
    with open(f"{args.out}.json", "w") as f:
        json.dump(report, f, indent=1)
    plot(results, report, f"{args.out}.png")
    return report


if __name__ == "__main__":
    main()
