"""Barrier-free rounds (trl_ada.core.pipelined) against the synchronous driver, on a fake engine that finishes requests in
adversarial orders: the results must be equal, whatever the order, the admission cap and the exit rule."""

import doctest
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ada.core import pipelined, sampling
from trl_ada.core.pipelined import run_pipelined_sampling
from trl_ada.core.sampling import EliminationRule, run_adaptive_sampling


ORDERS = ("random", "last_first", "first_first", "all_at_once", "highest_prompt_first", "stall_then_burst")


class FakeEngine:
    """Runs requests (prompt, slot) and finishes them in the order `order` says; checks the driver's side of the
    protocol (never over capacity, never a request twice, aborts only of running requests)."""

    def __init__(self, capacity: int, order: str, seed: int):
        self.capacity, self.order, self.rng = capacity, order, random.Random(seed)
        self.running: list[tuple[int, int]] = []  # in submission order
        self.seen: set[tuple[int, int]] = set()
        self.aborted: list[tuple[int, int]] = []
        self.polls = 0

    def submit(self, requests):
        assert len(self.running) + len(requests) <= self.capacity, "admitted over the engine's capacity"
        assert not self.seen.intersection(requests), "a sample was requested twice"
        self.seen.update(requests)
        self.running += list(requests)

    def abort(self, requests):
        assert set(requests) <= set(self.running), "aborted a request that is not running"
        self.aborted += list(requests)
        self.running = [r for r in self.running if r not in set(requests)]

    def free_slots(self):
        return self.capacity - len(self.running)

    def poll(self):
        self.polls += 1
        if not self.running:
            return []
        if self.order == "random":  # any subset, sometimes none (an engine step that finished nothing)
            done = self.rng.sample(self.running, self.rng.randint(0, len(self.running)))
        elif self.order == "last_first":
            done = [self.running[-1]]
        elif self.order == "first_first":
            done = [self.running[0]]
        elif self.order == "all_at_once":
            done = list(self.running)
        elif self.order == "highest_prompt_first":  # one prompt races ahead, the others straggle
            top = max(p for p, _ in self.running)
            done = [r for r in self.running if r[0] == top]
        else:  # stall_then_burst: nothing for a few steps, then everything in reverse
            done = list(reversed(self.running)) if self.polls % 3 == 0 else []
        self.running = [r for r in self.running if r not in set(done)]
        return done


def reward_table(num_prompts, slots, seed, kind):
    rng = random.Random(seed)
    pass_rate = [rng.choice([0.0, 0.05, 0.3, 0.5, 0.9, 1.0]) for _ in range(num_prompts)]
    if kind == "binary":
        return [[float(rng.random() < pass_rate[p]) for _ in range(slots)] for p in range(num_prompts)]
    if kind == "unscorable":  # binary, with unscorable (NaN) samples at a per-prompt rate, whole prompts included
        nan_rate = [rng.choice([0.0, 0.3, 0.7, 1.0]) for _ in range(num_prompts)]
        return [
            [float("nan") if rng.random() < nan_rate[p] else float(rng.random() < pass_rate[p]) for _ in range(slots)]
            for p in range(num_prompts)
        ]
    return [[rng.choice([0.0, 0.3, 0.7, 0.71, 1.0]) for _ in range(slots)] for _ in range(num_prompts)]


def synchronous(table, rule):
    drawn = [0] * len(table)

    def sample_round(active, k):
        out = [table[p][drawn[p] : drawn[p] + k] for p in active]
        for p in active:
            drawn[p] += k
        return out

    return run_adaptive_sampling(len(table), sample_round, rule)


@st.composite
def scenarios(draw):
    n = draw(st.integers(2, 6))
    rule = EliminationRule(
        num_generations=n,
        round_repeat=draw(st.integers(n, 9)),
        max_rounds=draw(st.integers(1, 4)),
        choice=draw(st.sampled_from(["balanced", "positive_focused"])),
        positive_threshold=draw(st.sampled_from([0.0, 0.5, 0.7])),
        selection=draw(st.sampled_from(["earliest", "random"])),
        seed=draw(st.integers(0, 10**6)),
    )
    engine = dict(
        capacity=draw(st.integers(1, 40)), order=draw(st.sampled_from(ORDERS)), seed=draw(st.integers(0, 99))
    )
    driver = dict(
        certain_continuation=draw(st.booleans()),
        max_running=draw(st.sampled_from([None, 1, 3, 16])),
        speculative=draw(st.booleans()),
    )
    return (
        rule,
        engine,
        driver,
        draw(st.integers(1, 10)),
        draw(st.integers(0, 10**6)),
        draw(st.sampled_from(["binary", "shaped", "unscorable"])),
    )


