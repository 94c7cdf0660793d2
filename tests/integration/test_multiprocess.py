"""Two CPU processes (torchrun, gloo): same rounds on every rank, equal collectives, groups intact."""

import itertools
import json
import math
import os

import pytest

from tests.helpers import ROOT, launch_env, run_launch, torchrun


pytestmark = pytest.mark.slow
WORKER = os.path.join(ROOT, "tests", "helpers", "multiprocess_worker.py")


# The newest and oldest sets run the first two 2-process tests; the rest add the extensions' bookkeeping across
# ranks, which depends on our code, not on the release (accelerate's gather_object aside).
extensions_across_ranks = pytest.mark.lock_only


def launch(tmp_path, model, mode):
    run_launch(torchrun(WORKER, model, str(tmp_path), mode), env=launch_env())
    return [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]


def ranks_agree(logs0, logs1, prefixes=("sampling/",)) -> bool:
    """Both ranks logged the same values under `prefixes` at every step (timings aside), and logged some."""
    keys = [k for k in logs0[0] if k.startswith(prefixes) and "seconds" not in k]
    return bool(keys) and len(logs0) == len(logs1) and all(a[k] == b[k] for a, b in zip(logs0, logs1) for k in keys)


def test_two_processes_agree_and_share_the_work(tiny_model, tmp_path):
    ranks = launch(tmp_path, tiny_model, "train")
    logs0, logs1 = ranks[0]["logs"], ranks[1]["logs"]
    assert len(logs0) == 2
    assert ranks_agree(logs0, logs1)
    assert ranks[0]["params"] == ranks[1]["params"]  # same weights after the updates

    # Hard prompts on rank 0 ran 4 rounds: both ranks took part in every round (the work was split, not idled).
    assert all(h["sampling/rounds_max"] == 4 for h in logs0)
    assert all(h["sampling/round_4/active_prompts"] >= 1 for h in logs0)
    assert sum(h["sampling/padding_samples"] for h in logs0) > 0  # odd rounds were padded, not split unevenly
    generated = sum(h["sampling/total_samples"] + h["sampling/padding_samples"] for h in logs0)
    assert ranks[0]["reward_calls"] == ranks[1]["reward_calls"] == generated / 2  # each scored once, evenly split
    # The generated totals: both ranks' rows and tokens (padding included), the same on both ranks' logs.
    totals = [
        (r["logs"][-1]["sampling/generated_completions_total"], r["logs"][-1]["sampling/generated_tokens_total"])
        for r in ranks
    ]
    assert totals[0] == totals[1] == tuple(map(sum, zip(*(r["generated"] for r in ranks))))
    assert totals[0][0] == generated

    # Groups intact: each rank trains on its own prompts, num_generations rows each, whole.
    for rank in ranks:
        for inputs, groups, advantages in zip(rank["inputs"], rank["groups"], rank["advantages"]):
            assert groups == inputs  # the rows TRL gave this rank, in order
            assert len(advantages) == 8
    # The completions table (gathered on every rank): log_extra values travelled with their completions, including
    # the ones generated on the other rank.
    assert all(rank["table_rows"] == 16 and rank["extra_mismatches"] == 0 for rank in ranks)  # 4 prompts x 4
    hard = list(ranks[0]["groups"][0])
    assert all(tag.startswith(("q0 ", "q1 ")) for tag in hard)


def test_groups_straddling_processes_are_refused(tiny_model, tmp_path):
    ranks = launch(tmp_path, tiny_model, "straddle")
    for rank in ranks:
        assert "per_device_train_batch_size * steps_per_generation" in rank["message"]
        assert "multiple of num_generations (4)" in rank["message"]


@extensions_across_ranks
def test_a_sampler_deciding_differently_on_two_ranks_is_refused_on_both(tiny_model, tmp_path):
    ranks = launch(tmp_path, tiny_model, "rank_dependent")
    assert all("decided differently on different ranks" in rank["message"] for rank in ranks)


@extensions_across_ranks
def test_two_processes_draw_the_same_refills(tiny_model, tmp_path):
    ranks = launch(tmp_path, tiny_model, "dynamic")
    logs0, logs1 = ranks[0]["logs"], ranks[1]["logs"]
    assert ranks_agree(logs0, logs1)  # same decisions on both ranks
    assert ranks[0]["refill"] == ranks[1]["refill"] and ranks[0]["refill"]["drawn"] > 0  # the same extra prompts
    assert ranks[0]["memory"] == ranks[1]["memory"]  # the same memory on both ranks
    generated = sum(h["sampling/total_samples"] + h["sampling/padding_samples"] for h in logs0)
    assert ranks[0]["reward_calls"] + ranks[1]["reward_calls"] == generated  # each completion scored once
    # Each rank trains on 2 whole groups per step, all with signal: never the 1.0 or 0.0 prompts (rank 0 was handed
    # both of them in step 1; it trains on refills).
    for rank in ranks:
        for groups, advantages in zip(rank["groups"], rank["advantages"]):
            assert len(groups) == 8 and all(" r0.5" in tag or " r0.3" in tag for tag in groups)
            assert all(any(a != 0 for a in advantages[g : g + 4]) for g in (0, 4))


