"""The harness CI runs the product's suite with: `make test` relies on pytest-xdist's groups (a check of our process,
not of the product)."""

import subprocess
import sys


def test_an_xdist_group_runs_on_one_worker(tmp_path):
    """`make test` runs `-n 2 --dist loadgroup`: the DeepSpeed and FSDP modules' launch fixtures run once only if every
    test of their xdist_group goes to one worker (pytest 9.2 broke that silently: setup.cfg's dev extra)."""
    (tmp_path / "test_group.py").write_text(
        "import os\nimport pytest\n\npytestmark = pytest.mark.xdist_group('launch')\n\n\n"
        "@pytest.fixture(scope='module')\ndef launch():\n"
        "    with open('setups.txt', 'a') as f:\n        f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n\n\n"
        "@pytest.mark.parametrize('run', range(6))\ndef test_run(launch, run):\n    pass\n"
    )
    (tmp_path / "test_other.py").write_text(
        "import pytest\n\n\n@pytest.mark.parametrize('i', range(6))\ndef test_other(i):\n    pass\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "test_group.py",
            "test_other.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert len((tmp_path / "setups.txt").read_text().split()) == 1, "the group's fixture ran on both workers"
