"""The pure pieces under dynamic sampling and prompt memory: memory, refill stream, fill-with-signal driver."""

import math
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ada.core.dynamic import fill_with_signal, has_signal
from trl_ada.core.memory import GroupPrior, PromptMemory, prompt_key
from trl_ada.core.sampling import EliminationRule, run_adaptive_sampling
from trl_ada.integration.refill import PromptStream


# -- prompt memory ---------------------------------------------------------------------------------------------------


def test_key_is_a_stable_content_hash():
    # Fixed value: a key that changed between versions, platforms or processes would orphan a saved memory.
    assert prompt_key([1, 2, 3]) == 0xB4FB5A8DE61ABA77 == prompt_key((1, 2, 3))
    assert prompt_key([1, 2, 3]) == prompt_key(np.array([1, 2, 3], dtype=np.int32))
    assert prompt_key([1, 2, 3]) != prompt_key([1, 2, 4]) and prompt_key([1, 2]) != prompt_key([1, 2, 0])
    # Not Python's salted hash(): two interpreters with different hash seeds agree.
    code = "from trl_ada.core.memory import prompt_key; print(prompt_key([5, 7, 11]), hash('x'))"
    outs = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.split()
        for seed in ("1", "2")
    ]
    assert outs[0][1] != outs[1][1]  # the salted hash differs...
    assert outs[0][0] == outs[1][0] == str(prompt_key([5, 7, 11]))  # ...the key does not


visits = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 40), st.floats(0, 1)), max_size=40)


def replay(decay, alpha, beta, history):
    memory = PromptMemory(decay, alpha, beta, capacity=2)  # tiny capacity: exercises growth
    for step, (prompt, n, frac) in enumerate(history):
        memory.update([prompt_key([prompt])], [n], [round(n * frac)], step)
    return memory


@settings(max_examples=200, deadline=None)
@given(st.floats(0.05, 1.0), st.floats(0.1, 5), st.floats(0.1, 5), visits)
def test_memory_matches_the_closed_form(decay, alpha, beta, history):
    memory = replay(decay, alpha, beta, history)
    for prompt in range(6):
        mine = [(n, round(n * frac)) for p, n, frac in history if p == prompt]
        # After v visits, visit j (0-based) carries weight decay ** (v - 1 - j).
        weights = [decay ** (len(mine) - 1 - j) for j in range(len(mine))]
        samples = sum(w * n for w, (n, _) in zip(weights, mine))
        positives = sum(w * k for w, (_, k) in zip(weights, mine))
        key = prompt_key([prompt])
        assert memory.visits(key) == len(mine)
        assert memory.pass_rate(key) == pytest.approx((positives + alpha) / (samples + alpha + beta), rel=1e-9)
        assert 0 < memory.pass_rate(key) < 1
    assert len(memory) == len({p for p, _, _ in history})


@settings(max_examples=100, deadline=None)
@given(visits, visits)
def test_state_round_trip_continues_exactly(first, then):
    uninterrupted = replay(0.5, 1.0, 1.0, first + then)
    saved = replay(0.5, 1.0, 1.0, first).state_dict()
    resumed = PromptMemory(0.5, 1.0, 1.0)
    resumed.load_state_dict(saved)
    for step, (prompt, n, frac) in enumerate(then, start=len(first)):
        resumed.update([prompt_key([prompt])], [n], [round(n * frac)], step)
    a, b = uninterrupted.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_memory_file_round_trip_and_export(tmp_path):
    memory = replay(0.5, 1.0, 1.0, [(0, 8, 1.0), (1, 8, 0.0), (2, 8, 0.5), (0, 8, 1.0)])
    memory.save(str(tmp_path / "m.npz"))
    loaded = PromptMemory(0.5, 1.0, 1.0)
    loaded.load(str(tmp_path / "m.npz"))
    assert loaded.table() == memory.table()
    table = memory.table()
    assert table["visits"] == [2, 1, 1] and table["pass_rate"][0] > 0.9 > 0.15 > table["pass_rate"][1]
    assert all(len(h) == 16 for h in table["prompt_hash"])
    with pytest.raises(ValueError, match="prompt_memory"):
        PromptMemory(0.9, 1.0, 1.0).load(str(tmp_path / "m.npz"))  # other settings than the saved run