@extensions_across_ranks
@pytest.mark.parametrize("sampler", ["est", "knapsack"])
def test_two_processes_allocate_est_over_their_own_prompts(tiny_model, tmp_path, sampler):
    ranks = launch(tmp_path, tiny_model, sampler)
    logs0, logs1 = ranks[0]["logs"], ranks[1]["logs"]
    assert len(logs0) == 4 and ranks_agree(logs0, logs1)
    assert ranks[0]["memory"] == ranks[1]["memory"] and ranks[0]["params"] == ranks[1]["params"]
    assert all(h["sampling/total_samples"] == 16 and h["sampling/padding_samples"] == 0 for h in logs0)
    # Each rank generated and scored exactly its own generation batch: 8 rows a step, no sample crossed ranks.
    assert ranks[0]["reward_calls"] == ranks[1]["reward_calls"] == 4 * 8
    unequal = False
    for rank in ranks:
        for groups, inputs in zip(rank["groups"], rank["inputs"]):
            # TRL handed this rank its 2 prompts (4 rows each); it trains on the same 2 prompts, N_x rows each.
            distinct = [tag for tag, _ in itertools.groupby(groups)]
            assert len(groups) == 8 and distinct == [tag for tag, _ in itertools.groupby(inputs)]
            sizes = [len(list(run)) for _, run in itertools.groupby(groups)]
            assert len(sizes) == 2 and min(sizes) >= 2  # its own 2 prompts, N_x each, summing to 8
            unequal |= sizes[0] != sizes[1]
    assert unequal  # revisited prompts were allocated by their remembered pass rates
    assert max(h[f"sampling/{sampler}/samples_max"] for h in logs0) > 4


@extensions_across_ranks
def test_two_processes_judge_summed_rewards_by_the_positive_reward_func(tiny_model, tmp_path):
    """open-r1's accuracy + format + tag count with positive_reward_func='accuracy_reward': on both ranks every pool
    the rounds read is each sample's correctness (NaN where the gold does not parse), and the ranks agree."""
    ranks = launch(tmp_path, tiny_model, "open_r1")
    assert ranks[0]["judged"] == ranks[1]["judged"] and ranks[0]["params"] == ranks[1]["params"]
    pools = [pair for step in ranks[0]["judged"] for pair in step]
    assert pools and all(
        all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(judged, accuracy))
        and len(judged) == len(accuracy)
        for judged, accuracy in pools
    )
    logs0, logs1 = ranks[0]["logs"], ranks[1]["logs"]
    assert ranks_agree(logs0, logs1)


@extensions_across_ranks
def test_two_processes_retire_the_same_solved_prompts_and_skip_them(tiny_model, tmp_path):
    ranks = launch(tmp_path, tiny_model, "retire_solved")
    logs0, logs1 = ranks[0]["logs"], ranks[1]["logs"]
    assert len(logs0) == 4 and ranks_agree(logs0, logs1)
    assert ranks[0]["retired"] == ranks[1]["retired"] and ranks[0]["retired"]
    assert ranks[0]["params"] == ranks[1]["params"]
    assert sum(h["sampling/retire_solved/skipped"] for h in logs0) >= 1
    # the always-right question trains in one step only, the one whose visit retired it, on whichever rank had it
    steps = {step for rank in ranks for step, tags in enumerate(rank["groups"]) if any("q0 r1.0" in t for t in tags)}
    assert len(steps) == 1


@extensions_across_ranks
def test_two_processes_share_one_budget(tiny_model, tmp_path):
    ranks = launch(tmp_path, tiny_model, "budget")
    logs0, logs1 = ranks[0]["logs"], ranks[1]["logs"]
    assert len(logs0) == 4 and ranks_agree(logs0, logs1)
    assert ranks[0]["memory"] == ranks[1]["memory"] and ranks[0]["refill"] == ranks[1]["refill"]
    for h in logs0:  # 4 prompts per step at 5.0 each: 20 completions at most, padding included
        assert h["sampling/total_samples"] + h["sampling/padding_samples"] <= 20
    assert sum(h["sampling/padding_samples"] for h in logs0) > 0  # odd top-up rounds were padded, and paid for
    assert sum(h["sampling/prompts_skipped"] for h in logs0[1:]) > 0
    generated = sum(h["sampling/total_samples"] + h["sampling/padding_samples"] for h in logs0)
    assert ranks[0]["reward_calls"] + ranks[1]["reward_calls"] == generated


