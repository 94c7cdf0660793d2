"""A study's pre-registered endpoints, read from `trl-ada-compare` records: the score over a window of a cost axis,
the plateau rule, and Holm's correction for several comparisons.

- **A window, not a point.** One evaluation of a run is noisy: on 127 questions, one greedy answer each, a run's score
  moves by several points between neighbouring evaluations. A study that asks where an arm *ends* reads the mean of
  its scores over the last stretch of the budget: `window_items` interpolates each question's score at `points`
  evenly spaced positions of an axis (generated tokens, say) in [low, high] and averages them, so every arm is read
  at the same positions whatever its evaluation steps were; `window_difference` pairs two arms' windows by seed and
  resamples seeds and questions (`trl_ada.cli.paired`).
- **The plateau rule.** A budget B is at the baseline's plateau when neither its held-out score nor its training
  reward is still rising at its end: `rise` fits a least-squares line through the last quarter of the budget,
  [3B/4, B] (the held-out evaluations in it and the score at B; the training steps that end in it or cross B, a
  step's tokens interpolated between evaluations) and reads how much the line rises across that quarter. A line, not the last
  points: one evaluation moves by several points, one step's reward (16 samples) by more. `plateau` checks it per seed and over
  seeds resampled with replacement: the rule holds over seeds when the one-sided 95% upper bound of the mean rise is
  within the tolerance.
- **Several comparisons** (the secondary endpoints): `holm` adjusts their bootstrap p-values (`paired_difference`'s
  `p`) by Holm's step-down rule, which controls the chance of any false "ahead" or "behind" among them.

Pure numpy; no model.
"""

from __future__ import annotations

import numpy as np

from trl_ada.cli import paired


__all__ = ["holm", "plateau", "rise", "window_difference", "window_items"]


def window_items(
    curve: list[dict], axis: str, low: float, high: float, points: int = 5, key: str = "items"
) -> np.ndarray | None:
    """Each question's mean score over [low, high] on `axis` ("tokens", "samples", "step"): the scores interpolated
    at `points` evenly spaced positions and averaged; None when the curve does not span the window."""
    if points < 1 or high < low:
        raise ValueError(f"window_items: a window needs points >= 1 and high >= low, got {points}, [{low}, {high}]")
    values = [paired.interpolate_items(curve, axis, key, x) for x in np.linspace(low, high, points)]
    if any(v is None for v in values):
        return None
    return np.mean(values, axis=0)


def window_difference(
    runs: dict[int, dict],
    bases: dict[int, dict],
    axis: str,
    low: float,
    high: float,
    points: int = 5,
    key: str = "items",
    **bootstrap,
) -> dict:
    """The paired difference (arm minus baseline) of the window means, over the seeds both arms ran; `runs` and
    `bases` map seed -> `trl-ada-compare` record, `key` picks the held-out set ("items"; "extra_items" for the
    second). Raises when a seed's run stops short of the window: a pre-registered budget is reached by every run, or
    the study says why not."""
    seeds = sorted(set(runs) & set(bases))
    if not seeds:
        raise ValueError("window_difference: no seed ran in both arms")
    diffs = []
    for seed in seeds:
        arm, base = (window_items(r[seed]["curve"], axis, low, high, points, key) for r in (runs, bases))
        if arm is None or base is None:
            short = "the arm" if arm is None else "the baseline"
            raise ValueError(
                f"seed {seed}: {short}'s run does not reach {high:g} on {axis!r}: continue it (a rerun "
                "of trl-ada-compare continues a cut run) or shrink the window"
            )
        diffs.append(arm - base)
    # "seeds": which ones (paired_difference counts them)
    return {**paired.paired_difference(diffs, **bootstrap), "seeds": seeds, "window": [low, high], "axis": axis}


def _step_tokens(record: dict) -> np.ndarray:
    """The generated tokens by the end of each training step (1, 2, ...), interpolated from the evaluation points."""
    steps = [p["step"] for p in record["curve"]]
    tokens = [p["tokens"] for p in record["curve"]]
    return np.interp(np.arange(1, len(record["reward"]) + 1), steps, tokens)


def _fitted_rise(x: np.ndarray, y: np.ndarray, width: float) -> float | None:
    """The rise across `width` of the least-squares line through (x, y); None with fewer than 3 points."""
    keep = np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3 or np.ptp(x) == 0:
        return None
    return float(np.polyfit(x, y, 1)[0] * width)