def test_forget_ages_counts_without_a_visit():
    memory = replay(0.5, 1.0, 1.0, [(0, 8, 0.0)])
    key = prompt_key([0])
    memory.forget([key, prompt_key([99])], 0.5)  # an unknown key is ignored
    assert memory.posterior(key) == (1.0, 5.0, 1) and memory.visits(key) == 1 and len(memory) == 1
    with pytest.raises(ValueError, match="factor"):
        memory.forget([key], 0.0)


def test_memory_rejects_bad_input():
    with pytest.raises(ValueError, match="decay"):
        PromptMemory(decay=0.0)
    with pytest.raises(ValueError, match="prior"):
        PromptMemory(prior_alpha=0.0)
    with pytest.raises(ValueError, match="positives"):
        PromptMemory().update([1], [4], [5], step=0)


# -- refill stream ---------------------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 30), st.integers(0, 10**6), st.lists(st.integers(0, 25), max_size=12))
def test_stream_visits_every_prompt_once_per_pass_and_resumes(size, seed, draws):
    stream = PromptStream(size, seed)
    drawn = [i for k in draws for i in stream.draw(k)]
    for start in range(0, len(drawn) - size + 1, size):  # each full pass is a permutation
        assert sorted(drawn[start : start + size]) == list(range(size))
    assert stream.state_dict()["drawn"] == len(drawn) == sum(draws)
    # Same seed, same draws, whatever the chunking; a stream restored from a state continues identically.
    assert PromptStream(size, seed).draw(len(drawn)) == drawn
    resumed = PromptStream(size, seed)
    resumed.load_state_dict(stream.state_dict())
    assert resumed.draw(2 * size) == stream.draw(2 * size)


@pytest.mark.parametrize(
    "other, field",
    [
        (PromptStream(5, 1), "the training set's length"),
        (PromptStream(10, 2), "seed"),
        (PromptStream(10, 1, False), "shuffle"),
    ],
)
def test_a_stream_saved_for_other_prompts_or_settings_is_refused_naming_them(other, field):
    saved = PromptStream(10, 1)
    saved.draw(8)
    with pytest.raises(ValueError, match=f"saved with {field}"):
        other.load_state_dict(saved.state_dict())


def test_stream_unshuffled_and_independent_of_other_seeds():
    assert PromptStream(5, 0, shuffle=False).draw(7) == [0, 1, 2, 3, 4, 0, 1]
    assert PromptStream(50, 0).draw(50) != PromptStream(50, 1).draw(50)
    with pytest.raises(ValueError, match="empty"):
        PromptStream(0, 0)


# -- dynamic sampling driver -----------------------------------------------------------------------------------------


def test_has_signal():
    assert has_signal([1.0, 0.0, 0.0, 0.0]) and not has_signal([1.0] * 4) and not has_signal([0.0] * 4)
    assert not has_signal([0.5, 0.5 + 1e-9]) and has_signal([0.5, 0.6])
    assert not has_signal([math.nan, 1.0]) and has_signal([math.nan, 1.0, 0.0])  # unscorable samples are ignored


def simulated(pass_rate, n=4, rounds=1, m=None, seed=0):
    """`sample` for fill_with_signal: prompts with the given pass rates, Reinforce-Ada rounds or 1 round of n."""
    rng = random.Random(seed)
    calls = []

    def sample(prompts):
        calls.append(list(prompts))

        def sample_round(active, k):
            return [[float(rng.random() < pass_rate[prompts[i]]) for _ in range(k)] for i in active]

        rule = EliminationRule(num_generations=n, round_repeat=m or n, max_rounds=rounds)
        return run_adaptive_sampling(len(prompts), sample_round, rule)

    return sample, calls


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), min_size=4, max_size=40),
    st.integers(1, 8),
    st.integers(0, 5),
    st.integers(0, 1000),
    st.booleans(),
)
def test_fill_with_signal_properties(rates, target, cap, seed, adaptive):
    target = min(target, len(rates))
    sample, calls = simulated(rates * 50, rounds=4 if adaptive else 1, m=8 if adaptive else 4, seed=seed)
    fresh = iter(range(len(rates), 50 * len(rates)))
    drawn = []

    def draw(k):
        drawn.append(k)
        return [next(fresh) for _ in range(k)]

    filled = fill_with_signal(list(range(target)), draw, sample, target, max_refill_batches=cap)
    assert len(filled.chosen) == target and filled.chosen == sorted(set(filled.chosen))
    assert filled.refill_batches == len(drawn) <= cap and len(calls) == 1 + len(drawn)
    assert all(1 <= k <= target for k in drawn)
    assert [h for h, _ in filled.sampled] == [h for call in calls for h in call]  # every sampled prompt reported
    signal = [i for i, (_, r) in enumerate(filled.sampled) if has_signal(r.selected_rewards)]
    if len(signal) >= target:  # enough signal: trains only on groups with signal, the earliest ones
        assert filled.chosen == signal[:target] and filled.without_signal == 0
    else:  # the cap was reached (or it was 0): every group with signal is trained, the rest fills the step
        assert filled.refill_batches == cap and set(signal) <= set(filled.chosen)
        assert filled.without_signal == target - len(signal)
    if cap == 0:
        assert filled.chosen == list(range(target)) and not drawn


