"""`trl-ada-compare`'s report: every arm against the baseline, as paired differences with bootstrap intervals
(`trl_ada.cli.paired`) at equal optimizer steps, generated completions, generated tokens, trained tokens and the
modelled GPU cost; the table it prints and the plot it draws."""

from __future__ import annotations

from trl_ada.cli import paired
from trl_ada.cli.plotting import pyplot, save


def compare(results: dict[str, dict[int, dict]], arms: list[str]) -> dict:
    """Every arm against the first: paired differences at each common evaluation step, at equal generated
    completions and at equal generated tokens: on the token grid when both arms' runs were evaluated on the same one
    (`--eval_every_tokens`; its "method" says "grid"), else interpolated between evaluations ("interpolated")."""
    baseline = arms[0]
    report = {"baseline": baseline, "arms": {}}
    for arm in arms[1:]:
        seeds = sorted(set(results.get(arm, {})) & set(results.get(baseline, {})))
        if not seeds:
            continue
        runs, bases = [results[arm][s]["curve"] for s in seeds], [results[baseline][s]["curve"] for s in seeds]
        by_step = []  # at each evaluated step, the seeds whose two runs both reached it (a cut run stops early)
        for step in sorted({p["step"] for c in runs + bases for p in c}):
            pairs = [
                (run, base)
                for run, base in zip(runs, bases)
                if any(p["step"] == step for p in run) and any(p["step"] == step for p in base)
            ]
            if pairs:
                diffs = [_at(run, "step", step) - _at(base, "step", step) for run, base in pairs]
                by_step.append({"step": step, **paired.paired_difference(diffs)})

        def per_step(name, key):
            return sum(results[name][s][key] / max(results[name][s]["steps"], 1) for s in seeds) / len(seeds)

        grids = {results[name][s].get("eval_every_tokens") for name in (arm, baseline) for s in seeds}
        grid = grids.pop() if len(grids) == 1 else None  # runs on different grids share no grid point to pair
        if grid is not None:
            equal_tokens = {**_on_token_grid(runs, bases), "method": "grid", "every_tokens": grid}
            on_grid = {"equal_tokens_grid": _token_grid_rows(runs, bases)}
        else:
            equal_tokens, on_grid = {**_at_equal_cost(runs, bases, "tokens", "tokens"), "method": "interpolated"}, {}
        report["arms"][arm] = {
            "seeds": seeds,
            "equal_steps": by_step,
            "equal_completions": _at_equal_cost(runs, bases, "samples", "completions"),
            "equal_tokens": equal_tokens,
            **on_grid,
            **_trained_axes(runs, bases),
            "completions_per_step": per_step(arm, "generated_completions"),
            "baseline_completions_per_step": per_step(baseline, "generated_completions"),
            "tokens_per_step": per_step(arm, "generated_tokens"),
            "baseline_tokens_per_step": per_step(baseline, "generated_tokens"),
        }
    report["cost"] = {name: arm_cost(results.get(name, {})) for name in arms if results.get(name)}
    records = [r for name in arms for r in results.get(name, {}).values()]
    report["held_out"] = [
        list(pair) for pair in sorted({(r.get("held_out_source", "?"), r.get("held_out_questions")) for r in records})
    ]
    return report


def _at_equal_cost(runs, bases, axis: str, label: str) -> dict:
    """The paired difference where each seed's two runs have both generated as much (`axis`: "samples" for
    completions, "tokens"): the smaller of their final counts, each run's scores interpolated there."""
    diffs, at = [], []
    pairs = list(zip(runs, bases))
    if any(min(run[-1][axis], base[-1][axis]) > 0 for run, base in pairs):
        # a run cut before its first evaluation after step 0 would add a difference of exactly 0 (the same model)
        pairs = [(run, base) for run, base in pairs if min(run[-1][axis], base[-1][axis]) > 0]
    for run, base in pairs:
        x = min(run[-1][axis], base[-1][axis])
        at.append(x)
        diffs.append(
            paired.interpolate_items(run, axis, "items", x) - paired.interpolate_items(base, axis, "items", x)
        )
    return {label: at, **paired.paired_difference(diffs)}


def _grid_points(curve) -> dict:
    """A curve's evaluations on the token grid: grid point -> the evaluation taken for it."""
    return {g: point for point in curve for g in point.get("grid_tokens", [])}


