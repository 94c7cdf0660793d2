"""Barrier-free rounds: each prompt moves to its next round as soon as its own round is scored (the pure core).

`trl_ada.core.sampling.run_adaptive_sampling` runs a round as one batch over every active prompt, so a round waits for
the slowest completion of the whole batch before any prompt can be checked and resampled. A prompt's exit rule
depends only on its own pool, so nothing requires that barrier. `run_pipelined_sampling` drives an engine that takes
single samples and finishes them in any order (a colocated vLLM engine stepped by hand, or a simulation) and returns
exactly what the synchronous driver returns, by construction (four invariants):

1. a round is the fixed set of slots issued for it: sample j of round k of a prompt is slot k*M + j, never "the
   first M completions to arrive";
2. the exit check runs once every slot of the round is finished and scored, on slots 0 ... (k+1)*M - 1, through
   `trl_ada.core.sampling.PromptRounds`, the state machine the synchronous driver uses;
3. nothing beyond that pool ever reaches it: a round joins the pool only once it is certain to happen (its previous
   round is complete and did not retire the prompt, or "certain continuation" below); samples of a speculative round
   (below) wait outside the pool and are aborted or discarded if their round does not happen;
4. "earliest" selection means slot order (rewards enter the pool in slot order), and a random selection uses a
   generator per prompt (`selection_rng`), so finish order changes nothing.

Certain continuation (balanced only): round k+1 of a prompt can be issued before round k is complete once the
scored samples make the exit rule unreachable at the end of round k, that is when the positives and negatives still
missing outnumber the samples of rounds <= k not yet scored. Those samples are certain to be in the synchronous pool,
so issuing them early wastes nothing. For positive_focused it never fires (the last straggler could be the first
positive). Unscorable samples (NaN reward) count as neither positive nor negative, here as in `PromptRounds`: each
sample not yet scored can still bring at most one of the missing ones, so the test stays sound.

Speculation (`speculative=True`, opt-in): engine slots that no certain round can use (nothing certain is queued)
take the next round of an unretired prompt before it is known to happen, one round ahead at most per prompt, the
prompts furthest from their exit first (never one whose exit is already certain: that round cannot happen). Its
samples are scored as they finish and kept aside; when the previous round retires the prompt, the speculative ones
still running are aborted and the finished ones discarded (`Pipelined.aborted`, `Pipelined.discarded`,
`PipelinedStats.wasted_samples`); when it does not, the round becomes certain and its samples join the pool in slot
order. Certain rounds are always admitted first, so speculation only takes capacity that is idle when it takes it
(a running speculative sample is not preempted when a certain round arrives later: that round waits for free slots).
It pays where an engine step costs the same with more sequences running (a GPU below saturation) and costs tokens
for nothing where step time grows with them (a CPU).

The engine protocol is four methods (`Engine`). The driver never leaves a request in the engine: on return, and on
any exception (a reward function raising, say), it aborts whatever is still running.

    >>> from trl_ada.core.sampling import run_adaptive_sampling
    >>> table = {0: [1.0] * 32, 1: [0.0] * 8 + [1.0, 0.0] * 12, 2: [1.0, 0.0] * 16}   # reward of (prompt, slot)
    >>> class LastFirst:                           # finishes the most recently submitted request first
    ...     def __init__(self): self.running = []
    ...     def submit(self, requests): self.running += requests
    ...     def abort(self, requests): self.running = [r for r in self.running if r not in requests]
    ...     def poll(self): return [self.running.pop()] if self.running else []
    ...     def free_slots(self): return 4 - len(self.running)
    >>> out = run_pipelined_sampling(3, LastFirst(), score=lambda done: [table[p][s] for p, s in done])
    >>> drawn = [0, 0, 0]
    >>> def sample_round(active, k):               # the synchronous driver reads the same table, slot by slot
    ...     out = [table[p][drawn[p] : drawn[p] + k] for p in active]
    ...     for p in active: drawn[p] += k
    ...     return out
    >>> out.results == run_adaptive_sampling(3, sample_round)
    True
    >>> [(r.rounds, r.finished, r.selected) for r in out.results]
    [(4, False, [0, 1, 2, 3]), (2, True, [8, 10, 0, 1]), (1, True, [0, 2, 1, 3])]
    >>> out.stats.samples_issued, out.stats.max_running <= 4
    (56, True)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from trl_ada.core.sampling import EliminationRule, PromptResult, count_signs


__all__ = ["Engine", "PipelinedStats", "Pipelined", "run_pipelined_sampling"]

Request = tuple[int, int]  # (prompt, slot): slot k * round_repeat + j is sample j of round k


class Engine(Protocol):
    """What the driver needs from a generation engine: one request per sample, finished in any order."""

    def submit(self, requests: Sequence[Request]) -> None:
        """Start generating one sample for each request."""

    def abort(self, requests: Sequence[Request]) -> None:
        """Cancel requests still running; an aborted request is never returned by `poll`."""

    def poll(self) -> Sequence[Request]:
        """Advance the engine (one step) and return the requests that finished since the last poll."""

    def free_slots(self) -> int:
        """How many more requests the engine can run now (vLLM: max_num_seqs minus the running ones)."""


@dataclass
class PipelinedStats:
    samples_issued: int = 0  # requests submitted, speculative ones included
    early_samples: int = 0  # in rounds made certain by certain continuation before the previous one was complete
    speculative_samples: int = 0  # submitted while their round was speculative (it may not happen)
    wasted_samples: int = 0  # speculative samples whose round did not happen: aborted, or finished and discarded
    polls: int = 0  # engine steps taken
    max_running: int = 0  # most requests in the engine at once


@dataclass
class Pipelined:
    results: list[PromptResult]  # one per prompt, equal to run_adaptive_sampling's
    stats: PipelinedStats = field(default_factory=PipelinedStats)
    discarded: list[Request] = field(default_factory=list)  # finished and scored, but their round did not happen
    aborted: list[Request] = field(default_factory=list)  # cancelled in the engine: their round did not happen


def run_pipelined_sampling(
    num_prompts: int,
    engine: Engine,
    score: Callable[[list[Request]], Sequence[float]],
    rule: EliminationRule | None = None,
    max_running: int | None = None,
    certain_continuation: bool = True,
    speculative: bool = False,
    prompt_numbers: Sequence[int] | None = None,
) -> Pipelined:
    """Successive elimination without a barrier between prompts; the same results as `run_adaptive_sampling`.

    Args:
        num_prompts, rule: as in `trl_ada.core.sampling.run_adaptive_sampling`.
        engine: see `Engine`.
        score: `score(finished)` returns one reward per finished request (called in the caller's thread, once per
            engine step that finished something: batched, and where math-verify's signal-based timeouts work).
        max_running: at most this many requests in the engine at once (None: only `engine.free_slots()` limits).
        certain_continuation: issue a balanced prompt's next round as soon as its exit has become unreachable.
        speculative: put slots that no certain round needs to work on one round that may not happen (module
            docstring); its samples join the pool only if the round happens, and are aborted or discarded otherwise
            (`Pipelined.aborted`, `Pipelined.discarded`).
        prompt_numbers: the number each prompt's random selection is keyed by (`selection_rng`); default 0, 1, ...
            A process that pipelines its share of a batch passes the prompts' positions in the whole batch, so its
            selections are those of `run_adaptive_sampling` over the batch.
    """
    rule = EliminationRule() if rule is None else rule
    numbers = list(range(num_prompts)) if prompt_numbers is None else list(prompt_numbers)
    if len(numbers) != num_prompts:
        raise ValueError(f"prompt_numbers holds {len(numbers)} numbers for {num_prompts} prompts.")
    prompts = [rule.prompt(number) for number in numbers]
    return _Driver(rule, prompts, engine, score, max_running, certain_continuation, speculative).run()


class _Driver:
    """The state of one pipelined sampling: what is queued, running and scored per prompt, and the steps that move it.

    Admission order: certain rounds before the speculative one, later rounds before earlier (they end a prompt
    sooner). A promoted round's slots get a second, certain entry, which pops first; an entry whose slot has left the
    queue (admitted, or its prompt retired) is stale and skipped. The algorithm's parameters (n, M, R, the exit rule,
    the threshold) are read from `self.rule`, the one rule every prompt's `PromptRounds` holds.
    """

    def __init__(self, rule, prompts, engine, score, max_running, certain_continuation, speculative):
        self.rule, self.prompts, self.engine, self.score = rule, prompts, engine, score
        self.max_running, self.certain_continuation, self.speculative = max_running, certain_continuation, speculative
        count = len(prompts)
        self.scored: list[dict[int, float]] = [{} for _ in range(count)]  # slot -> reward, not yet in the pool
        self.certain = [1] * count  # rounds sure to happen: the synchronous driver samples them too
        self.issued = [0] * count  # rounds put to the queue: `certain`, or one more while a round is speculative
        self.heap: list[tuple[bool, int, int, int]] = []  # (speculative, -round, prompt, slot)
        self.queued: set[Request] = set()
        self.running: set[Request] = set()
        self.out = Pipelined([prompt.result for prompt in prompts])
        self.stats = self.out.stats

    def run(self) -> Pipelined:
        for p in range(len(self.prompts)):
            self.issue_round(p)
        try:
            while not all(prompt.retired for prompt in self.prompts):
                self.admit(self.free_room())
                if self.speculative and not self.queued and self.free_room() > 0:  # room no certain round can use
                    self.speculate(self.free_room())
                    self.admit(self.free_room())
                if not self.running:
                    raise RuntimeError(
                        "run_pipelined_sampling: prompts are unfinished but nothing is running or "
                        "queued (the engine reports no free slots)."
                    )
                finished = list(self.engine.poll())
                self.stats.polls += 1
                if finished:
                    self.take(finished)
            return self.out
        finally:
            if self.running:  # an exception left samples in flight: the engine must hold nothing of ours afterwards
                self.engine.abort(sorted(self.running))

    def take(self, finished: list[Request]) -> None:
        """Score what finished, fold every round that is now complete into its pool, decide what comes next."""
        unknown = [request for request in finished if request not in self.running]
        if unknown:
            raise RuntimeError(f"the engine returned requests that are not running: {unknown[:4]}")
        self.running.difference_update(finished)
        rewards = list(self.score(finished))
        if len(rewards) != len(finished):
            raise ValueError(f"score returned {len(rewards)} rewards for {len(finished)} finished samples.")
        for (p, slot), reward in zip(finished, rewards):
            self.scored[p][slot] = float(reward)
        for p in sorted({p for p, _ in finished}):
            self.fold_complete_rounds(p)
            self.continue_if_certain(p)

    def fold_complete_rounds(self, p: int) -> None:
        prompt = self.prompts[p]
        m = self.rule.round_repeat
        while not prompt.retired:  # every round that is now complete, in order
            k = prompt.result.rounds
            slots = range(k * m, (k + 1) * m)
            if k >= self.certain[p] or any(slot not in self.scored[p] for slot in slots):
                return
            prompt.add_round([self.scored[p].pop(slot) for slot in slots])
            if prompt.retired:
                self.retire(p)
            elif self.certain[p] == prompt.result.rounds:
                self.make_certain(p, early=False)

    def continue_if_certain(self, p: int) -> None:
        """Certain continuation: a balanced prompt's next round happens once its exit is unreachable without it."""
        prompt = self.prompts[p]
        while (
            self.certain_continuation
            and self.rule.choice == "balanced"
            and not prompt.retired
            and self.certain[p] < self.rule.max_rounds
        ):
            lacking, unscored = self.missing(p)
            if lacking <= unscored:
                return
            self.make_certain(p, early=True)

    def is_speculative(self, p: int, slot: int) -> bool:
        return slot // self.rule.round_repeat >= self.certain[p]

    def issue_round(self, p: int) -> None:
        k, m = self.issued[p], self.rule.round_repeat
        self.issued[p] += 1
        for slot in range(k * m, (k + 1) * m):
            heapq.heappush(self.heap, (self.is_speculative(p, slot), -k, p, slot))
            self.queued.add((p, slot))

    def make_certain(self, p: int, early: bool) -> None:
        """Round `certain[p]` will happen: issue it, or promote it if it was issued speculatively."""
        k, m = self.certain[p], self.rule.round_repeat
        self.certain[p] += 1
        self.stats.early_samples += m if early else 0
        if self.issued[p] == k:
            self.issue_round(p)
            return
        for slot in range(k * m, (k + 1) * m):  # promoted: its queued slots now go ahead of speculative ones
            if (p, slot) in self.queued:
                heapq.heappush(self.heap, (False, -k, p, slot))

    def missing(self, p: int) -> tuple[int, int]:
        """(samples the exit rule still lacks, samples of certain rounds not yet scored), at the end of the last
        certain round, whose pool holds every certain slot. Counts only grow with the rounds, so an exit that is
        unreachable there is unreachable at every earlier round too."""
        prompt = self.prompts[p]
        certain_slots = self.certain[p] * self.rule.round_repeat
        known = [*prompt.pool_rewards, *(r for slot, r in self.scored[p].items() if slot < certain_slots)]
        num_pos, num_neg = count_signs(known, self.rule.positive_threshold)  # an unscorable sample counts as neither
        if self.rule.choice == "balanced":
            n = self.rule.num_generations
            half = n // 2
            lacking = max(0, half - num_pos) + max(0, n - half - num_neg)
        else:
            lacking = int(num_pos == 0)
        return lacking, certain_slots - len(known)

    def retire(self, p: int) -> None:
        """The prompt's pool is final: whatever it has beyond it belongs to a round that does not happen."""
        discarded = [(p, slot) for slot in sorted(self.scored[p])]
        self.scored[p].clear()
        aborted = sorted(request for request in self.running if request[0] == p)
        if aborted:
            self.engine.abort(aborted)
            self.running.difference_update(aborted)
        m = self.rule.round_repeat
        self.queued.difference_update(
            [(p, slot) for slot in range(self.prompts[p].result.rounds * m, self.issued[p] * m)]
        )
        self.out.discarded += discarded
        self.out.aborted += aborted
        self.stats.wasted_samples += len(discarded) + len(aborted)

    def free_room(self) -> int:
        room = self.engine.free_slots()
        return room if self.max_running is None else min(room, self.max_running - len(self.running))

    def admit(self, room: int) -> None:
        admitted = []
        while self.heap and len(admitted) < room:
            _, _, p, slot = heapq.heappop(self.heap)
            if (p, slot) in self.queued:
                self.queued.discard((p, slot))
                admitted.append((p, slot))
                self.stats.speculative_samples += self.is_speculative(p, slot)
        if admitted:
            self.engine.submit(admitted)
            self.running.update(admitted)
            self.stats.samples_issued += len(admitted)
            self.stats.max_running = max(self.stats.max_running, len(self.running))

    def speculate(self, room: int) -> None:
        """Fill free room with the next round of the prompts likeliest to need it (an exit that is already certain
        is not speculated on: its next round cannot happen)."""
        candidates = []
        for p, prompt in enumerate(self.prompts):
            if not prompt.retired and self.issued[p] == self.certain[p] < self.rule.max_rounds:
                lacking, unscored = self.missing(p)
                if lacking > 0:
                    candidates.append((unscored - lacking, p))
        for _, p in sorted(candidates):
            if room <= 0:
                break
            self.issue_round(p)
            room -= self.rule.round_repeat