def test_refill_batch_is_sized_to_close_the_gap():
    # Half of the first 4 prompts have signal (rate 0.5 vs 1.0): 2 missing at a rate of 1/2 -> draw 4, not 8.
    sample, _ = simulated({0: 0.5, 1: 0.5, 2: 1.0, 3: 1.0, **dict.fromkeys(range(4, 100), 0.5)}, n=16)
    drawn = []
    fill_with_signal([0, 1, 2, 3], lambda k: drawn.append(k) or list(range(4, 4 + k)), sample, 4, 10)
    assert drawn == [4]
    # No signal at all yet: a whole batch.
    sample, _ = simulated({i: 1.0 if i < 8 else 0.5 for i in range(100)}, n=16)
    drawn = []
    fill_with_signal(list(range(8)), lambda k: drawn.append(k) or list(range(8, 8 + k)), sample, 8, 10)
    assert drawn[0] == 8


# -- budgeted sampling -----------------------------------------------------------------------------------------------

from trl_ada.core.budget import predictive_missing_class, predictive_uniform, run_budgeted_sampling  # noqa: E402


def test_predictive_probabilities_against_monte_carlo():
    rng = np.random.default_rng(0)
    for a, b, n in [(1, 1, 4), (0.5, 0.5, 4), (3, 9, 2), (20, 1, 8)]:
        p = rng.beta(a, b, 200_000)
        assert predictive_uniform(a, b, n) == pytest.approx(np.mean(p**n + (1 - p) ** n), abs=5e-3)
        assert predictive_missing_class(a, b, 2, have_positive=True) == pytest.approx(np.mean(1 - p**2), abs=5e-3)
        assert predictive_missing_class(a, b, 2, have_positive=False) == pytest.approx(
            np.mean(1 - (1 - p) ** 2), abs=5e-3
        )
    assert predictive_uniform(1, 1, 4) == pytest.approx(2 / 5)  # uniform prior: 2 / (n + 1)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.02, 0.3, 0.5, 0.9, 1.0]), min_size=8, max_size=24),
    st.integers(1, 8),
    st.floats(4.0, 9.0),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(0, 10**6),
    st.booleans(),
)
def test_budget_properties(rates, target, per_prompt, top_up, world, seed, remembered):
    target = world * max(1, min(target, len(rates) // 2) // world)  # the trainer's steps hold whole rounds per rank
    rng = random.Random(seed)
    fresh = iter(range(target, 10**6))  # handles are unique per step; handle h is prompt h % len(rates)
    generated = []
    memory = PromptMemory()
    if remembered:  # one earlier visit of 4 samples per prompt, at its true rate
        for h, r in enumerate(rates):
            memory.update([h], [4], [round(4 * r)], step=0)

    def sample_round(handles, k):
        generated.append((list(handles), k))
        return [[float(rng.random() < rates[h % len(rates)]) for _ in range(k)] for h in handles]

    budget = math.floor(per_prompt * target)
    out = run_budgeted_sampling(
        list(range(target)),
        lambda k: [next(fresh) for _ in range(k)],
        lambda h: memory.posterior(h % len(rates)),
        lambda h: rng.random(),
        sample_round,
        target,
        budget,
        num_generations=4,
        top_up=top_up,
        world_size=world,
    )
    cost = sum(math.ceil(len(h) * k / world) * world for h, k in generated)
    assert out.spent == cost <= budget  # the hard cap, padding included
    assert len(out.sampled) == target and all(len(r.selected) == 4 for _, r in out.sampled)
    accepted = {h for h, _ in out.sampled}
    assert not accepted & set(out.skipped) and all(h in accepted for hs, _ in generated for h in hs)
    assert all(len(r.pool_rewards) >= 4 for _, r in out.sampled) and generated[0][1] == 4
    for _, result in out.sampled:  # selection: Reinforce-Ada's rule at exit, mixed whenever the pool is
        pos = [x for x in result.pool_rewards if x > 0.7]
        kept = result.selected_rewards
        if 0 < len(pos) < len(result.pool_rewards):
            assert 0 < sum(kept) < 4
        for handles, k in generated[1:]:  # top-ups only for pools that were uniform when they were chosen
            assert k == top_up
    if not remembered:
        assert out.skipped == [] and [h for h, _ in out.sampled] == list(range(target))


def test_budget_draws_only_the_candidates_it_screens():
    """A refill batch is `target` candidates, drawn one by one: a candidate the step does not reach stays in the
    stream, and every drawn one is either trained or counted as skipped (the consumption the logs report)."""
    memory = PromptMemory()
    for h in range(4):  # the step's own prompts 0-3: 0 and 1 remembered as always wrong, 2 and 3 unknown
        memory.update([h], [8], [0], step=0) if h < 2 else None
    drawn = []

    def draw(k):
        drawn.extend(range(100 + len(drawn), 100 + len(drawn) + k))
        return drawn[-k:]

    out = run_budgeted_sampling(
        [0, 1, 2, 3],
        draw,
        memory.posterior,
        lambda h: 0.99,
        lambda hs, k: [[0.0, 1.0][:k] * (k // 2) for _ in hs],
        target=4,
        budget=16,
    )
    assert out.skipped == [0, 1] and [h for h, _ in out.sampled] == [2, 3, 100, 101]
    assert drawn == [100, 101] and out.candidate_batches == 1  # not 4 drawn for the 2 that were missing
    assert len(out.sampled) + len(out.skipped) == 4 + len(drawn)


def test_budget_screens_out_remembered_extremes_but_keeps_exploring():
    rates = [0.0, 1.0, 0.5, 0.4] * 50
    memory = PromptMemory()
    for h, r in enumerate(rates):
        memory.update([h], [8], [round(8 * r)], step=0)
    rng = random.Random(0)
    taken = {0.0: 0, 1.0: 0, 0.5: 0, 0.4: 0}
    stream = iter(range(8, len(rates)))
    for step in range(20):
        first = [next(stream, 0) for _ in range(8)]
        out = run_budgeted_sampling(
            first,
            lambda k: [next(stream, 0) for _ in range(k)],
            lambda h: memory.posterior(h),
            lambda h: rng.random(),
            lambda hs, k: [[float(rng.random() < rates[h]) for _ in range(k)] for h in hs],
            target=2,
            budget=8,
            explore_floor=0.05,
        )
        for h, _ in out.sampled:
            taken[rates[h]] += 1
        stream = iter(range(len(rates)))  # wrap around
    assert taken[0.5] + taken[0.4] > 0.8 * sum(taken.values())  # the budget goes to prompts with signal
    assert taken[0.0] + taken[1.0] >= 1  # the floor: extremes are still visited sometimes


def test_budget_rejects_bad_input():
    args = dict(
        draw=lambda k: [],
        predict=lambda h: (1, 1, 0),
        coin=lambda h: 0.5,
        sample_round=lambda hs, k: [[0.0] * k for _ in hs],
    )
    with pytest.raises(ValueError, match="budget=7 cannot pay"):
        run_budgeted_sampling([0, 1], target=2, budget=7, **args)
    with pytest.raises(ValueError, match="explore_floor"):
        run_budgeted_sampling([0, 1], target=2, budget=8, explore_floor=0.0, **args)


# -- group prior -----------------------------------------------------------------------------------------------------


def simulate_group(groups: GroupPrior, label, a, b, visits, n, rng):
    """`visits` prompts of a group whose pass rates are Beta(a, b), n samples each, folded in as one step."""
    p = rng.beta(a, b, visits)
    groups.update([label] * visits, [n] * visits, rng.binomial(n, p).tolist())


@pytest.mark.parametrize("a, b, n", [(0.3, 0.3, 4), (1, 1, 4), (2, 18, 4), (900, 100, 4), (0.5, 3, 8), (5, 5, 2)])
def test_group_prior_predicts_the_pass_rates_of_unseen_prompts(a, b, n):
    """The fitted prior reproduces what matters for screening: the mean pass rate and how often a fresh group of n
    samples from an unseen prompt comes back uniform (against Monte Carlo over the true distribution)."""
    rng = np.random.default_rng(1)
    groups = GroupPrior(decay=1.0)
    simulate_group(groups, "g", a, b, 4000, n, rng)
    fitted = groups.prior("g")
    assert fitted is not None and min(fitted) > 0
    p = rng.beta(a, b, 400_000)
    assert fitted[0] / sum(fitted) == pytest.approx(a / (a + b), abs=0.02)
    assert predictive_uniform(*fitted, 4) == pytest.approx(np.mean(p**4 + (1 - p) ** 4), abs=0.03)


def test_group_prior_tells_groups_apart_and_ages():
    rng = np.random.default_rng(0)
    groups = GroupPrior(decay=0.9, min_visits=2.0)
    for _ in range(5):
        simulate_group(groups, "easy", 50, 1, 3, 4, rng)
        simulate_group(groups, "hard", 1, 50, 3, 4, rng)
    easy, hard = groups.prior("easy"), groups.prior("hard")
    assert predictive_uniform(*easy, 4) > 0.6 and predictive_uniform(*hard, 4) > 0.6  # both screened at 0.5
    assert easy[0] / sum(easy) > 0.9 > 0.1 > hard[0] / sum(hard)
    assert groups.prior("never seen") is None
    for _ in range(20):  # the group is no longer sampled: its evidence fades until its prompts are taken again
        simulate_group(groups, "easy", 50, 1, 3, 4, rng)
    assert groups.prior("hard") is None and groups.prior("easy") is not None
    table = groups.table()
    assert table["group"] == ["easy", "hard"] and table["strength"][1] is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.sampled_from("abc"), st.integers(2, 16), st.floats(0, 1)), max_size=6), max_size=8),
    st.floats(0.3, 1.0),
)
def test_group_prior_is_always_a_proper_beta_and_survives_a_round_trip(steps, decay):
    groups = GroupPrior(decay=decay, min_visits=1.0)
    for visits in steps:
        groups.update([g for g, _, _ in visits], [n for _, n, _ in visits], [round(n * f) for _, n, f in visits])
    for label in "abc":
        prior = groups.prior(label)
        if prior is not None:
            assert all(math.isfinite(x) and x > 0 for x in prior)
    copy = GroupPrior(decay=decay, min_visits=1.0)
    copy.load_state_dict(groups.state_dict())
    assert all(copy.prior(label) == groups.prior(label) for label in "abc")
    with pytest.raises(ValueError, match="decay"):
        GroupPrior(decay=0.5 if decay != 0.5 else 0.6, min_visits=1.0).load_state_dict(groups.state_dict())