def _on_token_grid(runs, bases) -> dict:
    """The paired difference at equal generated tokens on the token grid: each seed at the last grid point both its
    runs reached, each scored by the evaluation taken for that point (no interpolation). `generated`: the tokens
    each run (arm, baseline) had actually generated at that evaluation."""
    grids = [(_grid_points(run), _grid_points(base)) for run, base in zip(runs, bases)]
    last = [max(set(run) & set(base), default=0) for run, base in grids]
    if any(last):  # a seed cut before its first grid point after 0 would add exactly 0 (the same model)
        grids, last = zip(*[(pair, x) for pair, x in zip(grids, last) if x > 0])
    diffs = [_items(run[x]) - _items(base[x]) for (run, base), x in zip(grids, last)]
    generated = [[run[x]["tokens"], base[x]["tokens"]] for (run, base), x in zip(grids, last)]
    return {"tokens": list(last), "generated": generated, **paired.paired_difference(diffs)}


def _token_grid_rows(runs, bases) -> list[dict]:
    """At each grid point, the paired difference over the seeds whose two runs both reached it (a cut run stops
    early)."""
    grids = [(_grid_points(run), _grid_points(base)) for run, base in zip(runs, bases)]
    rows = []
    for x in sorted({g for pair in grids for grid in pair for g in grid}):
        pairs = [(run[x], base[x]) for run, base in grids if x in run and x in base]
        if pairs:
            diffs = [_items(run) - _items(base) for run, base in pairs]
            rows.append({"tokens": x, **paired.paired_difference(diffs)})
    return rows


def _items(point):
    import numpy as np

    return np.asarray(point["items"], dtype=float)


# The GPU cost model (docs/compare.md): a step's cost is generated tokens plus trained tokens, weighed so that the
# rollout is ROLLOUT_SHARE of a GRPO step, where every generated token is trained once. Seer (arXiv 2511.14617),
# RollPacker (2509.21009) and APRIL (2509.18521) measure the rollout at 63-90% of a synchronous step; 0.75 is the
# Reinforce-Ada paper's own Table 3 (8 H100s): balanced's step 2.8x GRPO n=4's while it generates about 3.5x the
# tokens and trains as many, i.e. 0.75 * 3.5 + 0.25 * 1 = 2.9. The unit: one token of a GRPO step.
ROLLOUT_SHARE = 0.75


def gpu_cost(point: dict, rollout_share: float = ROLLOUT_SHARE) -> float:
    """The modelled GPU cost of a run up to a curve point, in GRPO-token units."""
    return rollout_share * point["tokens"] + (1.0 - rollout_share) * point["trained_tokens"]


def _trained_axes(runs, bases) -> dict:
    """At equal trained tokens and at equal modelled GPU cost, for runs that counted their trained tokens."""
    if not all("trained_tokens" in p for curve in runs + bases for p in curve):
        return {}
    with_cost = [[{**p, "gpu_cost": gpu_cost(p)} for p in curve] for curve in runs + bases]
    runs, bases = with_cost[: len(runs)], with_cost[len(runs) :]
    return {
        "equal_trained_tokens": _at_equal_cost(runs, bases, "trained_tokens", "trained_tokens"),
        "equal_gpu_cost": _at_equal_cost(runs, bases, "gpu_cost", "gpu_cost"),
    }


def arm_cost(runs: dict[int, dict]) -> dict:
    """What an arm spent per optimizer step, averaged over its runs: generated completions and tokens, trained
    completions, seconds."""
    records = list(runs.values())
    steps = [max(r["steps"], 1) for r in records]

    def mean(key):
        return sum((r.get(key) or 0) / n for r, n in zip(records, steps)) / len(records)

    signal = [x for r in records for x in r.get("signal", []) if x is not None]
    return {
        "runs": len(records),
        "cut": sum(bool(r.get("cut")) for r in records),
        "signal_share": sum(signal) / len(signal) if signal else None,
        "mean_steps": sum(steps) / len(steps),
        "generated_per_step": mean("generated_completions"),
        "generated_tokens_per_step": mean("generated_tokens"),
        "trained_per_step": mean("trained_completions"),
        "seconds_per_step": mean("train_seconds"),
        **_extra_scores(records),
    }


def _extra_scores(records: list[dict]) -> dict:
    """The second held-out set's greedy score (--eval_extra_split), before training and at each run's end."""
    if not all("extra_greedy" in r["curve"][0] for r in records):
        return {}
    return {
        "extra_before": sum(r["curve"][0]["extra_greedy"] for r in records) / len(records),
        "extra_after": sum(r["curve"][-1]["extra_greedy"] for r in records) / len(records),
    }


def _at(curve, axis, x):
    import numpy as np

    return np.asarray(next(p["items"] for p in curve if p[axis] == x), dtype=float)


