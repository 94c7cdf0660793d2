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


# --- Progress during every held-out evaluation ----------------------------------------------------------------------


def progress_lines(printed: str, marker: str) -> list[str]:
    """The 'done/total' of each progress line holding `marker`, in order; each line also states its seconds."""
    lines = [line for line in printed.splitlines() if marker in line]
    assert all(re.search(r"\(\d+ s\)$", line) for line in lines), lines
    return [re.search(r"(\d+/\d+) answers", line).group(1) for line in lines]


def test_tiny_demo_evaluation_prints_progress_per_batch_and_scores_as_avg_at_k(tiny_model, monkeypatch, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.cli import demo
    from trl_ada.cli.evaluate import avg_at_k
    from trl_ada.examples.arithmetic import synthetic_arithmetic

    monkeypatch.setattr(demo, "TINY_EVAL_BATCH", 4)
    held = synthetic_arithmetic(6, 1, seed=1)
    score = demo.evaluate(tiny_model, held, k=2, seed=0, when=" before RL")
    assert progress_lines(capsys.readouterr().out, "[demo] held-out avg@2 before RL:") == ["4/12", "8/12", "12/12"]
    torch.manual_seed(0)  # the same noise: the same batches give the same answers
    model, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_model), AutoTokenizer.from_pretrained(tiny_model)
    assert score == avg_at_k(model, tokenizer, held, k=2, max_new_tokens=24, batch_size=4)