def test_group_prior_rejects_bad_input():
    with pytest.raises(ValueError, match="decay"):
        GroupPrior(decay=0.0)
    with pytest.raises(ValueError, match="same length"):
        GroupPrior().update(["a"], [4, 4], [1])
    with pytest.raises(ValueError, match="samples >= 2"):
        GroupPrior().update(["a"], [4], [5])


def test_budget_with_a_group_prior_screens_unseen_prompts_of_an_extreme_group():
    """Every prompt is new (nothing to remember per prompt), yet the always-right group stops taking the budget."""
    rng = random.Random(0)
    groups = GroupPrior()
    rates = {"solved": 1.0, "frontier": 0.5}
    handles = iter(range(10**6))
    label = {}

    def fresh(k):
        out = [next(handles) for _ in range(k)]
        label.update({h: ("solved", "frontier")[h % 2] for h in out})
        return out

    def predict(h):
        prior = groups.prior(label[h])
        return (1.0, 1.0, 0) if prior is None else (*prior, 1)

    taken = {"solved": 0, "frontier": 0}
    for step in range(12):

        def sample_round(hs, k):
            return [[float(rng.random() < rates[label[h]]) for _ in range(k)] for h in hs]

        out = run_budgeted_sampling(
            fresh(4), fresh, predict, lambda h: rng.random(), sample_round, target=4, budget=16
        )
        if step >= 4:
            for h, _ in out.sampled:
                taken[label[h]] += 1
        groups.update([label[h] for h, _ in out.sampled], [4] * 4, [sum(r.pool_rewards[:4]) for _, r in out.sampled])
    assert taken["frontier"] > 0.8 * sum(taken.values())