def print_report(report: dict) -> None:
    baseline = report["baseline"]
    held = "; ".join(f"{source}, {n} questions" for source, n in report.get("held_out", []))
    print(f"\nHeld-out set: {held or 'unknown'}.")
    print(
        f"Paired difference to {baseline} in held-out score (points, 95% bootstrap interval over seeds and "
        "questions; an interval containing 0 reads 'no difference measured')."
    )
    print(
        f"\n| arm | seeds | completions per step (vs {baseline}) | equal generated completions | equal generated "
        "tokens | equal optimizer steps (last evaluation every seed reached) |\n|---|---:|---|---|---|---|"
    )
    for arm, r in report["arms"].items():
        every_seed = [row for row in r["equal_steps"] if row["seeds"] == len(r["seeds"])]  # not only uncut pairs
        last = (every_seed or r["equal_steps"])[-1]
        at, tokens = r["equal_completions"]["completions"], r["equal_tokens"]["tokens"]
        print(
            f"| {arm} | {len(r['seeds'])} | {r['completions_per_step']:.1f} "
            f"({r['baseline_completions_per_step']:.1f}) | {paired.describe(r['equal_completions'])} at "
            f"{min(at)}-{max(at)} | {paired.describe(r['equal_tokens'])} at {min(tokens)}-{max(tokens)} | "
            f"{paired.describe(last)} at step {last['step']} |"
        )
    modelled = {arm: r for arm, r in report["arms"].items() if "equal_gpu_cost" in r}
    if modelled:
        print(
            f"\nAt equal trained tokens, and at equal modelled GPU cost (generated tokens x {ROLLOUT_SHARE} + "
            f"trained tokens x {1 - ROLLOUT_SHARE:g}: the rollout {ROLLOUT_SHARE:.0%} of a GRPO step; "
            "docs/compare.md):\n"
        )
        print("| arm | equal trained tokens | equal modelled GPU cost |\n|---|---|---|")
        for arm, r in modelled.items():
            print(f"| {arm} | {paired.describe(r['equal_trained_tokens'])} | {paired.describe(r['equal_gpu_cost'])} |")
    print("\nCost per optimizer step (mean over runs; training seconds exclude evaluation):\n")
    print(
        "| arm | runs (cut) | steps | generated completions | generated tokens | trained completions | seconds | "
        "trained groups with signal |\n|---|---|---:|---:|---:|---:|---:|---:|"
    )
    for arm, c in report.get("cost", {}).items():
        signal = "-" if c.get("signal_share") is None else f"{c['signal_share']:.2f}"
        print(
            f"| {arm} | {c['runs']} ({c['cut']}) | {c['mean_steps']:.0f} | {c['generated_per_step']:.1f} | "
            f"{c['generated_tokens_per_step']:.0f} | {c['trained_per_step']:.1f} | {c['seconds_per_step']:.2f} | "
            f"{signal} |"
        )
    extras = {arm: c for arm, c in report.get("cost", {}).items() if "extra_before" in c}
    if extras:
        print("\nThe second held-out set (--eval_extra_split), greedy, mean over runs:\n")
        print("| arm | before | at the end |\n|---|---:|---:|")
        for arm, c in extras.items():
            print(f"| {arm} | {c['extra_before']:.3f} | {c['extra_after']:.3f} |")
    methods = {r["equal_tokens"].get("method", "interpolated") for r in report["arms"].values()}
    if methods == {"grid"}:
        print(
            "\nEqual generated tokens: on the token grid (--eval_every_tokens), each seed at the last grid point "
            "both its runs reached, scored by the evaluation taken for it."
        )
    elif "grid" in methods:
        print("\nEqual generated tokens: on the token grid where both arms' runs used one, else interpolated.")
    for arm, r in report["arms"].items():
        if "equal_tokens_grid" in r:
            print(f"\n{arm} against {baseline} on the generated-token grid, along the run:\n")
            print("| generated tokens | seeds | difference |\n|---:|---:|---|")
            for row in r["equal_tokens_grid"]:
                print(f"| {row['tokens']} | {row['seeds']} | {paired.describe(row)} |")
    for arm, r in report["arms"].items():
        print(f"\n{arm} against {baseline} at equal optimizer steps, along the run:\n")
        print("| step | seeds | difference |\n|---:|---:|---|")
        for row in r["equal_steps"]:
            print(f"| {row['step']} | {row['seeds']} | {paired.describe(row)} |")


def plot(results: dict[str, dict[int, dict]], arms: list[str], path: str) -> None:
    plt = pyplot()
    if plt is None:
        return

    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
    for arm in arms:
        for axis, ax in zip(("step", "samples", "tokens"), axes):
            for i, record in enumerate(results.get(arm, {}).values()):
                curve = record["curve"]
                ax.plot(
                    [p[axis] for p in curve],
                    [p["greedy"] for p in curve],
                    color=f"C{arms.index(arm)}",
                    alpha=0.6,
                    label=arm if i == 0 else None,
                )
    axes[0].set_xlabel("optimizer steps")
    axes[1].set_xlabel("generated completions")
    axes[2].set_xlabel("generated tokens")
    axes[0].set_ylabel("held-out score (greedy)")
    axes[0].legend()
    save(fig, path, "trl-ada-compare: one line per run (seed)")
