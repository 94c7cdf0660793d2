"""DAPO's dynamic sampling (Yu et al., arXiv:2503.14476): train only on groups with signal, refill the rest.

After a step's prompts are sampled, a prompt whose kept group has no learning signal (all rewards equal within
`atol`: all right or all wrong) is dropped, and prompts drawn from the refill stream are sampled in its place, batch
after batch, until the step holds `target` groups with signal or `max_refill_batches` extra batches were sampled.
At the cap the step trains on what there is: every group with signal, then as many dropped groups as it takes to
fill the step (their advantages are whatever the estimator gives a uniform group: zero for GRPO's, and for the
pooled one with 0/1 rewards). It never loops forever and never fails for want of signal.

A refill batch is sized by the signal rate seen so far in the step, so that it is expected to close the gap in one
go (`ceil(shortfall / rate)` prompts, at most `target`; `target` when no group had signal yet), rather than DAPO's
fixed whole batches, which overshoot and throw away groups with signal.

Signal is read on the scorable rewards of the kept group: an unscorable sample (NaN reward) is left out, as TRL's
nan-aware statistics leave it out, so a group whose scorable rewards are all equal, or with fewer than two of them,
has none (its advantages are all 0 in GRPOTrainer too).

It composes with any sampler: `sample` may draw n i.i.d. completions per prompt (then this is DAPO exactly) or run
Reinforce-Ada's rounds (then only the prompts that even the rounds could not resolve are dropped). Pure Python, and
a simulation API like `run_adaptive_sampling`:

    >>> import itertools, random
    >>> from trl_ada.core.sampling import EliminationRule, run_adaptive_sampling
    >>> pass_rate = [0.0, 1.0, 0.5, 0.4] * 25                    # prompt id -> pass rate
    >>> rng, fresh = random.Random(0), itertools.count(4)
    >>> def sample(prompts):                                    # n = 4 i.i.d. samples each: DAPO
    ...     sample_round = lambda active, k: [[float(rng.random() < pass_rate[prompts[i]]) for _ in range(k)]
    ...                                       for i in active]
    ...     return run_adaptive_sampling(len(prompts), sample_round, EliminationRule(4, round_repeat=4, max_rounds=1))
    >>> filled = fill_with_signal([0, 1, 2, 3], lambda k: [next(fresh) for _ in range(k)], sample, target=4,
    ...                           max_refill_batches=10)
    >>> len(filled.chosen), filled.without_signal, filled.refill_batches > 0
    (4, 0, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trl_ada.core.sampling import PromptResult


__all__ = ["Filled", "fill_with_signal", "has_signal"]


def has_signal(rewards: Sequence[float], atol: float = 1e-6) -> bool:
    """A group teaches something iff its (scorable) rewards are not all equal within `atol`."""
    finite = [r for r in rewards if not math.isnan(r)]
    return len(finite) >= 2 and max(finite) - min(finite) > atol


@dataclass
class Filled:
    """What a step sampled and which groups it trains on."""

    sampled: list[tuple[int, PromptResult]]
    """Every prompt sampled this step, in sampling order: (prompt handle, its result)."""
    chosen: list[int]
    """Indices into `sampled` of the `target` groups to train on, in sampling order: the first `target` with
    signal, and at the cap, the first dropped ones to fill the step."""
    refill_batches: int
    """Extra batches sampled beyond the first."""
    without_signal: int
    """Chosen groups without signal (non-zero only when the cap was reached)."""


def fill_with_signal(
    first: list[int],
    draw: Callable[[int], list[int]],
    sample: Callable[[list[int]], list[PromptResult]],
    target: int,
    max_refill_batches: int,
    atol: float = 1e-6,
) -> Filled:
    """Sample `first`, then refill from `draw` until `target` groups have signal or the cap is reached.

    Args:
        first: handles of the step's own prompts (at least `target` of them).
        draw: `draw(k)` returns the handles of `k` more prompts (the refill stream).
        sample: samples a list of prompts, one `PromptResult` each (its `selected` group is what would be trained).
        target: groups the step trains on.
        max_refill_batches: extra batches at most; 0 samples `first` only and drops nothing.
        atol: rewards closer than this count as equal.
    """
    if len(first) < target:
        raise ValueError(f"first holds {len(first)} prompts, fewer than target={target}.")
    sampled = list(zip(first, sample(first)))
    refill_batches = 0
    while True:
        with_signal = [i for i, (_, result) in enumerate(sampled) if has_signal(result.selected_rewards, atol)]
        shortfall = target - len(with_signal)
        if shortfall <= 0 or refill_batches == max_refill_batches:
            break
        rate = len(with_signal) / len(sampled)
        count = target if rate == 0 else min(target, math.ceil(shortfall / rate))
        batch = draw(count)
        sampled += zip(batch, sample(batch))
        refill_batches += 1
    signal = set(with_signal)
    without = [i for i in range(len(sampled)) if i not in signal]
    missing = max(0, target - len(with_signal))
    return Filled(sampled, sorted(with_signal[:target] + without[:missing]), refill_batches, missing)