# -- checkpoint files ------------------------------------------------------------------------------------------------


def test_a_checkpoint_written_before_the_resume_module_still_resumes(tmp_path):
    """A checkpoint in the oldest format trl-ada reads (the JSON below, key for key, and the memory's arrays through
    np.savez) loads into today's objects unchanged; today's writer adds only the refill stream's settings."""
    import json

    from trl_ada.integration.resume import load_sampling_state, save_sampling_state

    (tmp_path / "ada_sampling_state.json").write_text(
        json.dumps(
            {
                "prompts_drawn": 37,
                "refill": {"pass_index": 1, "position": 5, "drawn": 21},
                "group_prior": {"hyperparameters": [0.9, 2.0, 2.0], "groups": {"easy": [3.0, 2.5, 2.2, 0.1, 12.0]}},
            }
        )
    )
    np.savez(
        tmp_path / "prompt_memory.npz",
        hyperparameters=np.array([0.5, 1.0, 1.0]),
        keys=np.array([11, 22], dtype=np.uint64),
        samples=np.array([4.0, 8.0]),
        positives=np.array([1.0, 8.0]),
        visits=np.array([1, 2], dtype=np.int32),
        last_step=np.array([3, 4], dtype=np.int32),
    )
    refill, prior, memory = PromptStream(16, seed=0), GroupPrior(0.9, 2.0, 2.0), PromptMemory(0.5, 1.0, 1.0)
    assert load_sampling_state(str(tmp_path), refill, prior, memory) == 37
    assert {k: refill.state_dict()[k] for k in ("pass_index", "position", "drawn")} == {
        "pass_index": 1,
        "position": 5,
        "drawn": 21,
    }
    assert prior.state_dict()["groups"] == {"easy": [3.0, 2.5, 2.2, 0.1, 12.0]}
    assert memory.pass_rate(22) == pytest.approx((8.0 + 1.0) / (8.0 + 2.0)) and 11 in memory and len(memory) == 2
    # and today's writer writes the same files back
    again = tmp_path / "again"
    again.mkdir()
    save_sampling_state(str(again), 37, refill, prior, memory)
    expected = json.loads((tmp_path / "ada_sampling_state.json").read_text())
    expected["refill"] |= {"num_prompts": 16, "seed": 0, "shuffle": True}  # checked on the next resume
    assert json.loads((again / "ada_sampling_state.json").read_text()) == expected
    with np.load(again / "prompt_memory.npz") as saved, np.load(tmp_path / "prompt_memory.npz") as written:
        assert set(saved.files) == set(written.files)
        assert all(np.array_equal(saved[name], written[name]) for name in saved.files)


