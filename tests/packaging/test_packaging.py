"""Packaging: declared ranges agree with what CI runs, installing beside a user's stack replaces nothing, and a TRL
whose internals changed is named at construction."""

import configparser
import importlib.metadata
import json
import pathlib
import subprocess
import sys

import pytest
import trl
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.helpers import ROOT as REPOSITORY
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
from trl_ada.integration import seams


ROOT = pathlib.Path(REPOSITORY)


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def install_requires() -> list[Requirement]:
    lines = setup_cfg()["options"]["install_requires"].strip().splitlines()
    return [Requirement(line.strip()) for line in lines if line.strip() and not line.strip().startswith("#")]


def lock(name: str) -> dict[str, Version]:
    pins = {}
    for line in (ROOT / ".ci" / name).read_text().splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith("#"):
            requirement = Requirement(line)
            pins[canonicalize_name(requirement.name)] = Version(str(requirement.specifier).removeprefix("=="))
    return pins


def test_no_dependency_is_pinned_and_torch_has_no_ceiling():
    for requirement in install_requires():
        assert not any(s.operator in ("==", "===") for s in requirement.specifier), f"{requirement} is a pin"
        assert any(s.operator == ">=" for s in requirement.specifier), f"{requirement} has no tested floor"
    (torch,) = [r for r in install_requires() if r.name == "torch"]
    assert all(s.operator == ">=" for s in torch.specifier)


def test_python_floor_is_trls():
    assert setup_cfg()["options"]["python_requires"].strip() == ">=3.11"  # trl 1.16 needs 3.11
    assert sys.version_info >= (3, 11)


def test_oldest_set_is_the_floors():
    oldest = lock("constraints-oldest.txt")
    for requirement in install_requires():
        (floor,) = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        assert oldest[canonicalize_name(requirement.name)] == floor, f"{requirement.name}: oldest set != floor"


@pytest.mark.parametrize("name", ["constraints.txt", "constraints-vllm.txt"])
def test_locks_lie_inside_the_ranges(name):
    pins = lock(name)
    for requirement in install_requires():
        assert requirement.specifier.contains(pins[canonicalize_name(requirement.name)], prereleases=True), (
            f"{name}: {requirement.name}=={pins[canonicalize_name(requirement.name)]} is outside {requirement}"
        )


def test_supported_trl_is_setup_cfgs():
    (requirement,) = [r for r in install_requires() if r.name == "trl"]
    assert str(requirement.specifier) == str(Requirement(f"trl{seams.SUPPORTED_TRL}").specifier)


def test_extras_are_normalised_and_exist():
    """pip warns about extras it cannot match; PEP 685 compares normalised names."""
    extras = setup_cfg()["options.extras_require"]
    assert {"vllm", "wandb", "dev"} <= set(extras)
    for name in extras:
        assert canonicalize_name(name) == name
    for requirement in install_requires():
        if requirement.extras:
            provided = importlib.metadata.metadata(requirement.name).get_all("Provides-Extra")
            assert requirement.extras <= set(provided), f"{requirement}: {requirement.name} provides {provided}"


def test_installing_beside_this_environment_replaces_nothing(tmp_path):
    """The user's view: everything trl-ada needs is already here, so pip must install nothing and replace nothing.

    In CI's newest set this environment holds newer transformers, huggingface_hub, ... than the lock; a pin in
    setup.cfg makes pip (offline, `--no-index`) fail to find the pinned release, and a range the environment does
    not satisfy makes it plan a replacement: both fail here.
    """
    requirements = [str(r) for r in map(Requirement, importlib.metadata.requires("trl-ada")) if not r.marker]
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-index",
            "--quiet",
            "--report",
            str(report),
            *requirements,
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    planned = [
        f"{item['metadata']['name']}=={item['metadata']['version']}"
        for item in json.loads(report.read_text())["install"]
    ]
    assert planned == [], f"installing trl-ada here would install or replace {planned}"


def test_the_installed_trl_has_every_seam():
    assert seams.seam_problems() == []
    assert seams.trl_is_supported()


def test_every_private_of_trl_or_transformers_the_code_touches_is_a_seam():
    """A private attribute or method read on the trainer (`self._x` and `super()._x` in the trainer, `trainer._x`) is
    either trl-ada's own (assigned or defined in trl_ada) or listed in the seam registry, so a TRL release that
    drops it fails at construction, named."""
    import re

    used, own = set(), set()
    for path in (ROOT / "trl_ada").rglob("*.py"):
        text = path.read_text()
        used |= set(re.findall(r"\b(?:self|trainer|super\(\))\.(_[a-zA-Z]\w*)", text))
        own |= set(re.findall(r"\b(?:self|trainer)\.(_[a-zA-Z]\w*)\s*(?:=[^=]|:[^=])", text))
        own |= set(re.findall(r"\bdef (_[a-zA-Z]\w*)", text)) | set(
            re.findall(r"^\s+(_[a-zA-Z]\w*)\s*[:=]", text, re.M)
        )
    assert {"_metrics", "_generate"} <= used  # the scan reads the code it is meant to
    missing = used - own - {seam.name for seam in seams.SEAMS}
    assert not missing, f"trl_ada touches {sorted(missing)} of TRL or transformers: add them to seams.SEAMS"


