"""Reinforce-Ada's adaptive sampling: successive elimination over rounds, then selection of a group of n.

Pure Python, no torch: the trainer calls this module and so can anyone planning a sampling budget on a laptop.
Each function below is one rule of the algorithm (arXiv:2510.04996; docs/trl.md); the default
behaviour reproduces the authors' reference implementation (RLHFlow/Reinforce-Ada) exactly:

1. every prompt starts active with an empty pool;
2. each round, every active prompt draws `round_repeat` fresh samples, ALL of which join its pool;
3. after the whole round, a prompt that meets the exit rule is selected and retired;
4. prompts still active after `max_rounds` rounds are kept (never dropped) and get the fallback selection.

Unscorable samples (NaN reward: every reward function returned None, as TRL 1.16's GRPOTrainer marks them) are
neither positive nor negative: they join the pool (they were generated) but count toward no exit rule, and selection
takes them only when the scorable ones cannot fill a group of n (then earliest first, after the scorable ones; their
advantage is 0, as in GRPOTrainer). With finite rewards nothing changes: the reference's rules exactly. A prompt whose
samples are all unscorable never meets an exit rule, so it is sampled for `max_rounds` like any unresolved prompt and
gets a group of unscorable samples (all advantages 0: what GRPOTrainer trains on for it); a round of them does not
retire it early, since unscorability can be per sample (a verifier's timeout, a reward that skips some completions),
and a later round may still bring signal (docs/knobs.md, "Unscorable completions").

Example (plan a budget with a simulated policy, no model needed):

    >>> import random
    >>> from trl_ada.core.sampling import EliminationRule, run_adaptive_sampling
    >>> pass_rate = [0.0, 0.05, 0.5, 1.0]
    >>> rng = random.Random(0)
    >>> def sample_round(active, k):
    ...     return [[float(rng.random() < pass_rate[i]) for _ in range(k)] for i in active]
    >>> results = run_adaptive_sampling(4, sample_round, EliminationRule(num_generations=4))
    >>> [len(r.selected) for r in results]
    [4, 4, 4, 4]
    >>> results[3].finished, results[3].rounds    # always right: never balanced, sampled every round
    (False, 4)
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


CHOICES = ("balanced", "positive_focused")
SELECTIONS = ("earliest", "random")

__all__ = [
    "CHOICES",
    "SELECTIONS",
    "EliminationRule",
    "PromptResult",
    "PromptRounds",
    "normalize_choice",
    "is_positive",
    "is_scorable",
    "count_signs",
    "exit_rule",
    "select_at_exit",
    "select_fallback",
    "selection_rng",
    "run_adaptive_sampling",
]


def normalize_choice(choice: str) -> str:
    """Accept the paper's README spelling ("positive-focused") as well as the reference code's."""
    normalized = choice.strip().lower().replace("-", "_")
    if normalized not in CHOICES:
        raise ValueError(f"reinforce_ada_choice={choice!r} is not one of {CHOICES}.")
    return normalized


def is_positive(reward: float, positive_threshold: float) -> bool:
    """Strictly above the threshold. A scorable reward equal to or below it is negative; NaN (an unscorable sample)
    is neither (`is_scorable`)."""
    return reward > positive_threshold


def is_scorable(reward: float) -> bool:
    """False for NaN: a completion every reward function returned None for (TRL's "unscorable")."""
    return not math.isnan(reward)


def count_signs(pool_rewards: Sequence[float], positive_threshold: float) -> tuple[int, int]:
    """(positives, negatives) of a pool, scorable samples only: an unscorable one counts as neither."""
    num_pos = num_scorable = 0
    for r in pool_rewards:
        if is_scorable(r):
            num_scorable += 1
            num_pos += is_positive(r, positive_threshold)
    return num_pos, num_scorable - num_pos


def exit_rule(num_pos: int, num_neg: int, num_generations: int, choice: str) -> bool:
    """Whether a pool holds enough signal to retire its prompt (checked only after a full round)."""
    if choice == "balanced":
        half = num_generations // 2
        return num_pos >= half and num_neg >= num_generations - half
    if choice == "positive_focused":
        return num_pos >= 1
    raise ValueError(f"unknown choice {choice!r}; expected one of {CHOICES}")


def _split(pool_rewards: Sequence[float], positive_threshold: float) -> tuple[list[int], list[int], list[int]]:
    """Pool indices of the positives, the (scorable) negatives and the unscorable samples, each in pool order."""
    positives = [i for i, r in enumerate(pool_rewards) if is_positive(r, positive_threshold)]
    negatives = [i for i, r in enumerate(pool_rewards) if is_scorable(r) and not is_positive(r, positive_threshold)]
    unscorable = [i for i, r in enumerate(pool_rewards) if not is_scorable(r)]
    return positives, negatives, unscorable


def _pick(indices: list[int], k: int, rng: random.Random | None) -> list[int]:
    # Earliest-generated first (the reference); a seeded random subset is the opt-in deviation.
    if rng is None:
        return indices[:k]
    return sorted(rng.sample(indices, k))


def select_at_exit(
    pool_rewards: Sequence[float],
    num_generations: int,
    positive_threshold: float,
    rng: random.Random | None = None,
) -> list[int]:
    """Group of `num_generations` pool indices for a prompt that met its exit rule (same rule for both choices).

    Aims at floor(n/2) positives; a shortfall is filled with more positives if there are any left, otherwise with
    more negatives. Positives come first, then negatives. Only if the scorable samples cannot fill the group (fewer
    than n of them, possible only with unscorable ones in the pool) do unscorable samples complete it, last.
    """
    positives, negatives, unscorable = _split(pool_rewards, positive_threshold)
    take_pos = min(num_generations // 2, len(positives))
    take_neg = min(num_generations - take_pos, len(negatives))
    shortfall = num_generations - take_pos - take_neg
    if shortfall > 0:
        if len(positives) > take_pos:
            take_pos += min(shortfall, len(positives) - take_pos)
        elif len(negatives) > take_neg:
            take_neg += min(shortfall, len(negatives) - take_neg)
    return (
        _pick(positives, take_pos, rng)
        + _pick(negatives, take_neg, rng)
        + _fill(unscorable, num_generations - take_pos - take_neg, rng)
    )


def _fill(unscorable: list[int], shortfall: int, rng: random.Random | None) -> list[int]:
    """Unscorable samples completing a group the scorable ones could not fill (every scorable one is already in it);
    earliest first, or a seeded random subset under random selection. Empty for a pool without unscorable ones."""
    return _pick(unscorable, min(max(shortfall, 0), len(unscorable)), rng) if unscorable else []


def select_fallback(
    pool_rewards: Sequence[float],
    num_generations: int,
    positive_threshold: float,
    choice: str,
    rng: random.Random | None = None,
) -> list[int]:
    """Group for a prompt that never met its exit rule within `max_rounds` (it is kept, never dropped).

    The targets and shortfall rule read the scorable samples only (positive_focused's share of positives is over
    them); unscorable samples complete the group, last, only when the scorable ones run out.
    """
    positives, negatives, unscorable = _split(pool_rewards, positive_threshold)
    take = min(num_generations, len(pool_rewards))
    if choice == "balanced":
        take_pos = num_generations // 2
        take_neg = num_generations - take_pos
    elif choice == "positive_focused":
        # The reference's float expression, kept as is so rounding matches it bit for bit (without unscorable
        # samples the scorable count is the pool size).
        scorable = len(positives) + len(negatives)
        take_pos = math.ceil(len(positives) / scorable * num_generations) if scorable else 0
        take_pos = max(1, min(take - 1, take_pos))
        take_neg = take - take_pos
    else:
        raise ValueError(f"unknown choice {choice!r}; expected one of {CHOICES}")
    take_pos = min(take_pos, len(positives))
    take_neg = min(take_neg, len(negatives))
    shortfall = take - take_pos - take_neg
    extra_pos = min(shortfall, len(positives) - take_pos)
    take_pos += extra_pos
    take_neg += min(shortfall - extra_pos, len(negatives) - take_neg)
    return (
        _pick(positives, take_pos, rng)
        + _pick(negatives, take_neg, rng)
        + _fill(unscorable, take - take_pos - take_neg, rng)
    )


@dataclass
class PromptResult:
    """What adaptive sampling did for one prompt."""

    pool_rewards: list[float] = field(default_factory=list)
    """Every reward of the prompt's pool, in generation order (round 1 first)."""
    selected: list[int] = field(default_factory=list)
    """Indices into `pool_rewards` of the kept group: positives first, then negatives, then (only when the scorable
    samples run out) unscorable ones."""
    rounds: int = 0
    """Rounds the prompt was sampled in: `sampling/rounds_mean`, `rounds_max` and `finished_round_1` read it (a
    sampler that samples a prompt in one call reports 1). `sampling/iid_reward` does not: it reads each prompt's
    first `context.sample` call."""
    finished: bool = False
    """True if it met the exit rule; False if it got the fallback selection after `max_rounds`: `sampling/unfinished`
    and `finished_round_1` read it (a sampler without an exit rule reports True)."""

    @property
    def selected_rewards(self) -> list[float]:
        return [self.pool_rewards[i] for i in self.selected]


def selection_rng(selection: str, seed: int, prompt: int) -> random.Random | None:
    """The generator of one prompt's random selection (None for "earliest", the reference).

    Seeded by (seed, prompt) alone, never shared between prompts: a prompt's group then does not depend on which other
    prompts retired before it, so a driver that retires prompts in the order their samples finish
    (`trl_ada.core.pipelined`) selects exactly what the synchronous driver selects.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"selection={selection!r} is not one of {SELECTIONS}.")
    if selection == "earliest":
        return None
    digest = hashlib.blake2b(f"{seed}/{prompt}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


@dataclass(frozen=True)
class EliminationRule:
    """The settings of successive elimination, shared by every driver; validated (and `choice` normalised) when built.

    Args:
        num_generations: size n of the final group of each prompt.
        round_repeat: samples M drawn per active prompt per round.
        max_rounds: rounds R at most.
        choice: exit rule, "balanced" or "positive_focused".
        positive_threshold: a reward strictly above it is a positive.
        selection: "earliest" (the reference) or "random" (opt-in deviation, seeded by `seed` and the prompt's number:
            see `selection_rng`).
        seed: seed of the random selection; unused with "earliest".
    """

    num_generations: int = 4
    round_repeat: int = 8
    max_rounds: int = 4
    choice: str = "balanced"
    positive_threshold: float = 0.7
    selection: str = "earliest"
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "choice", normalize_choice(self.choice))
        if self.selection not in SELECTIONS:
            raise ValueError(f"selection={self.selection!r} is not one of {SELECTIONS}.")
        if self.round_repeat < self.num_generations:
            raise ValueError(
                f"round_repeat ({self.round_repeat}) must be >= num_generations ({self.num_generations})."
            )
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds ({self.max_rounds}) must be >= 1.")

    def prompt(self, number: int) -> PromptRounds:
        """A fresh prompt under this rule; `number` keys its random selection (`selection_rng`)."""
        return PromptRounds(self, selection_rng(self.selection, self.seed, number))


class PromptRounds:
    """One prompt's successive elimination (rules 1-4 of the module docstring): its pool grows by whole rounds of
    `round_repeat` rewards, in sample order; after each round the exit rule is checked; a prompt that meets it, or
    that has had `max_rounds` rounds, is retired with its selected group.

    Every driver (the synchronous rounds below, the pipelined one in `trl_ada.core.pipelined`) feeds it complete
    rounds, so the pool it sees is exactly the reference's, whatever order the samples were generated in.
    """

    def __init__(self, rule: EliminationRule, rng: random.Random | None = None):
        self.rule, self.rng = rule, rng
        self.result = PromptResult()
        self.retired = False

    @property
    def pool_rewards(self) -> list[float]:
        return self.result.pool_rewards

    def add_round(self, rewards: Sequence[float]) -> bool:
        """Append one complete round to the pool and check the exit rule; return True if the prompt is now retired."""
        rule, result = self.rule, self.result
        if self.retired:
            raise RuntimeError("add_round on a retired prompt: its pool is final.")
        if len(rewards) != rule.round_repeat:
            raise ValueError(f"a round holds round_repeat={rule.round_repeat} rewards, got {len(rewards)}.")
        result.pool_rewards.extend(float(r) for r in rewards)
        result.rounds += 1
        num_pos, num_neg = count_signs(result.pool_rewards, rule.positive_threshold)
        if exit_rule(num_pos, num_neg, rule.num_generations, rule.choice):
            result.finished = True
            result.selected = select_at_exit(
                result.pool_rewards, rule.num_generations, rule.positive_threshold, self.rng
            )
            self.retired = True
        elif result.rounds == rule.max_rounds:
            result.selected = select_fallback(
                result.pool_rewards, rule.num_generations, rule.positive_threshold, rule.choice, self.rng
            )
            self.retired = True
        return self.retired


SampleRound = Callable[[list[int], int], Sequence[Sequence[float]]]


def run_adaptive_sampling(
    num_prompts: int, sample_round: SampleRound, rule: EliminationRule | None = None
) -> list[PromptResult]:
    """Run successive elimination for `num_prompts` prompts and select `rule.num_generations` samples for each.

    Args:
        num_prompts: number of unique prompts (their indices are 0..num_prompts-1).
        sample_round: `sample_round(active, k)` draws `k` fresh samples for each prompt index in `active` (in that
            order) and returns their rewards, one list of `k` floats per active prompt. It is called once per round.
        rule: n, M, R, the exit rule, the threshold and the selection (default: `EliminationRule()`, the
            reference's settings).

    Returns:
        one `PromptResult` per prompt, in prompt order.
    """
    rule = EliminationRule() if rule is None else rule
    round_repeat = rule.round_repeat
    prompts = [rule.prompt(p) for p in range(num_prompts)]
    active = list(range(num_prompts))
    while active:  # every round retires the prompts that meet the exit rule; round max_rounds retires the rest
        rewards = sample_round(list(active), round_repeat)
        if len(rewards) != len(active) or any(len(r) != round_repeat for r in rewards):
            raise ValueError(
                f"sample_round must return {round_repeat} rewards for each of the {len(active)} active prompts."
            )
        active = [p for p, new_rewards in zip(active, rewards) if not prompts[p].add_round(new_rewards)]
    return [prompt.result for prompt in prompts]
