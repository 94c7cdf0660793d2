"""Reinforce-Ada-Est (arXiv:2510.04996v3, §3.1, Algorithm 1): allocate each prompt's samples up front from its
estimated pass rate, then train on all of them with a residual weight.

Pure Python, no torch. Where the paper is silent the choices are ours, named here and in docs/knobs.md:

1. **Estimate** p_x from history, before this step: the prompt memory's decayed Beta counts ("Ada-EMA",
   `trl_ada.core.memory.PromptMemory`): at each visit `N <- lambda*N + n`, `K <- lambda*K + k`,
   `p = (K + a) / (N + a + b)`. An unseen prompt gets the prior mean (or its group's fitted prior).
2. **Allocate** (`allocate`): `N_x` proportional to `(p_x + eps) ** -exponent`, clipped to `[min_samples,
   max_samples]`, scaled so that the `N_x` sum exactly to `total`: bisection on the scale, floor, then one more sample
   to the prompts with the largest fractional remainders (ties: the earlier prompt).
3. **Generate** `N_x` samples per prompt, in one call.
4. **Advantage** (`est_advantages`), for every sample, none dropped: `A = (r - mean_x) * (mean_x + eps) **
   -(1 - exponent)`, `mean_x` the mean reward of this step's `N_x` samples. The allocation realises the weight
   `(p + eps) ** -exponent` by sampling, the residual factor the rest, so each prompt's total weight stays `1 / p`
   (the gradient of `E[log p]`): exponent 0.5 gives the paper's hybrid, `(mean + eps) ** -0.5`; exponent 1.0 its
   "implicit" arm and the authors' code, no residual weight. No division by the std; a prompt whose rewards are all
   equal gets 0; an unscorable sample (NaN reward) is left out of `mean_x` and gets 0, as in GRPOTrainer.
5. **Update** the estimator with this step's `(N_x, right answers)`.

    >>> allocate([0.05, 0.2, 0.5, 0.9], total=32, min_samples=2)   # the hard prompt gets the most
    [15, 8, 5, 4]
    >>> [round(a, 3) for a in est_advantages([1.0, 0.0, 0.0, 0.0])]  # mean 0.25: residual weight 2
    [1.5, -0.5, -0.5, -0.5]
"""

from __future__ import annotations

import math
from collections.abc import Sequence


__all__ = ["allocate", "allocation_metrics", "allocation_weights", "est_advantages"]


def allocation_weights(pass_rates: Sequence[float], exponent: float = 0.5, eps: float = 1e-6) -> list[float]:
    """`(p + eps) ** -exponent` per prompt: the unnormalised share of the budget each prompt asks for."""
    return [(max(float(p), 0.0) + eps) ** -exponent for p in pass_rates]


def _clipped_sum(scale: float, weights: Sequence[float], low: int, high: float) -> float:
    return sum(min(max(scale * w, low), high) for w in weights)


def allocate(
    pass_rates: Sequence[float],
    total: int,
    exponent: float = 0.5,
    eps: float = 1e-6,
    min_samples: int = 2,
    max_samples: int | None = None,
) -> list[int]:
    """Samples per prompt: proportional to `(p + eps) ** -exponent`, within `[min_samples, max_samples]`, summing to
    exactly `total`. Deterministic (no randomness, ties by position), so every process computes the same numbers.

    `max_samples=None`: no upper clip (the authors' code). Raises if the bounds cannot hold `total`.
    """
    count = len(pass_rates)
    high = math.inf if max_samples is None else max_samples
    if count == 0:
        if total != 0:
            raise ValueError(f"no prompts to allocate total={total} samples to.")
        return []
    if min_samples * count > total or high * count < total:
        raise ValueError(
            f"cannot allocate total={total} samples to {count} prompts within [{min_samples}, {max_samples}]: "
            f"the total must lie between {min_samples * count} and {high * count}."
        )
    weights = allocation_weights(pass_rates, exponent, eps)
    # The clipped sum grows with the scale; bisect for the scale at which it reaches `total`. At `upper` every
    # prompt's unclipped share is >= total, so the clipped sum is >= total (the bounds were checked above).
    lower, upper = 0.0, total / min(weights)
    for _ in range(200):
        middle = (lower + upper) / 2
        if _clipped_sum(middle, weights, min_samples, high) < total:
            lower = middle
        else:
            upper = middle
        if upper - lower <= 1e-12 * upper:
            break
    shares = [min(max(lower * w, min_samples), high) for w in weights]
    counts = [int(math.floor(s)) for s in shares]
    remainder = total - sum(counts)
    # One more sample each to the largest fractional remainders; a prompt at the cap cannot take one.
    order = sorted(range(count), key=lambda i: (-(shares[i] - counts[i]), i))
    while remainder > 0:
        given = 0
        for i in order:
            if remainder == 0:
                break
            if counts[i] < high:
                counts[i] += 1
                remainder -= 1
                given += 1
        if given == 0:  # unreachable: the bounds were checked above
            raise AssertionError("allocation could not place every sample")
    return counts


def est_advantages(
    rewards: Sequence[float], eps: float = 1e-6, residual_exponent: float = 0.5, atol: float = 1e-6
) -> list[float]:
    """One prompt's advantages: `(r - mean) * (mean + eps) ** -residual_exponent` for every sample.

    `mean` is the mean of the finite rewards (NaN marks an unscorable sample: left out, advantage 0). A prompt whose
    finite rewards all lie within `atol` gets 0 everywhere. Rewards are meant to lie in [0, 1] (a pass rate); a
    negative mean is floored at 0 in the weight.
    """
    finite = [float(r) for r in rewards if not math.isnan(r)]
    if not finite or max(finite) - min(finite) <= atol:
        return [0.0] * len(rewards)
    mean = sum(finite) / len(finite)
    weight = (max(mean, 0.0) + eps) ** -residual_exponent
    return [0.0 if math.isnan(r) else (float(r) - mean) * weight for r in rewards]


def allocation_metrics(
    pass_rates: Sequence[float], counts: Sequence[int], mean_rewards: Sequence[float], hard: float = 0.1
) -> dict[str, float]:
    """What one step's allocation did (`sampling/est/*`): the spread of N_x, the share of the samples spent on prompts
    predicted hard (p_x < `hard`), and the correlation of N_x with the mean reward the prompts then showed (negative
    when the estimate sends samples where they are needed)."""
    ordered = sorted(counts)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    pairs = [(c, m) for c, m in zip(counts, mean_rewards) if not math.isnan(m)]
    return {
        "sampling/est/samples_min": float(ordered[0]),
        "sampling/est/samples_median": float(median),
        "sampling/est/samples_max": float(ordered[-1]),
        "sampling/est/share_predicted_hard": sum(c for c, p in zip(counts, pass_rates) if p < hard) / sum(counts),
        "sampling/est/predicted_pass_rate": sum(pass_rates) / len(pass_rates),
        "sampling/est/samples_reward_corr": _correlation([c for c, _ in pairs], [m for _, m in pairs]),
    }


def _correlation(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Pearson's r; NaN when either side is constant (e.g. the uniform allocation of a first epoch)."""
    if len(xs) < 2:
        return float("nan")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")
