"""Budgeted adaptive sampling: a hard cap on the completions a step generates, spent where it buys signal.

A step trains on `target` groups of n and may generate at most `budget` completions in all (`sampling_budget *
target`, padding for multi-process splitting included). Every trained prompt needs its n samples, so at a budget of
n per prompt (GRPO parity) not one sample can be wasted and the only lever is *which* prompts get sampled; above n,
the surplus buys top-ups. What it optimises, step by step:

1. Screen (free). A group teaches something only if it is mixed. With a remembered pass-rate posterior Beta(a, b)
   (`trl_ada.core.memory`), the chance that n fresh samples all agree is the Beta-binomial predictive
   `P(uniform) = [B(a+n, b) + B(a, b+n)] / B(a, b)`. A candidate with `P(uniform) > skip_threshold` (default 0.5:
   its group is more likely useless than useful) is skipped before any rollout, except with probability
   `explore_floor` (a deterministic coin), and replaced by the next candidate (the step's own prompts first, then
   the refill stream). Every prompt is still sampled with probability at least `explore_floor` per visit, so one the
   policy starts to solve is seen again; a prompt nothing is known about (never sampled, and no group prior,
   `trl_ada.core.memory.GroupPrior`, for its kind yet) is always taken. With equal cost per prompt
   (n samples), accepting the prompts whose expected signal clears a bar is the knapsack optimum; a softer rule
   (skip with probability P(uniform), as GRESO-like methods do) kept too many extreme prompts in simulation. If the candidates run out (`max_candidate_batches`), the skipped ones least likely to be
   uniform fill the step. The caller should age what it remembers of the skipped prompts (the trainer multiplies
   their counts by `budget_skip_decay`, `PromptMemory.forget`): a prompt skipped for a while becomes uncertain and
   is sampled again, so one whose pass rate drifted into the middle is not starved (in the simulation, the floor
   alone left 13% of the prompts that ended intermediate untrained after the first epoch; with the ageing, none).
2. First round: n samples for every accepted prompt (every trained group has its n).
3. Top-ups, while budget remains: prompts whose pool is still uniform (no signal) get `top_up` more samples each,
   most promising first. A prompt's score is the posterior predictive chance that `top_up` more samples bring the
   missing class, times a bounded tilt `1 + 0.5 * (1 - 2 * p_hat)` in [0.5, 1.5] toward hard prompts (a rare right
   answer on a hard prompt is the most valuable sample: its pooled advantage is 1 - p). This is the greedy solution
   of a knapsack of equal-cost items: maximise the expected number of mixed groups per sample spent. Rounds repeat
   until no uniform pool is left or the budget cannot pay for one more top-up.
4. Selection: the kept group is n samples from the pool by Reinforce-Ada's rule at exit (floor(n/2) positives when
   there are both, earliest first); advantages use the pooled estimator over everything sampled for the prompt this
   step. When the pool holds only the n first samples, the pooled baseline is simply the group's own mean.

Unscorable samples (NaN reward) are no trials: a pool is mixed when it holds a scorable positive and a scorable
negative, the posterior takes in only scorable samples, and selection completes a group with unscorable samples only
when the scorable ones run out (`trl_ada.core.sampling`). A pool with no scorable sample is as uniform as one with no
positive, and is topped up like one (the posterior, unchanged by it, scores it).

Pure Python (no torch), usable as a simulation API like `run_adaptive_sampling`:

    >>> import random
    >>> rng = random.Random(0)
    >>> rates = {0: 0.0, 1: 0.5, 2: 0.05, 3: 1.0}
    >>> def sample_round(prompts, k):
    ...     return [[float(rng.random() < rates[p]) for _ in range(k)] for p in prompts]
    >>> out = run_budgeted_sampling([0, 1, 2, 3], draw=lambda k: [], predict=lambda p: (1.0, 1.0, 0),
    ...                             coin=lambda p: rng.random(), sample_round=sample_round, target=4, budget=24)
    >>> out.spent <= 24, [len(r.selected) for _, r in out.sampled]
    (True, [4, 4, 4, 4])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trl_ada.core.sampling import PromptResult, count_signs, select_at_exit


__all__ = [
    "Budgeted",
    "predictive_uniform",
    "predictive_missing_class",
    "remembered_posterior",
    "run_budgeted_sampling",
    "step_budget",
    "step_coin",
]


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def predictive_uniform(a: float, b: float, n: int) -> float:
    """P(n fresh samples are all right or all wrong) for a pass rate p ~ Beta(a, b)."""
    return math.exp(_log_beta(a + n, b) - _log_beta(a, b)) + math.exp(_log_beta(a, b + n) - _log_beta(a, b))


def predictive_missing_class(a: float, b: float, k: int, have_positive: bool) -> float:
    """P(k more samples include the class the pool lacks): a wrong one if it has only right ones, and vice versa."""
    if have_positive:  # need a negative: 1 - E[p^k]
        return 1.0 - math.exp(_log_beta(a + k, b) - _log_beta(a, b))
    return 1.0 - math.exp(_log_beta(a, b + k) - _log_beta(a, b))


@dataclass
class Budgeted:
    """What a budgeted step sampled."""

    sampled: list[tuple[int, PromptResult]]
    """The accepted prompts, in acceptance order: (prompt handle, result); each is trained."""
    skipped: list[int] = field(default_factory=list)
    """Candidates screened out before any rollout."""
    spent: int = 0
    """Completions generated, padding included."""
    top_up_rounds: int = 0
    candidate_batches: int = 0
    """Refill batches drawn beyond the step's own prompts."""


