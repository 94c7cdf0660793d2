"""What a newcomer meets running the demo on a busy machine: its threads, its progress, its help and its plot."""

import os
import re

import pytest
import torch

from tests.helpers import ROOT


@pytest.fixture
def kept_threads():
    """The demo sets the process's torch threads: put them back for the tests after this one."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def run_main_without_work(monkeypatch, argv):
    """`main` up to the demo itself: what it set before training (the demos are replaced by a recorder)."""
    from trl_ada.cli import demo

    seen = {}

    def record(args):
        seen.update(threads=torch.get_num_threads(), omp=os.environ.get("OMP_NUM_THREADS"), args=args)
        return {}

    monkeypatch.setattr(demo, "real_model_demo", record)
    monkeypatch.setattr(demo, "tiny_demo", record)
    demo.main(argv)
    return seen


@pytest.mark.parametrize("model", ["smollm2", "tiny"])
def test_demo_runs_one_torch_thread_unless_told_otherwise(monkeypatch, kept_threads, tmp_path, model):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(2)  # what torch picks on a 2-core machine
    seen = run_main_without_work(monkeypatch, ["--model", model, "--output_dir", str(tmp_path)])
    assert seen["threads"] == 1 and seen["omp"] == "1" and seen["args"].threads == 1


def test_demo_threads_ask_for_two_by_flag_or_by_omp_num_threads(monkeypatch, kept_threads, tmp_path):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen = run_main_without_work(monkeypatch, ["--threads", "2", "--output_dir", str(tmp_path)])
    assert seen["threads"] == 2 and seen["omp"] == "2"  # torch and OMP_NUM_THREADS agree
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    seen = run_main_without_work(monkeypatch, ["--output_dir", str(tmp_path)])
    assert seen["threads"] == 2 and seen["omp"] == "2"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    seen = run_main_without_work(monkeypatch, ["--threads", "1", "--output_dir", str(tmp_path)])
    assert seen["threads"] == 1 and seen["omp"] == "1"  # the flag wins, and the environment follows it


def test_make_demo_and_demo_tiny_both_run_demo_threads_default_one():
    with open(os.path.join(ROOT, "Makefile")) as f:
        makefile = f.read()
    assert re.search(r"^DEMO_THREADS \?= 1$", makefile, re.M)
    for target in ("demo", "demo-tiny"):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.M).group(1).replace("\\\n", " ")
        assert "OMP_NUM_THREADS=$(DEMO_THREADS)" in recipe and "--threads $(DEMO_THREADS)" in recipe, target
