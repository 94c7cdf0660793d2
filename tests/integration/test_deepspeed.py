"""DeepSpeed ZeRO-3 and ZeRO-2 on two CPU processes (DeepSpeed's CPU accelerator, gloo), against plain DDP of the same
seed: tests/helpers/fsdp_worker.py --zero3 / --zero2 under accelerate. Skipped where deepspeed is not installed (the newest
and oldest sets; `make test` installs it into the lock venv: docs/what-has-run-where.md)."""

import json
import os

import pytest

from tests.helpers import ROOT, accelerate_launch, assert_ranks_agree, launch_env, run_launch, sampling_keys, torchrun


pytest.importorskip("deepspeed")
# One xdist worker runs the module: its fixture launches 2-process runs, once (per worker it ran twice, 295 s).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("deepspeed")]
WORKER = os.path.join(ROOT, "tests", "helpers", "fsdp_worker.py")  # the launched worker
ZERO3_CONFIG = os.path.join(ROOT, "recipes", "accelerate_configs", "zero3_cpu.yaml")
ZERO2_CONFIG = os.path.join(ROOT, "recipes", "accelerate_configs", "zero2_cpu.yaml")


@pytest.fixture(scope="module")
def ranks(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("zero3")
    (out / "zero2").mkdir()
    launches = {
        "zero3": accelerate_launch(ZERO3_CONFIG, WORKER, tiny_model, str(out), "--zero3"),
        "zero2": accelerate_launch(ZERO2_CONFIG, WORKER, tiny_model, str(out / "zero2"), "--zero2"),
        "ddp": torchrun(WORKER, tiny_model, str(out), "--ddp"),
    }
    for command in launches.values():
        run_launch(command, env=launch_env(DS_ACCELERATOR="cpu"), cwd=out)
    folder = {"zero2": out / "zero2"}
    return {
        engine: [json.load(open(folder.get(engine, out) / f"{engine}-rank{r}.json")) for r in range(2)]
        for engine in launches
    }, out


@pytest.mark.parametrize("run", ["balanced", "dynamic", "budget", "resumed"])
def test_zero3_ranks_agree_score_once_and_train_partitioned(ranks, run):
    rank0, rank1 = (r[run] for r in ranks[0]["zero3"])
    for rank in (rank0, rank1):  # really ZeRO-3: each rank holds half of every parameter
        assert rank["distributed_type"] == "DistributedType.DEEPSPEED" and rank["sharded"]
        assert rank["local_numel"] == rank["full_numel"] // 2
    assert_ranks_agree(rank0, rank1, resumed=run == "resumed")


def test_zero3_first_step_matches_ddp(ranks):
    zero3, ddp = ranks[0]["zero3"][0]["balanced"]["logs"], ranks[0]["ddp"][0]["balanced"]["logs"]
    assert all(zero3[0][k] == ddp[0][k] for k in sampling_keys(zero3))  # the same completions drawn and kept
    assert zero3[0]["loss"] != 0
    assert abs(zero3[0]["loss"] - ddp[0]["loss"]) <= 1e-6  # measured: identical at step 1, as FSDP


def test_zero3_checkpoint_saved_once_and_resumed_on_every_rank(ranks):
    results, out = ranks
    checkpoint = out / "budget" / "checkpoint-2"
    assert (checkpoint / "prompt_memory.npz").exists() and (checkpoint / "ada_sampling_state.json").exists()
    saved = results["zero3"][0]["budget"]
    assert saved["global_step"] == 2 and len(saved["memory"]) > 0
    for rank in results["zero3"]:
        resumed = rank["resumed"]
        assert resumed["global_step"] == 3 and [h["step"] for h in resumed["logs"]] == [1, 2, 3]
        assert resumed["restored"]["memory"] == saved["memory"]
        assert resumed["restored"]["refill"] == saved["refill"]


@pytest.mark.parametrize("run", ["balanced", "dynamic", "budget", "resumed"])
def test_zero2_ranks_agree_score_once_and_partition_the_optimizer(ranks, run):
    rank0, rank1 = (r[run] for r in ranks[0]["zero2"])
    for rank in (rank0, rank1):  # really ZeRO-2: whole parameters, each rank owning half of the fp32 optimizer state
        assert rank["distributed_type"] == "DistributedType.DEEPSPEED" and rank["zero_stage"] == 2
        assert not rank["sharded"] and rank["local_numel"] == rank["full_numel"]
        assert abs(rank["optimizer_numel"] - rank["full_numel"] / 2) <= 2
    assert_ranks_agree(rank0, rank1, resumed=run == "resumed")
    logs0 = rank0["logs"]
    if run == "balanced":  # the first step's loss is DDP's
        ddp = ranks[0]["ddp"][0]["balanced"]["logs"]
        assert abs(logs0[0]["loss"] - ddp[0]["loss"]) <= 1e-6
    if run == "resumed":
        saved = ranks[0]["zero2"][0]["budget"]
        assert rank0["global_step"] == 3 and rank0["restored"]["memory"] == saved["memory"]


def test_pipelined_rounds_refuse_a_reward_model_zero3_shards(ranks):
    # Under ZeRO-3 TRL partitions reward models too (prepare_deepspeed): every forward gathers parameters from all
    # processes, which ranks pipelining their own samples cannot provide. Under ZeRO-2 they stay whole.
    for rank in ranks[0]["zero3"]:
        record = rank["reward_model"]
        assert record["sharded"] and "pipelined_rounds=True" in record["message"]
        assert "DeepSpeed ZeRO-3" in record["message"] and "pipelined_rounds=False" in record["message"]
    for rank in ranks[0]["zero2"]:
        assert rank["reward_model"] == {"sharded": False, "message": None}