def test_budget_iid_reward_reads_each_prompts_first_n_samples_not_an_equal_share_of_its_rounds():
    """`sampling/iid_reward` is round one's mean reward: under the budget, each pool's first call (num_generations
    samples), whatever top-ups of `budget_top_up` followed."""
    import torch

    from trl_ada.core.sampling import PromptResult
    from trl_ada.integration.rollouts import StepSampling, step_metrics

    pools = {0: [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0], 1: [0.0, 0.0, 0.0, 0.0]}  # n = 4, then two top-ups of 2
    topped_up = PromptResult(pool_rewards=pools[0], selected=[0, 1, 4, 5], rounds=3, finished=True)
    uniform = PromptResult(pool_rewards=pools[1], selected=[0, 1, 2, 3], rounds=1)
    step = StepSampling(rows=[{}, {}], results={0: topped_up, 1: uniform}, chosen=[0, 1])
    step.pool_rewards_per_func = [[torch.tensor([r]) for r in pools[p]] for p in (0, 1)]
    step.first_call = {0: 4, 1: 4}
    advantages = torch.tensor([0.5, 0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0])
    metrics = step_metrics(step, advantages, torch.ones(1), epochs_drawn=0.1)
    assert metrics["sampling/iid_reward"] == 0.5  # (4 + 0) / 8; an equal share of 3 rounds read 2 / 6
    assert metrics["sampling/total_samples"] == 12 and metrics["sampling/rounds_max"] == 3


@pytest.mark.parametrize(
    "per_prompt, prompts, expected",
    [(4.1, 30, 123), (4.6, 25, 115), (5.1, 50, 255), (4.0, 8, 32), (4.25, 3, 12), (6.0, 1, 6)],
)
def test_the_step_budget_is_the_floor_of_the_decimal_product(per_prompt, prompts, expected):
    from trl_ada.core.budget import step_budget

    assert step_budget(per_prompt, prompts) == expected