def rise(record: dict, budget: float, axis: str = "tokens") -> dict:
    """How much one run's held-out score ("greedy") and training reward still rose at the end of `budget`: the rise
    of the least-squares line through the last quarter, [3B/4, B], across that quarter. The held-out line goes
    through the run's evaluations in the quarter and its score at B itself (interpolated between the evaluations
    around B: a run stopped by a budget ends at the first step at or past it, so its final evaluation lies just past
    B and counts almost whole); the reward's line through the steps that end in the quarter or cross B (a step's
    tokens interpolated between evaluations). None for a quantity the run cannot answer: it stops short of the
    budget, or fewer than 3 points fall in the quarter."""
    low, width = 0.75 * budget, 0.25 * budget
    curve = record["curve"]
    if not curve or curve[-1][axis] < budget:
        return {"held_out": None, "reward": None}
    xs = np.asarray([p[axis] for p in curve], dtype=float)
    ys = np.asarray([p["greedy"] for p in curve], dtype=float)
    inside = (xs >= low) & (xs < budget)
    held_out = _fitted_rise(np.append(xs[inside], budget), np.append(ys[inside], np.interp(budget, xs, ys)), width)
    reward = None
    if axis == "tokens" and record.get("reward"):
        at = _step_tokens(record)
        values = np.asarray([np.nan if r is None else r for r in record["reward"]], dtype=float)
        started = np.concatenate([[0.0], at[:-1]])  # the tokens before each step
        steps = (at >= low) & (started < budget)
        reward = _fitted_rise(at[steps], values[steps], width)
    return {"held_out": held_out, "reward": reward}


def plateau(
    records: dict[int, dict],
    budget: float,
    held_out_tolerance: float,
    reward_tolerance: float,
    axis: str = "tokens",
    replicates: int = 4000,
    seed: int = 0,
) -> dict:
    """The plateau rule for one arm's runs (seed -> record) at `budget`: per seed, whether both rises are within
    their tolerances; over seeds, the mean rises with their one-sided 95% bootstrap upper bounds (seeds resampled
    with replacement), and whether both bounds are within the tolerances.

    A seed whose line cannot be fitted (fewer than 3 evaluations or steps in the last quarter: a run of few, long
    steps) is named in `unreadable` for that quantity and left out of its bound; with no seed left the rule reads
    None. A run short of the budget is an error: the caller leaves such seeds out and names them."""
    per_seed, unreadable = {}, {"held_out": [], "reward": []}
    for s, record in sorted(records.items()):
        if not record["curve"] or record["curve"][-1][axis] < budget:
            raise ValueError(f"seed {s}: the run does not reach the budget {budget:g} on {axis!r}")
        r = rise(record, budget, axis)
        for quantity in unreadable:
            if r[quantity] is None:
                unreadable[quantity].append(s)
        over = [
            r["held_out"] is not None and r["held_out"] > held_out_tolerance,
            r["reward"] is not None and r["reward"] > reward_tolerance,
        ]
        # False as soon as a readable line is over its tolerance; unknown (None) while a line is missing
        per_seed[s] = {
            **r,
            "plateaued": False if any(over) else None if None in (r["held_out"], r["reward"]) else True,
        }
    rng = np.random.default_rng(seed)
    over_seeds = {}
    for quantity, tolerance in (("held_out", held_out_tolerance), ("reward", reward_tolerance)):
        values = np.asarray([r[quantity] for r in per_seed.values() if r[quantity] is not None])
        if not len(values):
            over_seeds[quantity] = None
            continue
        draws = values[rng.integers(0, len(values), size=(replicates, len(values)))].mean(axis=1)
        upper = float(np.percentile(draws, 95))
        over_seeds[quantity] = {
            "mean": float(values.mean()),
            "upper": upper,
            "within": upper <= tolerance,
            "seeds": len(values),
        }
    return {
        "budget": budget,
        "axis": axis,
        "tolerances": {"held_out": held_out_tolerance, "reward": reward_tolerance},
        "per_seed": per_seed,
        "seeds_plateaued": sum(r["plateaued"] is True for r in per_seed.values()),
        "unreadable": unreadable,
        "over_seeds": over_seeds,
        "plateaued": False
        if any(q is not None and not q["within"] for q in over_seeds.values())
        else None
        if None in over_seeds.values()
        else True,
    }


def holm(p_values: dict[str, float], alpha: float = 0.05) -> dict[str, dict]:
    """Holm's step-down adjustment: name -> {"p", "adjusted", "rejected"}. The k-th smallest of m p-values is scaled
    by (m - k + 1), made monotone, capped at 1; a hypothesis is rejected when its adjusted p is below `alpha`."""
    order = sorted(p_values, key=lambda name: p_values[name])
    m, running, out = len(order), 0.0, {}
    for k, name in enumerate(order):
        running = max(running, min(1.0, (m - k) * p_values[name]))
        out[name] = {"p": p_values[name], "adjusted": running, "rejected": running < alpha}
    return out