def run_budgeted_sampling(
    first: Sequence[int],
    draw: Callable[[int], list[int]],
    predict: Callable[[int], tuple[float, float, int]],
    coin: Callable[[int], float],
    sample_round: Callable[[list[int], int], Sequence[Sequence[float]]],
    target: int,
    budget: int,
    num_generations: int = 4,
    top_up: int = 2,
    skip_threshold: float = 0.5,
    explore_floor: float = 0.05,
    max_candidate_batches: int = 10,
    positive_threshold: float = 0.7,
    world_size: int = 1,
) -> Budgeted:
    """Sample `target` prompts within `budget` completions; see the module docstring for the rule.

    Args:
        first: the step's own prompt handles (at least `target`).
        draw: `draw(k)` returns `k` more candidate handles (the refill stream); called with k = 1, so that only the
            candidates the step screens are drawn.
        predict: `predict(handle)` returns (a, b, evidence): the Beta posterior of its pass rate and how much
            informs it (its visits, plus one when its group's prior is known; 0: nothing, it is then always sampled).
        coin: `coin(handle)` returns a uniform number in [0, 1), deterministic for the step (the screening coin).
        sample_round: `sample_round(handles, k)` draws k fresh samples for each handle, returns their rewards.
        target: prompts (groups of `num_generations`) to train on.
        budget: completions the step may generate in all, padding included.
        top_up: samples per prompt per top-up round.
        skip_threshold: a remembered candidate whose predicted P(uniform) exceeds this is skipped...
        explore_floor: ...except with this probability: every candidate is sampled with at least this probability.
        max_candidate_batches: refill candidates to screen at most, in batches of `target` (the count reported
            as `candidate_batches`: batches begun).
        world_size: processes the samples of a round are split over; a round of k samples costs
            ceil(k / world_size) * world_size (the padding is generated too).
    """
    n = num_generations
    seen: set[int] = set()
    if budget < _cost(n * target, world_size):
        raise ValueError(f"budget={budget} cannot pay for {n} samples for each of the {target} prompts.")
    if not 0.0 < explore_floor <= 1.0:
        raise ValueError(f"explore_floor={explore_floor!r} must be in (0, 1].")
    if top_up < 1:
        raise ValueError(f"top_up={top_up!r} must be >= 1.")

    # 1. Screen the candidates: the step's own prompts, then refill batches.
    out = Budgeted(sampled=[])
    accepted: list[int] = []
    skipped: list[tuple[float, int]] = []  # (P(uniform), handle)
    queue, refills = list(first), 0
    while len(accepted) < target:
        if not queue:
            if refills == max_candidate_batches * target:
                break
            # One candidate at a time: a refill batch is `target` of them, but a prompt the step does not reach
            # stays in the stream for a later step instead of being drawn and never screened.
            queue = list(draw(1))
            refills += 1
            out.candidate_batches = -(-refills // target)
        handle = queue.pop(0)
        if handle in seen:
            raise ValueError(f"prompt handle {handle} was offered twice: handles must be unique within a step.")
        seen.add(handle)
        a, b, evidence = predict(handle)
        p_uniform = predictive_uniform(a, b, n) if evidence > 0 else 0.0
        if p_uniform > skip_threshold and coin(handle) >= explore_floor:
            skipped.append((p_uniform, handle))
        else:
            accepted.append(handle)
    skipped.sort(key=lambda item: item[0])  # stable: ties keep their screening order
    while len(accepted) < target:  # out of candidates: the least likely to be uniform fill the step
        accepted.append(skipped.pop(0)[1])
    out.skipped = [handle for _, handle in skipped]

    # 2. First round: every trained prompt gets its n.
    pools = {handle: [] for handle in accepted}
    out.spent += _round(sample_round, pools, accepted, n, world_size)

    # 3. Top-ups on pools without signal, most promising first, while the budget pays for them.
    while True:
        affordable = min(len(accepted), _affordable(budget - out.spent, top_up, world_size))
        if affordable == 0:
            break
        scored = []
        for handle in accepted:
            positives, negatives = count_signs(pools[handle], positive_threshold)
            if positives > 0 and negatives > 0:
                continue  # already mixed
            a, b, _ = predict(handle)
            a, b = a + positives, b + negatives  # unscorable samples are no trials
            p_hat = a / (a + b)
            gain = predictive_missing_class(a, b, top_up, have_positive=positives > 0)
            scored.append((-gain * (1.0 + 0.5 * (1.0 - 2.0 * p_hat)), handle))
        if not scored:
            break
        scored.sort(key=lambda item: item[0])
        chosen = [handle for _, handle in scored[:affordable]]
        out.spent += _round(sample_round, pools, chosen, top_up, world_size)
        out.top_up_rounds += 1

    # 4. Keep n per prompt by Reinforce-Ada's selection rule.
    for handle in accepted:
        pool = pools[handle]
        positives, negatives = count_signs(pool, positive_threshold)
        result = PromptResult(
            pool_rewards=pool, rounds=1 + (len(pool) - n) // top_up, finished=positives > 0 and negatives > 0
        )
        result.selected = select_at_exit(pool, n, positive_threshold)
        out.sampled.append((handle, result))
    return out


def step_budget(per_prompt: float, prompts: int) -> int:
    """Completions a step of `prompts` may generate at `per_prompt` a prompt (`sampling_budget`): the floor of the
    product, as written in decimals (4.1 x 30 is 123, where the float product is 122.99999999999999)."""
    return math.floor(round(per_prompt * prompts, 9))


def _cost(samples: int, world_size: int) -> int:
    return math.ceil(samples / world_size) * world_size


def _affordable(remaining: int, top_up: int, world_size: int) -> int:
    """The most prompts a top-up round can serve for `remaining` completions, padding included."""
    prompts = remaining // top_up
    while prompts > 0 and _cost(prompts * top_up, world_size) > remaining:
        prompts -= 1
    return prompts


def _round(sample_round, pools: dict[int, list[float]], handles: list[int], k: int, world_size: int) -> int:
    rewards = sample_round(list(handles), k)
    if len(rewards) != len(handles) or any(len(r) != k for r in rewards):
        raise ValueError(f"sample_round must return {k} rewards for each of the {len(handles)} prompts.")
    for handle, new in zip(handles, rewards):
        pools[handle].extend(float(r) for r in new)
    return _cost(k * len(handles), world_size)


def remembered_posterior(prior_alpha: float, prior_beta: float, memory=None, group_prior=None):
    """`predict` for `run_budgeted_sampling` from what the trainer remembers: `posterior(key, group)` returns the
    Beta pseudo-counts (a, b) of a prompt's pass rate and how many visits back them. The prior is the prompt's group
    prior (`trl_ada.core.memory.GroupPrior`) when its group is known, else the flat one; the prompt's own remembered
    counts (`trl_ada.core.memory.PromptMemory`) update it."""

    def posterior(key: int, group: str | None) -> tuple[float, float, int]:
        a, b, evidence = prior_alpha, prior_beta, 0
        if group_prior is not None and group is not None:
            fitted = group_prior.prior(group)
            if fitted is not None:
                (a, b), evidence = fitted, 1
        if memory is not None:
            alpha, beta, visits = memory.posterior(key)
            a, b = a + alpha - prior_alpha, b + beta - prior_beta
            evidence += visits
        return a, b, evidence

    return posterior


def step_coin(seed: int, global_step: int, key: int, position: int) -> float:
    """The explore-floor coin of a candidate: uniform in [0, 1), deterministic for (seed, step, prompt, position),
    so identical on every rank and after a resume."""
    import hashlib

    data = f"{seed}/{global_step}/{key}/{position}".encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") / 2.0**64