def test_real_model_demo_evaluation_prints_progress_per_batch_and_scores_as_held_out_accuracy(tiny_model, capsys):
    """The smollm2 demo's before/after evaluation (here on the tiny model): a line per batch of each measure, and the
    numbers `held_out_accuracy` gives with the same batches."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.cli.demo import held_out_in_batches
    from trl_ada.cli.evaluate import held_out_accuracy
    from trl_ada.examples.arithmetic import arithmetic_problems
    from trl_ada.rewards import last_number_reward

    model, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_model), AutoTokenizer.from_pretrained(tiny_model)
    held = arithmetic_problems(6, 0, split="test")

    def report_for(measure):
        return lambda done, total: print(f"[test] {measure}: {done}/{total} answers (0 s)")

    torch.manual_seed(0)
    result = held_out_in_batches(model, tokenizer, held, 2, 8, [last_number_reward], None, 4, report_for)
    printed = capsys.readouterr().out
    assert progress_lines(printed, "[test] greedy:") == ["4/6", "6/6"]
    assert progress_lines(printed, "[test] avg@k:") == ["4/12", "8/12", "12/12"]
    torch.manual_seed(0)
    expected = held_out_accuracy(
        model, tokenizer, held, k=2, max_new_tokens=8, reward_func=[last_number_reward], batch_size=4
    )
    assert result == expected and "greedy 2-digit +" in result


def test_smollm2_demo_evaluates_in_batches_small_enough_for_a_line_every_30_seconds():
    """8 greedy answers of SmolLM2 took 11-15 s a call with 1 thread beside a busy process; 48 (the whole set) took
    44-55 s, in silence."""
    from trl_ada.cli import demo

    assert demo.REAL_EVAL_BATCH <= 8


def test_compare_held_out_score_prints_progress_per_batch_when_labelled(tiny_model, capsys):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.cli.heldout import HeldOutScore
    from trl_ada.rewards import last_number_reward

    model, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_model), AutoTokenizer.from_pretrained(tiny_model)
    held = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"question {i}"}], "answer": "1"} for i in range(3)]
    )
    score = HeldOutScore(tokenizer, held, [last_number_reward], None, 8, 1234, batch_size=2)
    labelled = score(model, label="ada seed 0 step 4")
    assert progress_lines(capsys.readouterr().out, "[compare] ada seed 0 step 4: held-out greedy:") == ["2/3", "3/3"]
    score(model, k=2, temperature=1.0, label="ada seed 0 step 4")
    printed = capsys.readouterr().out
    assert progress_lines(printed, "[compare] ada seed 0 step 4: held-out sampled (k=2):") == ["2/6", "4/6", "6/6"]
    assert score(model) == labelled and capsys.readouterr().out == ""  # unlabelled: quiet, the same scores


def test_compare_progress_labels_each_evaluation_with_its_run_and_step():
    import types

    from trl_ada.cli.progress import Progress

    calls = []

    def score(model, k=1, temperature=0.0, reuse=False, label=None):
        calls.append((k, label))
        return [1.0]

    score.seconds = 0.0
    progress = Progress(score, every=4, eval_k=2, label="ada seed 0")
    progress.count = types.SimpleNamespace(completions=0, tokens=0, trained_tokens=0)
    progress._point(4, model=None, final=True)
    assert calls == [(1, "ada seed 0 step 4"), (2, "ada seed 0 step 4")]


# --- The help and the plot say what the demo runs ------------------------------------------------------------------


def demo_help(capsys) -> str:
    from trl_ada.cli.demo import main

    with pytest.raises(SystemExit):
        main(["--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps the options' help: one line to search


def test_demo_help_states_the_steps_each_demo_runs(capsys, tmp_path):
    from trl_ada.cli import demo

    printed = demo_help(capsys)
    # the steps the demos train, as they parse them
    real = demo._parse_recipe(demo.DEFAULT_REAL_RECIPE, str(tmp_path), demo.REAL_DEMO_STEPS)[1].max_steps
    tiny = demo._parse_recipe(demo.DEFAULT_RECIPE, str(tmp_path), None)[1].max_steps
    assert f"for {real} steps" in printed and f"(smollm2: {real}; tiny: the recipe's {tiny})" in printed
    assert f"({tiny} steps)" in printed and not re.search(r"\{[a-z_]+\}", printed)  # every placeholder filled


def test_demo_runs_the_steps_its_help_states(monkeypatch, kept_threads, tmp_path, capsys):
    """real_model_demo up to training: the steps it hands the trainer are the ones --help names."""
    from trl_ada.cli import demo

    class Trained(Exception):
        pass

    def stop(model, script_args, training_args):
        raise Trained(training_args.max_steps)

    monkeypatch.setattr(demo, "_train", stop)
    monkeypatch.setattr("trl_ada.examples.models.materialize", lambda name, path: path)
    monkeypatch.setattr(demo, "held_out_in_batches", lambda *args, **kwargs: {"greedy": 0.0})
    monkeypatch.setattr(demo.AutoModelForCausalLM, "from_pretrained", lambda *args, **kwargs: None)
    monkeypatch.setattr(demo.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: None)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(Trained) as trained:
        demo.main(["--output_dir", str(tmp_path / "out"), "--model_name_or_path", str(tmp_path / "model")])
    assert trained.value.args[0] == demo.REAL_DEMO_STEPS
    assert f"for {demo.REAL_DEMO_STEPS} steps" in demo_help(capsys)


def record_legends(monkeypatch) -> list[str]:
    """The legend texts of every figure the demo saves."""
    pyplot = pytest.importorskip("matplotlib.pyplot")
    legends = []
    savefig = pyplot.Figure.savefig

    def record(fig, path, *args, **kwargs):
        legends.extend(text.get_text() for ax in fig.axes for text in ax.get_legend().get_texts())
        return savefig(fig, path, *args, **kwargs)

    monkeypatch.setattr(pyplot.Figure, "savefig", record)
    return legends


def test_the_demo_prints_a_line_per_sampling_round(monkeypatch, tmp_path, capsys):
    """Between two step lines the rounds of a step say they are running (a step can take minutes on a CPU)."""
    from tests.helpers.data import small_tiny_recipe
    from trl_ada.cli.demo import main

    recipe = small_tiny_recipe(tmp_path, max_completion_length=8)
    argv = ["--model", "tiny", "--output_dir", str(tmp_path / "demo"), "--config", recipe, "--max_steps", "1"]
    main(argv + ["--warm_start_steps", "1", "--eval_examples", "4", "--eval_k", "1"])
    out = capsys.readouterr()
    rounds = [line for line in (out.out + out.err).splitlines() if line.startswith("[demo] step 1: a round of")]
    assert rounds, out.out[-2000:]


def test_the_demo_plot_legend_names_the_choice_it_ran(monkeypatch, kept_threads, tmp_path):
    """The tiny demo at toy size with a positive_focused recipe: its plot says positive_focused, not balanced."""
    from tests.helpers.data import small_tiny_recipe
    from trl_ada.cli.demo import main

    legends = record_legends(monkeypatch)
    recipe = small_tiny_recipe(tmp_path, max_completion_length=8, reinforce_ada_choice="positive_focused")
    argv = ["--model", "tiny", "--output_dir", str(tmp_path / "demo"), "--config", recipe, "--max_steps", "1"]
    main(argv + ["--warm_start_steps", "1", "--eval_examples", "4", "--eval_k", "1"])
    assert "kept-group reward (positive_focused)" in legends and not any("balanced" in t for t in legends), legends


@pytest.mark.parametrize(
    ("choice", "sampler", "expected"),
    [
        ("positive-focused", "reinforce_ada", "kept-group reward (positive_focused)"),
        ("balanced", "reinforce_ada", "kept-group reward (balanced: ~50% by construction)"),
        ("balanced", "grpo", "kept-group reward (sampler='grpo')"),
    ],
)
def test_the_plot_legend_follows_the_recipe(monkeypatch, tmp_path, choice, sampler, expected):
    import types

    from trl_ada.cli import demo

    legends = record_legends(monkeypatch)
    history = [
        {
            "step": s,
            "reward": 0.5,
            "sampling/iid_reward": 0.4,
            "sampling/total_samples": 16,
            "sampling/kept_samples": 8,
        }
        for s in (1, 2)
    ]
    args = types.SimpleNamespace(reinforce_ada_choice=choice, sampler=sampler)
    demo.plot(history, str(tmp_path / "demo.png"), "title", 5, demo.kept_group_label(args))
    assert expected in legends