@extensions_across_ranks
@pytest.mark.parametrize("mode", ["pipelined", "pipelined_speculative"])
def test_two_processes_pipeline_their_own_prompts(tiny_model, tmp_path, mode):
    """pipelined_rounds=True on a stand-in engine (tests/helpers/standin_engine.py) whose rank 1 finishes samples 9x slower
    than rank 0's: each rank pipelines its own prompts with no collective per engine step, then one gather per batch;
    both ranks end each step with the same pools and decisions, equal to the synchronous driver's on those pools."""
    from tests.core.test_pipelined import synchronous
    from trl_ada.core.sampling import EliminationRule

    ranks = launch(tmp_path, tiny_model, mode)
    assert ranks[0]["results"] == ranks[1]["results"] and len(ranks[0]["results"]) == 3  # same decisions
    assert ranks[0]["advantages"] != ranks[1]["advantages"]  # ...each training its own half of the batch
    logs = ranks[0]["logs"]
    total = sum(h["sampling/total_samples"] for h in logs)  # pools, and speculative samples wasted (if any)
    aborted = ranks[0]["aborted"] + ranks[1]["aborted"]  # never finished, so never scored
    # every finished sample scored once, on one rank
    assert ranks[0]["reward_calls"] + ranks[1]["reward_calls"] == total - aborted
    # the generated completions: every sample either rank's engine finished, summed over ranks, on both ranks' logs
    completions = [rank["logs"][-1]["sampling/generated_completions_total"] for rank in ranks]
    assert completions[0] == completions[1] == total - aborted
    wasted = sum(h["sampling/pipelined/wasted_samples"] for h in logs)
    assert (wasted > 0) == (mode == "pipelined_speculative") and aborted <= wasted
    assert (
        ranks[0]["reward_calls"] > 0
        and ranks[1]["reward_calls"] > 0
        and sum(h["sampling/padding_samples"] for h in logs) == 0
    )
    assert sum(ranks[1]["polls"]) > 2 * sum(ranks[0]["polls"])  # the ranks finished far apart
    assert ranks[0]["left_running"] == ranks[1]["left_running"] == 0
    for step, results in enumerate(ranks[0]["results"]):
        assert all(len(pool) == rounds * 8 for pool, _, rounds, _ in results)
        # The batch's own random selection: seeded by (seed + step, the prompt's position in the whole batch).
        replay = synchronous([pool for pool, _, _, _ in results], EliminationRule(selection="random", seed=step))
        assert [(r.pool_rewards, r.selected, r.rounds, r.finished) for r in replay] == [tuple(r) for r in results]


@extensions_across_ranks
def test_two_processes_run_tools_environments_rollout_func_and_images(tmp_path):
    """Tools, environments, rollout_func and images on 2 processes: every rank runs its share of each round through TRL's rollout path, the ranks agree."""
    from trl_ada.examples.tiny import build_tiny_model, build_tiny_vlm

    models = ",".join(
        [
            build_tiny_model(str(tmp_path / "tool-model"), tools=True),
            build_tiny_model(str(tmp_path / "plain-model")),
            build_tiny_vlm(str(tmp_path / "vlm")),
        ]
    )
    from tests.integration.test_rollouts import ENVIRONMENTS

    ranks = launch(tmp_path, models, "agents")
    for name in ("tools", "rollout_func", "images", "images_placeholder") + (
        ("environment", "environment_routed") if ENVIRONMENTS else ()
    ):
        logs0, logs1 = ranks[0][name]["logs"], ranks[1][name]["logs"]
        assert len(logs0) == 2, name
        assert ranks_agree(logs0, logs1, ("sampling/", "tools/", "reward")), name  # same decisions, same metrics
        assert ranks[0][name]["params"] == ranks[1][name]["params"], name  # same weights after the updates
    tools = [rank["tools"] for rank in ranks]
    logs = tools[0]["logs"]
    generated = sum(h["sampling/total_samples"] + h["sampling/padding_samples"] for h in logs)
    # the tool calls both ranks' policies wrote, counted over every generated sample (padding included)
    assert sum(
        h["tools/call_frequency"] * (h["sampling/total_samples"] + h["sampling/padding_samples"]) for h in logs
    ) == pytest.approx(sum(r["tool_calls"] for r in tools))
    assert all(r["masks_match"] for r in tools) and any(0 in (m or []) for r in tools for ms in r["masks"] for m in ms)
    calls = [rank["rollout_func"]["calls"] for rank in ranks]
    rollout_logs = ranks[0]["rollout_func"]["logs"]
    assert sum(map(sum, calls)) == sum(
        h["sampling/total_samples"] + h["sampling/padding_samples"] for h in rollout_logs
    )
    assert calls[0] == calls[1]  # equal shares: every rank calls rollout_func the same number of times, same sizes
    if ENVIRONMENTS:
        env = [rank["environment"] for rank in ranks]
        assert env[0]["pool"] == env[1]["pool"] == 4 * 8 // 2  # each rank's share of round 1: 4 prompts x 8
        routed = [rank["environment_routed"]["prompts"] for rank in ranks]
        assert routed[0] and all("What is" in prompt for rank in routed for prompt in rank)  # from reset()
    for name in ("images", "images_placeholder"):
        assert ranks[0][name]["memory"] == ranks[1][name]["memory"] and len(ranks[0][name]["memory"]) == 4
    assert generated > sum(h["sampling/kept_samples"] for h in logs)
