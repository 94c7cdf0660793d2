"""The wheel is the library, and it works outside the checkout: built from this tree, installed on its own (no
editable path, no repository beside it), every console script that needs a file finds it in the package."""

import glob
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import ROOT


def _setuptools_builds() -> str | None:
    """Why this environment cannot build the wheel offline (pyproject.toml asks for setuptools >= 77), or None."""
    try:
        import setuptools
    except ImportError:
        return "no setuptools here"
    major = int(setuptools.__version__.split(".")[0])
    return None if major >= 77 else f"setuptools {setuptools.__version__} here; the build needs >= 77 (pyproject.toml)"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site folder, bin folder, wheel) of the wheel built from this tree and installed into a folder of its own."""
    if _setuptools_builds() is not None:  # no build isolation: a test never downloads (the oldest set's venv)
        pytest.skip(_setuptools_builds())
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # what a build reads, copied: setuptools writes build/ beside the sources
    shutil.copytree(
        os.path.join(ROOT, "trl_ada"), source / "trl_ada", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp / "dist"),
            str(source),
        ],
        check=True,
    )
    (wheel,) = glob.glob(str(tmp / "dist" / "trl_ada-*.whl"))
    site = tmp / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), wheel], check=True
    )
    return site, site / "bin", wheel


def run(installed, tmp_path, *command):
    site, _, _ = installed
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)


def test_the_wheel_holds_the_files_the_package_reads(installed):
    names = zipfile.ZipFile(installed[2]).namelist()
    for path in (
        "trl_ada/examples/resources/recipes/tiny/ada_balance.yaml",
        "trl_ada/examples/resources/recipes/SmolLM2-135M-Instruct/arith_ada_pos.yaml",
        *(
            f"trl_ada/examples/resources/hard_arithmetic/{split}.jsonl"
            for split in ("train", "test_hard", "test_easy")
        ),
    ):
        assert path in names, path
    assert not [n for n in names if n.startswith(("recipes/", "benchmarks/", "tests/"))]


def test_no_library_file_reads_outside_the_package():
    """A path built from the package's own location may not climb out of it (the checkout is not there in a wheel)."""
    offenders = []
    for path in glob.glob(os.path.join(ROOT, "trl_ada", "**", "*.py"), recursive=True):
        with open(path) as f:
            text = f.read()
        if "os.path.dirname(os.path.dirname(os.path.abspath(__file__)))" in text or "parents[1]" in text:
            offenders.append(os.path.relpath(path, ROOT))
    assert not offenders


@pytest.mark.slow
@pytest.mark.lock_only  # the newest set runs trl-ada-train and trl-ada-demo from its own installed wheel (Makefile)
def test_console_scripts_run_from_the_installed_wheel(installed, tmp_path):
    site, bin_dir, _ = installed
    where = run(
        installed,
        tmp_path,
        sys.executable,
        "-c",
        "import trl_ada, trl_ada.examples.arithmetic as d; "
        "print(trl_ada.__file__); print(len(d.hard_arithmetic('train')))",
    )
    assert where.returncode == 0, where.stderr
    module, rows = where.stdout.split()
    assert module.startswith(str(site)) and int(rows) > 0  # the wheel's copy, and the data it ships
    recipe = os.path.join(ROOT, "recipes", "tiny", "ada_balance.yaml")  # a recipe given by path
    runs = {  # script: (its arguments beyond one step into a folder of its name, a file it writes there)
        "trl-ada-demo": (
            "--model tiny --warm_start_steps 2 --eval_examples 8 --eval_k 1".split(),
            "demo_summary.json",
        ),
        "trl-ada-train": (
            ["--config", recipe, "--model_name_or_path", "tiny", "--save_strategy", "no"]
            + "--per_device_train_batch_size 8 --max_completion_length 8".split(),
            "model.safetensors",
        ),
    }
    for script, (arguments, written) in runs.items():
        done = run(installed, tmp_path, str(bin_dir / script), *arguments, "--max_steps", "1", "--output_dir", script)
        assert done.returncode == 0, (script, done.stderr[-3000:])
        assert (tmp_path / script / written).exists()
    for script, word in (("trl-ada-compare", "--max_tokens"), ("trl-ada-eval", "--datasets")):  # they start and parse
        shown = run(installed, tmp_path, str(bin_dir / script), "--help")
        assert shown.returncode == 0 and word in shown.stdout, (script, shown.stderr[-2000:])


def test_plotting_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed: importing it fails
    from trl_ada.cli.compare import plot

    plot(
        {"a": {0: {"curve": [{"step": 0, "samples": 0, "tokens": 0, "greedy": 0.5}]}}}, ["a"], str(tmp_path / "x.png")
    )
    assert 'pip install "trl-ada[plot]"' in capsys.readouterr().out and not (tmp_path / "x.png").exists()
