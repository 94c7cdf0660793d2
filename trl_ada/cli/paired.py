"""Paired differences between two arms of a comparison, with a 95% bootstrap interval (`trl-ada-compare`).

Two arms run with the same seed share their initial weights and prompt order, and they are evaluated on the same
held-out questions, so a comparison pairs them twice: by seed and by question. `paired_difference` takes the matrix
of differences d[seed][question] (arm minus baseline, each question's score interpolated at the comparison point) and
resamples both, seeds and questions, with replacement (a two-level bootstrap): the interval then holds the spread
between seeds (the luck of a run) and the spread between questions (the luck of the held-out set). With one seed only
the questions are resampled and the interval says nothing about seed luck: the report says how many seeds it holds.
Pure numpy; no model.
"""

from __future__ import annotations

import numpy as np


NO_DIFFERENCE = "no difference measured"


def paired_difference(
    diffs, weights=None, replicates: int = 4000, seed: int = 0, level: float = 0.95, margin: float | None = None
) -> dict:
    """Mean of `diffs` (seeds x questions; each question weighted by `weights`, default equal) and its bootstrap
    interval, resampling seeds and questions.

    Returns {"mean", "low", "high", "p", "seeds", "questions", "verdict"}; verdict is "ahead" or "behind" when the
    interval excludes 0, else NO_DIFFERENCE; p is the two-sided bootstrap p-value (twice the share of resampled
    means on the far side of 0, at most 1), for a multiple-comparison correction over several endpoints. With an
    equivalence `margin` it adds "p_equivalent", the two one-sided tests' p-value that the difference lies within
    (-margin, +margin): the larger share of resampled means at or beyond either bound (below 0.05 exactly when the
    90% interval lies inside the margin)."""
    d = np.asarray(diffs, dtype=float)
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"paired_difference: a seeds x questions matrix, got shape {d.shape}")
    if not np.isfinite(d).all():  # a NaN would make both tails empty: p = 0
        raise ValueError(
            "paired_difference: a difference is NaN or infinite (a question scored as None?): score "
            "every question of both runs"
        )
    seeds, questions = d.shape
    c = np.ones(questions) if weights is None else np.asarray(weights, dtype=float)
    rng = np.random.default_rng(seed)
    w = rng.multinomial(seeds, [1.0 / seeds] * seeds, size=replicates)  # how often each seed is drawn
    v = rng.multinomial(questions, [1.0 / questions] * questions, size=replicates) * c  # each question, weighted
    stats = np.einsum("bs,sq,bq->b", w, d, v) / (seeds * v.sum(axis=1))
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(stats, [tail, 100 - tail])
    mean = float((d @ c).mean() / c.sum())
    verdict = "ahead" if low > 0 else "behind" if high < 0 else NO_DIFFERENCE
    p = min(1.0, 2.0 * min(float(np.mean(stats <= 0)), float(np.mean(stats >= 0))))
    result = {
        "mean": mean,
        "low": float(low),
        "high": float(high),
        "p": p,
        "seeds": seeds,
        "questions": questions,
        "verdict": verdict,
    }
    if margin is not None:
        result["p_equivalent"] = max(float(np.mean(stats >= margin)), float(np.mean(stats <= -margin)))
    return result


def interpolate_items(curve, axis, key, x):
    """Each question's score at x on `axis` ("step", "samples" or "seconds"), linear between the curve points that
    hold `key` (a per-question list); None when x lies outside them."""
    points = [p for p in curve if key in p]
    xs = [p[axis] for p in points]
    if not points or x < xs[0] or x > xs[-1]:
        return None
    for left, right in zip(points, points[1:]):
        if left[axis] <= x <= right[axis]:
            if right[axis] == left[axis]:
                return np.asarray(right[key], dtype=float)
            t = (x - left[axis]) / (right[axis] - left[axis])
            return (1 - t) * np.asarray(left[key], dtype=float) + t * np.asarray(right[key], dtype=float)
    return np.asarray(points[-1][key], dtype=float)  # a single point, at x


def describe(result: dict, scale: float = 100.0) -> str:
    """'+4.1 [+0.8, +7.5] ahead' in points; the verdict spelled out when the interval contains 0."""
    return (
        f"{scale * result['mean']:+.1f} [{scale * result['low']:+.1f}, {scale * result['high']:+.1f}] "
        f"{result['verdict']}"
    )