def test_every_override_of_a_trl_private_passes_through_what_it_does_not_name():
    """A TRL release that adds a parameter to a private method it calls must not break the override: each takes and
    hands on `*args, **kwargs` beyond the parameters it reads."""
    import inspect

    from trl import GRPOTrainer

    overrides = [
        name
        for name, value in vars(AdaGRPOTrainer).items()
        if name.startswith("_") and not name.startswith("__") and callable(value) and hasattr(GRPOTrainer, name)
    ]
    assert "_generate" in overrides and "_calculate_rewards" in overrides  # the scan finds the overrides
    for name in overrides:
        kinds = {p.kind for p in inspect.signature(getattr(AdaGRPOTrainer, name)).parameters.values()}
        assert {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD} <= kinds, name


def test_a_changed_seam_is_named_at_construction(monkeypatch, tmp_path):
    from trl import GRPOTrainer

    def changed(self, inputs, prompts, completions):  # a TRL release that dropped completion_ids_list
        raise AssertionError("never called")

    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", changed)
    args = AdaGRPOConfig(
        output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8, use_cpu=True, report_to="none"
    )
    # The model path does not exist: the seam error must come first, before anything is loaded.
    with pytest.raises(RuntimeError) as error:
        AdaGRPOTrainer(
            model=str(tmp_path / "no-model"),
            reward_funcs=lambda completions, **kw: [0.0],
            args=args,
            train_dataset=None,
        )
    message = str(error.value)
    assert "GRPOTrainer._calculate_rewards" in message and "completion_ids_list" in message
    assert trl.__version__ in message and seams.SUPPORTED_TRL in message


def test_an_instance_seam_trl_stopped_setting_is_named():
    gone = seams.Seam("trl.trainer.grpo_trainer.GRPOTrainer", "_a_field_trl_never_set", kind="instance")
    assert seams._problem(gone) == (
        "trl.trainer.grpo_trainer.GRPOTrainer._a_field_trl_never_set is no longer set by GRPOTrainer"
    )
    assert (
        seams._problem(seams.Seam("trl.trainer.grpo_trainer.GRPOTrainer", "vllm_generation", kind="instance")) is None
    )


def test_a_missing_vllm_backend_is_named(monkeypatch):
    import trl.trainer.grpo_trainer as grpo_module

    monkeypatch.delattr(grpo_module, "VLLMGeneration")
    assert seams.seam_problems() == ["trl.trainer.grpo_trainer.VLLMGeneration is missing"]


def test_an_unsupported_trl_warns_with_both_versions(monkeypatch):
    monkeypatch.setattr(trl, "__version__", "1.17.0")
    assert not seams.trl_is_supported()
    with pytest.warns(UserWarning, match=r"trl>=1\.16,<1\.17; the installed trl is 1\.17\.0"):
        seams.warn_if_unsupported_trl()


@pytest.mark.slow
def test_console_scripts_exit_0_on_success(tmp_path):
    """A console script exits with what its function returns (pip's wrapper calls `sys.exit(function())`): a dict
    (a report) would make the shell see status 1 and print the dict. Each entry point of setup.cfg runs for real,
    at toy size, through that wrapper."""

    from tests.cli.test_compare import RECIPE
    from tests.helpers import launch_env

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    scripts = dict(
        line.split("=", 1) for line in config["options.entry_points"]["console_scripts"].split("\n") if line
    )
    (tmp_path / "recipe.yaml").write_text(RECIPE + "report_to: none\n")
    (tmp_path / "held_out.jsonl").write_text(
        "".join(
            f'{{"prompt": [{{"role": "user", "content": "What is {i} + 1?"}}], "answer": "{i + 1}"}}\n'
            for i in range(4)
        )
    )
    arguments = {
        "trl-ada-train": "--config recipe.yaml --max_steps 1 --output_dir trained",
        "trl-ada-eval": "--model_name_or_path trained --datasets held_out.jsonl --prompt_template none --k 1 "
        "--reward_funcs last_number_reward --max_new_tokens 8 --output_file eval.json",
        "trl-ada-compare": "--config recipe.yaml --arm grpo sampler=grpo --seeds 0 --max_steps 1 --eval_every 1 "
        "--eval_examples 6 --eval_min_examples 6 --eval_fraction 0.2 --eval_k 0 --output_dir compared",
        "trl-ada-demo": "--model tiny --output_dir demo --max_steps 1 --warm_start_steps 2 --eval_examples 8 --eval_k 1",
    }
    assert set(map(str.strip, scripts)) == set(arguments)
    for name, target in scripts.items():
        module, function = target.strip().split(":")
        code = f"import sys; from {module} import {function}; sys.exit({function}())"
        argv = [sys.executable, "-c", code, *arguments[name.strip()].split()]
        done = subprocess.run(argv, cwd=tmp_path, env=launch_env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{name.strip()} exited {done.returncode}: {done.stderr[-2000:]}"
