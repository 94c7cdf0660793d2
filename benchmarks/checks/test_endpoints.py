"""The compute study's endpoints (benchmarks/compute_study/endpoints.py): the window mean, the plateau rule and Holm's correction, on
hand-built `trl-ada-compare` records whose answers are known."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import load_script
from trl_ada.cli import paired


endpoints = load_script("benchmarks/compute_study/endpoints.py", "compute_study_endpoints")


def record(tokens, greedy, reward=None, items=None):
    """A compare record: one curve point per evaluation (every 10 steps), its per-question items, per-step rewards."""
    curve = [
        {"step": 10 * i, "tokens": t, "greedy": g, "items": list(items[i]) if items is not None else [g, g]}
        for i, (t, g) in enumerate(zip(tokens, greedy))
    ]
    return {"curve": curve, "reward": list(reward) if reward is not None else [0.5] * (10 * (len(tokens) - 1))}


def test_window_items_averages_each_question_over_evenly_spaced_positions():
    curve = record([0, 100, 200], [0, 0, 0], items=[[0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])["curve"]
    # at 100, 150, 200: question 0 scores 1, 1, 1; question 1 scores 1, 0.5, 0
    assert list(endpoints.window_items(curve, "tokens", 100, 200, points=3)) == [1.0, 0.5]
    assert list(endpoints.window_items(curve, "tokens", 0, 100, points=2)) == [0.5, 1.0]
    assert endpoints.window_items(curve, "tokens", 150, 250) is None  # past the run's end
    with pytest.raises(ValueError, match="high >= low"):
        endpoints.window_items(curve, "tokens", 200, 100)


def test_window_difference_pairs_by_seed_and_refuses_a_run_short_of_the_window():
    base = {s: record([0, 100, 200], [0, 0, 0], items=[[0.0, 0.0]] * 3) for s in (1, 2, 3)}
    arm = {s: record([0, 100, 200], [0, 0, 0], items=[[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]) for s in (1, 2, 3)}
    ahead = endpoints.window_difference(arm, base, "tokens", 100, 200)
    assert ahead["seeds"] == [1, 2, 3] and ahead["mean"] == 1.0 and ahead["verdict"] == "ahead"
    assert ahead["p"] == 0.0 and ahead["window"] == [100, 200]
    level = endpoints.window_difference(base, base, "tokens", 100, 200)
    assert level["mean"] == 0.0 and level["p"] == 1.0 and level["verdict"] == paired.NO_DIFFERENCE
    arm[2] = record([0, 100, 150], [0, 0, 0], items=[[0.0, 0.0]] * 3)
    with pytest.raises(ValueError, match=r"seed 2: the arm's run does not reach 200 on 'tokens'.*continue"):
        endpoints.window_difference(arm, base, "tokens", 100, 200)
    with pytest.raises(ValueError, match="no seed ran in both arms"):
        endpoints.window_difference({9: arm[1]}, base, "tokens", 100, 200)


def test_rise_fits_a_line_through_the_last_quarter():
    tokens = [0, 250, 500, 750, 800, 850, 900, 950, 1000]  # 80 steps; evaluations every 10
    flat = record(tokens, [0.1, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5], reward=[0.8] * 80)
    assert endpoints.rise(flat, 1000) == {"held_out": pytest.approx(0.0, abs=1e-12), "reward": pytest.approx(0.0)}
    # held-out score rising by 0.1 per 250 tokens in the last quarter; reward rising linearly with the tokens
    climbing = record(tokens, [0.1, 0.3, 0.4, 0.5, 0.52, 0.54, 0.56, 0.58, 0.6])
    at = endpoints._step_tokens(climbing)
    climbing["reward"] = list(at / 1000)
    r = endpoints.rise(climbing, 1000)
    assert r["held_out"] == pytest.approx(0.1) and r["reward"] == pytest.approx(0.25)
    assert endpoints.rise(climbing, 2000) == {"held_out": None, "reward": None}  # the run stops short of the budget
    assert at[9] == 250 and at[0] == 25  # a step's tokens: between the evaluations around it


def test_rise_counts_the_final_evaluation_a_budget_stopped_run_makes_just_past_it():
    """A run stopped by a token budget ends at the first step past it: its final evaluation (here a drop to 0.3 at
    1010 tokens) is read at the budget, by interpolation, not left out; the step that crossed the budget counts too."""
    tokens = [0, 250, 500, 750, 800, 850, 900, 950, 1010]
    dropping = record(tokens, [0.1, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5, 0.3], reward=[0.8] * 79 + [0.0])
    r = endpoints.rise(dropping, 1000)
    x = np.array([750, 800, 850, 900, 950, 1000.0])
    y = np.array([0.5, 0.5, 0.5, 0.5, 0.5, 0.5 - 0.2 * 50 / 60])
    assert r["held_out"] == pytest.approx(np.polyfit(x, y, 1)[0] * 250) and r["held_out"] < -0.05
    assert r["reward"] < 0  # the last step, 0.0, is in the line
    # a run with half the steps (n=8's) and an evaluation every 10: two evaluations in the quarter and the point at B
    half = record([0, 500, 760, 900, 1004], [0.1, 0.4, 0.5, 0.5, 0.5], reward=[0.5] * 40)
    assert endpoints.rise(half, 1000)["held_out"] == pytest.approx(0.0, abs=1e-12)
    # evaluated at an earlier budget, a longer run's later evaluations do not count
    assert endpoints.rise(dropping, 900)["held_out"] == pytest.approx(0.0, abs=1e-12)


def test_plateau_checks_every_seed_and_the_mean_over_resampled_seeds():
    tokens = [0, 250, 500, 750, 800, 850, 900, 950, 1000]
    flat = record(tokens, [0.1, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5], reward=[0.8] * 80)
    climbing = record(tokens, [0.1, 0.3, 0.4, 0.5, 0.52, 0.54, 0.56, 0.58, 0.6], reward=[0.8] * 80)
    out = endpoints.plateau({0: flat, 1: flat, 2: flat}, 1000, held_out_tolerance=0.02, reward_tolerance=0.05)
    assert out["plateaued"] and out["seeds_plateaued"] == 3
    mixed = endpoints.plateau({0: flat, 1: climbing, 2: flat}, 1000, held_out_tolerance=0.02, reward_tolerance=0.05)
    assert [r["plateaued"] for r in mixed["per_seed"].values()] == [True, False, True]
    held = mixed["over_seeds"]["held_out"]
    # the 95th percentile of the resampled means: the climbing seed drawn twice of three (p = 7/27), not thrice (1/27)
    assert held["mean"] == pytest.approx(0.1 / 3) and held["upper"] == pytest.approx(0.2 / 3) and not held["within"]
    assert not mixed["plateaued"] and mixed["over_seeds"]["reward"]["within"]
    with pytest.raises(ValueError, match="seed 0: the run does not reach the budget 2000"):
        endpoints.plateau({0: flat}, 2000, 0.02, 0.05)


def test_a_seed_whose_line_cannot_be_fitted_is_named_and_left_out_of_the_bound():
    """A run of few, long steps (n=8's) can hold one evaluation in the last quarter: that seed's held-out line is
    unreadable, named, and the rule reads from the other seeds; with none readable the rule reads None."""
    tokens = [0, 250, 500, 750, 800, 850, 900, 950, 1000]
    flat = record(tokens, [0.1, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5], reward=[0.8] * 80)
    sparse = record([0, 400, 700, 880, 1010], [0.1, 0.3, 0.4, 0.5, 0.5], reward=[0.8] * 40)  # one in [750, 1000)
    assert endpoints.rise(sparse, 1000)["held_out"] is None and endpoints.rise(sparse, 1000)["reward"] is not None
    out = endpoints.plateau({0: flat, 1: sparse, 2: flat}, 1000, held_out_tolerance=0.02, reward_tolerance=0.05)
    assert out["unreadable"] == {"held_out": [1], "reward": []}
    assert out["over_seeds"]["held_out"]["seeds"] == 2 and out["over_seeds"]["reward"]["seeds"] == 3
    assert [r["plateaued"] for r in out["per_seed"].values()] == [True, None, True] and out["plateaued"]
    rising = {**sparse, "reward": list(np.linspace(0.0, 1.0, 40))}  # its readable line alone fails the rule
    assert endpoints.plateau({1: rising}, 1000, 0.02, 0.05)["per_seed"][1]["plateaued"] is False
    alone = endpoints.plateau({1: sparse}, 1000, 0.02, 0.05)
    assert alone["over_seeds"]["held_out"] is None and alone["plateaued"] is None and alone["seeds_plateaued"] == 0
    assert endpoints.plateau({1: rising}, 1000, 0.02, 0.05)["plateaued"] is False  # a bound over: fails regardless


def test_a_step_that_ends_at_the_start_of_the_quarter_is_in_the_reward_line():
    run = record([0, 750, 1000], [0.5, 0.5, 0.5], reward=[0.0] * 9 + [1.0] + [0.0] * 10)  # step 10 ends at 750
    assert endpoints._step_tokens(run)[9] == 750
    with_it = endpoints.rise(run, 1000)["reward"]
    run["reward"][9] = 0.0
    assert with_it != endpoints.rise(run, 1000)["reward"]


def test_a_difference_that_is_not_a_number_is_refused():
    with pytest.raises(ValueError, match="NaN or infinite"):
        paired.paired_difference([[1.0, float("nan")], [0.0, 1.0]])


def test_holm_matches_the_step_down_rule_by_hand():
    out = endpoints.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5})
    # sorted: a 0.01 x4 = 0.04; c 0.03 x3 = 0.09; b 0.04 x2 = 0.08 -> 0.09 (monotone); d 0.5 x1 = 0.5
    assert {k: round(v["adjusted"], 10) for k, v in out.items()} == {"a": 0.04, "c": 0.09, "b": 0.09, "d": 0.5}
    assert [k for k, v in out.items() if v["rejected"]] == ["a"]
    assert endpoints.holm({"only": 0.03})["only"] == {"p": 0.03, "adjusted": 0.03, "rejected": True}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=3), st.floats(0, 1), min_size=1, max_size=8))
def test_holm_is_monotone_capped_and_rejects_a_prefix(p_values):
    out = endpoints.holm(p_values)
    order = sorted(p_values, key=lambda k: p_values[k])
    adjusted = [out[k]["adjusted"] for k in order]
    assert all(p_values[k] <= out[k]["adjusted"] <= 1.0 for k in p_values)
    assert adjusted == sorted(adjusted)
    rejected = [out[k]["rejected"] for k in order]
    assert rejected == sorted(rejected, reverse=True)  # the rejected ones are the smallest p-values
    assert out[order[-1]]["adjusted"] >= min(1.0, max(p_values.values()))  # the largest is never scaled below itself


def test_the_bootstrap_p_value_is_two_sided():
    ahead = paired.paired_difference([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]])
    behind = paired.paired_difference([[-1.0, 0.0, -1.0, -1.0], [-1.0, -1.0, 0.0, -1.0]])
    assert ahead["p"] == behind["p"] < 0.05
    rng = np.random.default_rng(0)
    noise = paired.paired_difference(rng.choice([-1.0, 0.0, 1.0], size=(4, 40)))
    assert noise["p"] > 0.05 and noise["verdict"] == paired.NO_DIFFERENCE
