"""DeepSpeed ZeRO-3 and ZeRO-2 on two CPU processes (DeepSpeed's CPU accelerator, gloo), against plain DDP of the same
seed: tests/helpers/fsdp_worker.py --zero3 / --zero2 under accelerate. Skipped where deepspeed is not installed (the newest
and oldest sets; `make test` installs it into the lock venv: docs/what-has-run-where.md)."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, launch_env


pytest.importorskip("deepspeed")
# One xdist worker runs the module: its fixture launches 2-process runs, once (per worker it ran twice, 295 s).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("deepspeed")]
HERE = os.path.join(ROOT, "tests", "helpers")  # the launched worker
WORKER = os.path.join(HERE, "fsdp_worker.py")
ZERO3_CONFIG = os.path.join(ROOT, "recipes", "accelerate_configs", "zero3_cpu.yaml")
ZERO2_CONFIG = os.path.join(ROOT, "recipes", "accelerate_configs", "zero2_cpu.yaml")


@pytest.fixture(scope="module")
def ranks(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("zero3")
    env = {**launch_env(), "DS_ACCELERATOR": "cpu"}
    launches = {
        "zero3": [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            ZERO3_CONFIG,
            "--main_process_port",
            "0",
            WORKER,
            tiny_model,
            str(out),
            "--zero3",
        ],
        "zero2": [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            ZERO2_CONFIG,
            "--main_process_port",
            "0",
            WORKER,
            tiny_model,
            str(out / "zero2"),
            "--zero2",
        ],
        "ddp": [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            WORKER,
            tiny_model,
            str(out),
            "--ddp",
        ],
    }
    (out / "zero2").mkdir()
    for command in launches.values():
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=out)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    folder = {"zero2": out / "zero2"}
    return {
        engine: [json.load(open(folder.get(engine, out) / f"{engine}-rank{r}.json")) for r in range(2)]
        for engine in launches
    }, out


def sampling_keys(logs):
    return [k for k in logs[0] if k.startswith("sampling/") and "seconds" not in k]


@pytest.mark.parametrize("run", ["balanced", "dynamic", "budget", "resumed"])
def test_zero3_ranks_agree_score_once_and_train_partitioned(ranks, run):
    rank0, rank1 = (r[run] for r in ranks[0]["zero3"])
    for rank in (rank0, rank1):  # really ZeRO-3: each rank holds half of every parameter
        assert rank["distributed_type"] == "DistributedType.DEEPSPEED" and rank["sharded"]
        assert rank["local_numel"] == rank["full_numel"] // 2
    logs0, logs1 = rank0["logs"], rank1["logs"]
    keys = sampling_keys(logs0)
    assert keys and all(a[k] == b[k] for a, b in zip(logs0, logs1) for k in keys)  # the same decisions
    assert all(math.isfinite(h["loss"]) for h in logs0 + logs1)
    new_steps = logs0[2:] if run == "resumed" else logs0
    generated = sum(h["sampling/total_samples"] + h["sampling/padding_samples"] for h in new_steps)
    assert rank0["reward_calls"] + rank1["reward_calls"] == generated > 0  # every completion scored once


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
    logs0, logs1 = rank0["logs"], rank1["logs"]
    keys = sampling_keys(logs0)
    assert keys and all(a[k] == b[k] for a, b in zip(logs0, logs1) for k in keys)
    assert all(math.isfinite(h["loss"]) for h in logs0 + logs1)
    new_steps = logs0[2:] if run == "resumed" else logs0
    generated = sum(h["sampling/total_samples"] + h["sampling/padding_samples"] for h in new_steps)
    assert rank0["reward_calls"] + rank1["reward_calls"] == generated > 0
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