@settings(max_examples=400, deadline=None)
@given(scenario=scenarios())
def test_pipelined_equals_synchronous_in_any_finish_order(scenario):
    rule, engine_cfg, driver, num_prompts, table_seed, kind = scenario
    table = reward_table(num_prompts, rule.round_repeat * rule.max_rounds, table_seed, kind)
    engine = FakeEngine(**engine_cfg)
    out = run_pipelined_sampling(num_prompts, engine, lambda done: [table[p][s] for p, s in done], rule, **driver)

    expected = synchronous(table, rule)
    # pools, rounds, finished, selected: all equal (NaN != NaN, so pools compare as their repr)
    assert [(repr(r.pool_rewards), r.rounds, r.finished, r.selected) for r in out.results] == [
        (repr(r.pool_rewards), r.rounds, r.finished, r.selected) for r in expected
    ]
    assert engine.running == []  # nothing left behind
    m = rule.round_repeat
    pooled = {(p, s) for p, r in enumerate(out.results) for s in range(r.rounds * m)}
    wasted = set(out.discarded) | set(out.aborted)
    assert engine.seen == pooled | wasted and not pooled & wasted  # every issued slot is pooled or reported wasted
    assert sorted(engine.aborted) == sorted(out.aborted) and not set(out.discarded) & set(out.aborted)
    assert out.stats.samples_issued == len(pooled) + len(wasted) and out.stats.wasted_samples == len(wasted)
    # a wasted sample belongs to the one round after the prompt's pool: speculation runs one round ahead at most
    assert all(s // m == out.results[p].rounds < rule.max_rounds for p, s in wasted)
    assert out.stats.max_running <= min(engine_cfg["capacity"], driver["max_running"] or engine_cfg["capacity"])
    if not driver["speculative"]:
        assert not wasted and out.stats.speculative_samples == 0
    assert out.stats.wasted_samples <= out.stats.speculative_samples
    if not driver["certain_continuation"] or rule.choice == "positive_focused":
        assert out.stats.early_samples == 0
    # a round made certain early always happens: early samples all end in pools, never in the wasted ones
    assert out.stats.early_samples <= sum((r.rounds - 1) * m for r in out.results)


def test_certain_continuation_issues_rounds_before_the_previous_one_is_complete():
    # An always-right prompt never meets the balanced rule (no negatives): once 7 of its first 8 are right, the two
    # missing negatives outnumber the one sample left, so round 2 can start; and so on for rounds 3 and 4.
    table = [[1.0] * 32, [1.0, 0.0] * 16]
    rule = EliminationRule(num_generations=4, round_repeat=8, max_rounds=4, choice="balanced")
    engine = FakeEngine(capacity=64, order="first_first", seed=0)
    out = run_pipelined_sampling(2, engine, lambda done: [table[p][s] for p, s in done], rule)
    assert out.results == synchronous(table, rule)
    assert out.results[0].rounds == 4 and not out.results[0].finished
    assert out.stats.early_samples == 24  # rounds 2, 3 and 4 of prompt 0, all certain to happen
    without = run_pipelined_sampling(
        2,
        FakeEngine(64, "first_first", 0),
        lambda done: [table[p][s] for p, s in done],
        rule,
        certain_continuation=False,
    )
    assert without.results == out.results and without.stats.early_samples == 0
    assert out.stats.max_running > without.stats.max_running  # the early rounds ran beside the current ones


def test_speculation_runs_a_needed_round_early_and_wastes_one_that_is_not():
    # Prompt 0 is always wrong (balanced: all 4 rounds happen); prompt 1 alternates (exits after round 1). The engine
    # holds 32: the 16 certain samples leave 16 idle slots, which speculation gives to both prompts' next rounds.
    table = [[0.0] * 32, [1.0, 0.0] * 16]
    rule = EliminationRule(num_generations=4, round_repeat=8, max_rounds=4, choice="balanced")

    def run(speculative, capacity=32):
        engine = FakeEngine(capacity=capacity, order="all_at_once", seed=0)
        out = run_pipelined_sampling(
            2,
            engine,
            lambda done: [table[p][s] for p, s in done],
            rule,
            speculative=speculative,
            certain_continuation=False,
        )
        return out, engine

    plain, _ = run(False)
    out, engine = run(True)
    assert out.results == plain.results == synchronous(table, rule)
    # prompt 0's rounds 2-4 each ran beside the round before them: 2 engine steps instead of 4
    assert (out.stats.polls, plain.stats.polls) == (2, 4)
    # prompt 1's speculative round 2 finished too, and was discarded when round 1 retired the prompt
    assert out.stats.wasted_samples == 8 and {p for p, _ in out.discarded} == {1} and out.aborted == []
    assert out.stats.speculative_samples == 8 * 3  # prompt 0's rounds 2 and 4, prompt 1's round 2
    assert out.stats.samples_issued == plain.stats.samples_issued + 8

    # No idle slot (the engine holds one round, and a certain one is always waiting): speculation issues nothing.
    tight, _ = run(True, capacity=8)
    assert tight.results == plain.results and tight.stats.speculative_samples == 0


def test_speculative_samples_still_running_are_aborted_when_their_prompt_retires():
    # The engine finishes one request per step, oldest first: prompt 0's round 1 completes (and retires it) while its
    # speculative round 2 is still in flight.
    table = [[1.0, 0.0] * 16]
    engine = FakeEngine(capacity=12, order="first_first", seed=0)
    out = run_pipelined_sampling(1, engine, lambda done: [table[p][s] for p, s in done], speculative=True)
    assert out.results == synchronous(table, EliminationRule()) and out.results[0].rounds == 1
    assert out.aborted and engine.aborted == out.aborted and engine.running == []
    assert all(s // 8 == 1 for _, s in out.aborted)
    # 4 of round 2 fit beside round 1; the other 4 took the slots round 1's first finishers freed: all 8 in flight
    assert out.stats.wasted_samples == len(out.aborted) == 8 and out.discarded == []


def test_speculative_samples_do_not_make_a_round_certain():
    # Round 2 is speculative and finishes first (all wrong). When only slot 0 of round 1 is left, round 1 has 1 right
    # and 6 wrong: the one missing positive may still come, so round 2 is not certain; counting the speculative
    # samples as if they were in the pool would call the exit unreachable. Slot 0 is right: round 1 retires it.
    table = [[1.0, 1.0] + [0.0] * 6 + [0.0] * 24]
    engine = FakeEngine(capacity=16, order="last_first", seed=0)
    out = run_pipelined_sampling(1, engine, lambda done: [table[p][s] for p, s in done], speculative=True)
    assert (
        out.results == synchronous(table, EliminationRule()) and out.results[0].rounds == 1 and out.results[0].finished
    )
    assert out.stats.early_samples == 0 and out.stats.wasted_samples == 8 and len(out.discarded) == 8


def test_a_failing_reward_leaves_nothing_in_the_engine():
    calls = []

    def score(done):
        calls.append(len(done))
        if len(calls) == 3:
            raise ValueError("reward server went away")
        return [1.0] * len(done)

    engine = FakeEngine(capacity=10, order="first_first", seed=0)
    with pytest.raises(ValueError, match="reward server went away"):
        run_pipelined_sampling(4, engine, score)
    # the engine ran at its capacity of 10 throughout; the one being scored had finished: the other 9 are aborted
    assert engine.running == [] and len(engine.aborted) == 9


def test_engine_misbehaviour_is_an_error_not_a_hang():
    class NoRoom(FakeEngine):
        def free_slots(self):
            return 0

    with pytest.raises(RuntimeError, match="nothing is running"):
        run_pipelined_sampling(2, NoRoom(4, "all_at_once", 0), lambda done: [1.0] * len(done))

    class Stranger(FakeEngine):
        def poll(self):
            return [(99, 0)]

    engine = Stranger(8, "all_at_once", 0)
    with pytest.raises(RuntimeError, match="not running"):
        run_pipelined_sampling(1, engine, lambda done: [1.0] * len(done))
    assert engine.running == []
    with pytest.raises(ValueError, match="4 rewards for 3 finished"):
        run_pipelined_sampling(
            1, FakeEngine(3, "all_at_once", 0), lambda done: [1.0] * 3 + [0.0], EliminationRule(round_repeat=4)
        )


def test_random_selection_does_not_depend_on_which_prompts_retire_first():
    # Prompt 1 is the same in both batches; prompt 0 retires at round 1 in one and only at the fallback in the other.
    # A generator shared by all prompts would hand prompt 1 different draws; one per prompt does not.
    prompt = [0.0] * 8 + [1.0, 0.0, 0.0, 1.0] * 6
    early, late = [1.0, 0.0] * 16, [0.0] * 32
    first = synchronous([early, prompt], EliminationRule(selection="random", seed=5))
    second = synchronous([late, prompt], EliminationRule(selection="random", seed=5))
    assert first[0].rounds == 1 and second[0].rounds == 4
    assert first[1].selected == second[1].selected
    assert sampling.selection_rng("random", 5, 1).random() == sampling.selection_rng("random", 5, 1).random()
    assert sampling.selection_rng("random", 5, 1).random() != sampling.selection_rng("random", 5, 2).random()
    assert sampling.selection_rng("earliest", 5, 0) is None


def test_docstring_examples_run():
    assert doctest.testmod(pipelined).failed == 0
    assert doctest.testmod(sampling).failed == 0
