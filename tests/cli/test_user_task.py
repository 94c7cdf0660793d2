"""A user's own task, as a GRPOTrainer user brings it: their columns, their reward's signature, their mistakes.

What the reward functions receive is compared with what GRPOTrainer itself hands them for the same data; errors
are checked for the field they name and for coming before the model trains."""

import re

import pytest
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from tests.helpers import ROOT
from tests.helpers.data import hash_reward_value
from tests.helpers.trainers import SMALL
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
from trl_ada.data import make_prompt


BASE = dict(SMALL, learning_rate=1e-2, shuffle_dataset=False)

# Prompts whose text names their pass rate: always-right and always-wrong ones come back uniform, so dynamic
# sampling and the budget must replace them from the refill stream. `answer` and `level` are extra columns, which
# `remove_unused_columns=True` strips from the dataloader's rows.
RATES = [1.0, 0.0, 0.5, 0.0, 1.0, 0.3]


def dataset(repeat=4):
    return Dataset.from_list(
        [
            {"prompt": make_prompt(f"q{i} r{RATES[i % len(RATES)]}"), "answer": str(i), "level": i % 3}
            for i in range(len(RATES) * repeat)
        ]
    )


def keys_reward(calls):
    def reward(prompts, completions, **kwargs):
        calls.append(frozenset(kwargs))
        rates = [float(re.search(r" r([0-9.]+)", p[-1]["content"]).group(1)) for p in prompts]
        return [hash_reward_value(c[0]["content"], rate) for c, rate in zip(completions, rates)]

    return reward


def reward_keys(trainer_class, config_class, tiny_model, tmp_path, **config):
    calls = []
    args = config_class(output_dir=str(tmp_path / "out"), **{**BASE, **config})
    trainer_class(model=tiny_model, reward_funcs=keys_reward(calls), args=args, train_dataset=dataset()).train()
    return calls


SAMPLERS = {
    "balanced-dynamic": dict(
        reinforce_ada_choice="balanced", round_repeat=4, max_rounds=2, dynamic_sampling=True, max_refill_batches=2
    ),
    "dapo": dict(multiround_adaptive_downsampling=False, dynamic_sampling=True, max_refill_batches=2),
    "budget-memory": dict(sampling_budget=8.0, prompt_memory=True, budget_top_up=2),
    "est": dict(reinforce_ada_est=True),
}


@pytest.mark.slow
@pytest.mark.parametrize("remove", [True, False], ids=["remove_unused_columns", "keep_columns"])
@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_every_row_reaches_the_reward_with_the_keys_grpo_trainer_hands(sampler, remove, tiny_model, tmp_path):
    steps = 10 if sampler == "budget-memory" else 4  # the budget's top-ups mix refilled and dataloader rows later on
    theirs = reward_keys(
        GRPOTrainer, GRPOConfig, tiny_model, tmp_path / "grpo", max_steps=2, remove_unused_columns=remove
    )
    assert len(set(theirs)) == 1
    expected = theirs[0]
    assert ("answer" in expected) != remove and "trainer_state" in expected
    ours = reward_keys(
        AdaGRPOTrainer,
        AdaGRPOConfig,
        tiny_model,
        tmp_path / "ada",
        max_steps=steps,
        remove_unused_columns=remove,
        **SAMPLERS[sampler],
    )
    assert len(ours) > steps or sampler == "est"  # rounds and refills: more calls than steps
    assert set(ours) == {expected}


# ---------------------------------------------------------------------------------------------------------------------
# The recipe path: the data set as the user wrote it.

import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from trl_ada.cli.compare import main as compare_main  # noqa: E402
from trl_ada.cli.train import ScriptArguments, load_train_dataset, parse_recipe, with_dataset  # noqa: E402
from trl_ada.integration.support import lone_cpu_launch  # noqa: E402


CHAT = [
    {"prompt": [{"role": "user", "content": f"Write the word w{i} in capitals."}], "solution": f"W{i}", "level": i % 2}
    for i in range(24)
]


def write_jsonl(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return str(path)


def eval_args(model, data, flags, output_file=None):
    """trl-ada-eval's command line for `model` on the file `data`: `flags` as typed on a shell, then the output file."""
    output = ["--output_file", str(output_file)] if output_file is not None else []
    return ["--model_name_or_path", str(model), "--datasets", data, *flags.split(), *output]


@pytest.mark.parametrize("form", ["conversational", "text"])
def test_a_prompt_column_reaches_the_trainer_unchanged_with_every_column(tmp_path, form):
    rows = CHAT if form == "conversational" else [{**r, "prompt": r["prompt"][0]["content"]} for r in CHAT]
    path = write_jsonl(tmp_path / "upper.jsonl", rows)
    dataset = load_train_dataset(ScriptArguments(dataset_name=path), seed=0)
    assert dataset.column_names == ["prompt", "solution", "level"]  # nothing renamed, nothing added
    assert dataset.to_list() == rows


def test_templates_are_opt_in_and_a_missing_prompt_column_names_the_fix(tmp_path):
    path = write_jsonl(tmp_path / "math.jsonl", [{"problem": "What is 1 + 1?", "gt": "2"}] * 4)
    with pytest.raises(
        ValueError,
        match=r"no 'prompt' column; columns found: \['problem', 'gt'\].*"
        r"dataset_prompt_template: user",
    ):
        load_train_dataset(ScriptArguments(dataset_name=path), seed=0)
    math = load_train_dataset(ScriptArguments(dataset_name=path, dataset_prompt_template="math"), seed=0)
    assert math[0]["prompt"][0]["role"] == "system" and math[0]["answer"] == "2"  # the reference's mapping
    user = load_train_dataset(ScriptArguments(dataset_name=path, dataset_prompt_template="user"), seed=0)
    assert user[0]["prompt"] == [{"role": "user", "content": "What is 1 + 1?"}] and user[0]["gt"] == "2"
    with pytest.raises(ValueError, match="dataset_prompt_template='boxed': use one of"):
        load_train_dataset(ScriptArguments(dataset_name=path, dataset_prompt_template="boxed"), seed=0)


def test_a_split_a_single_file_does_not_have_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "upper.jsonl", CHAT)
    with pytest.raises(ValueError, match=r"split 'test'.*single file.*--eval_dataset"):
        load_train_dataset(ScriptArguments(dataset_name=path, dataset_split="test"), seed=0)


def test_unknown_recipe_keys_say_where_they_are_and_what_was_meant(tmp_path):
    """TRL's own parser refuses the same keys (without the closest field)."""
    from trl import TrlParser

    from trl_ada.cli.train import RECIPE_CLASSES

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model_name_or_path: tiny\nnum_generaitons: 4\nuse_cpu: true\nbf16: false\n")
    with pytest.raises(ValueError, match="num_generaitons"):
        TrlParser(RECIPE_CLASSES).parse_args_and_config(args=["--config", str(recipe), "--output_dir", str(tmp_path)])
    with pytest.raises(ValueError, match="max_stpes"):
        TrlParser(RECIPE_CLASSES).parse_args_and_config(
            args=["--output_dir", str(tmp_path), "--use_cpu", "true", "--bf16", "false", "--max_stpes", "2"]
        )
    with pytest.raises(
        ValueError,
        match=r"'num_generaitons' in the recipe \(did you mean 'num_generations'\?\); "
        r"'max_stpes' in the command line \(did you mean 'max_steps'\?\)",
    ):
        parse_recipe(["--config", str(recipe), "--output_dir", str(tmp_path), "--max_stpes", "2"])


def test_recipe_values_are_checked_when_the_recipe_is_read(tmp_path):
    """A one-name `reward_funcs:` is that name (not its letters); an unknown reward name, a prompt template that does
    not exist and an empty training set are refused by parse_recipe, naming the key, before any model is built."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model_name_or_path: tiny\nreward_funcs: last_number_reward\nuse_cpu: true\nbf16: false\n")
    script_args, _, _ = parse_recipe(["--config", str(recipe), "--output_dir", str(tmp_path)])
    assert script_args.reward_funcs == ["last_number_reward"]
    for override, words in (
        (["--reward_funcs", "boxed_math"], "reward_funcs: unknown 'boxed_math'"),
        (["--dataset_prompt_template", "maths"], "dataset_prompt_template='maths': use one of"),
        (["--synthetic_num_examples", "0"], "synthetic_num_examples=0 must be an integer >= 1"),
    ):
        with pytest.raises(ValueError, match=re.escape(words)):
            parse_recipe(["--config", str(recipe), "--output_dir", str(tmp_path), *override])


def test_a_missing_prompt_column_fails_before_the_model_loads(tiny_model, tmp_path):
    """GRPOTrainer cannot train it either: it fails on the missing key once the model has loaded and generation
    starts. (With an `environment_factory` the column is optional: tests/integration/test_rollouts.py.)"""
    from datasets import Dataset as HFDataset

    data = HFDataset.from_list([{"question": "q", "solution": "Q"}] * 8)
    grpo = GRPOTrainer(
        model=tiny_model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=1, **BASE),
        train_dataset=data,
    )
    with pytest.raises(KeyError, match="prompt"):
        grpo.train()
    args = AdaGRPOConfig(output_dir=str(tmp_path), **BASE)
    with pytest.raises(
        ValueError,
        match=r"train_dataset has no 'prompt' column \(its columns: \['question', "
        r"'solution'\]\)",
    ):
        AdaGRPOTrainer(
            model=str(tmp_path / "no-such-model"),
            reward_funcs=lambda completions, **kw: [0.0],
            args=args,
            train_dataset=data,
        )


@pytest.mark.slow
def test_a_reward_that_returns_strings_is_named_with_what_it_returned(tiny_model, tmp_path):
    def string_reward(completions, **kwargs):
        return ["1.0" for _ in completions]

    grpo = GRPOTrainer(
        model=tiny_model,
        reward_funcs=string_reward,
        train_dataset=dataset(),
        args=GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=1, **BASE),
    )
    with pytest.raises(ValueError, match="too many dimensions 'str'"):  # GRPOTrainer names neither
        grpo.train()
    args = AdaGRPOConfig(output_dir=str(tmp_path), max_steps=1, **BASE)
    trainer = AdaGRPOTrainer(model=tiny_model, reward_funcs=string_reward, args=args, train_dataset=dataset())
    with pytest.raises(
        TypeError,
        match=r"reward function 'string_reward' returned str '1.0' for completion 0 "
        r"\(of \d+\).*float\(\.\.\.\)",
    ):
        trainer.train()
    assert trainer.state.global_step == 0


@pytest.mark.slow
def test_a_positive_threshold_no_reward_can_pass_warns(tiny_model, tmp_path):
    calls = []
    args = AdaGRPOConfig(
        output_dir=str(tmp_path), max_steps=1, positive_threshold=2.0, round_repeat=4, max_rounds=1, **BASE
    )
    trainer = AdaGRPOTrainer(model=tiny_model, reward_funcs=keys_reward(calls), args=args, train_dataset=dataset())
    with pytest.warns(
        UserWarning,
        match=r"positive_threshold=2.0 lies outside the rewards seen so far \(0 to 1\): "
        "no completion counts as positive",
    ):
        trainer.train()
    assert trainer.state.global_step == 1  # a warning, not a refusal: GRPOTrainer has no such field to refuse


def test_a_cpu_launch_asked_for_more_processes_than_run_is_read_from_accelerates_environment(monkeypatch):
    """The environment is the one accelerate's own launcher code builds for `accelerate launch --cpu`: a change in
    what it sets fails here."""
    from accelerate.commands.launch import launch_command_parser
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)

    def launched(*flags):
        fixed = ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
        return prepare_simple_launcher_cmd_env(launch_command_parser().parse_args([*flags, *fixed, "x.py"]))[1]

    assert lone_cpu_launch(launched("--cpu", "--num_processes", "2"), world_size=1)
    assert not lone_cpu_launch(launched("--cpu", "--num_processes", "1"), world_size=1)
    assert not lone_cpu_launch(launched("--cpu"), world_size=1)
    assert not lone_cpu_launch({"MASTER_ADDR": "127.0.0.1"}, world_size=1)  # torchrun or a cluster: not --cpu
    assert not lone_cpu_launch({**launched("--cpu", "--num_processes", "2"), "WORLD_SIZE": "2"}, world_size=2)


@pytest.mark.slow
def test_the_comparison_refuses_a_held_out_set_too_small_to_compare_on(tmp_path):
    path = write_jsonl(tmp_path / "upper.jsonl", CHAT)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"model_name_or_path: tiny\ndataset_name: {path}\nreward_funcs: [test_user_task.upper]\n"
        "use_cpu: true\nbf16: false\nmax_completion_length: 8\nper_device_train_batch_size: 8\n"
    )
    arm = "--arm grpo sampler=grpo --seeds 0 --max_steps 1 --eval_k 0".split()
    argv = ["--config", str(recipe), *arm, "--output_dir", str(tmp_path / "cmp")]
    with pytest.raises(ValueError, match=r"split 'test'.*single file"):
        compare_main([*argv, "--eval_split", "test", "--only", "grpo", "0"])
    with pytest.raises(ValueError, match=r"has 3 questions, fewer than --eval_min_examples 20.*interval"):
        compare_main([*argv, "--eval_fraction", "0.1", "--only", "grpo", "0"])
    # The whole comparison refuses it before its first run starts: no run folder, no record.
    with pytest.raises(ValueError, match=r"has 3 questions, fewer than --eval_min_examples 20"):
        compare_main([*argv[:-1], str(tmp_path / "whole"), "--eval_fraction", "0.1"])
    assert not (tmp_path / "whole" / "runs").exists() and not (tmp_path / "whole" / "results").exists()


def upper(completions, solution, **kwargs):
    return [float(s in c[-1]["content"]) for c, s in zip(completions, solution)]


# ---------------------------------------------------------------------------------------------------------------------
# docs/own-task.md's task (the README links it), through every entry point, as written there.


def readme_blocks():
    with open(os.path.join(ROOT, "docs", "own-task.md")) as f:
        section = f.read()
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)
    files = {
        body.split("\n", 1)[0].split(":")[0].removeprefix("# "): body
        for kind, body in blocks
        if kind in ("python", "yaml")
    }
    commands = next(body for kind, body in blocks if kind == "bash").replace("\\\n", " ").splitlines()
    return files, [c.split("   #")[0].strip() for c in commands if c.strip()]


MARKER = """import json, os

def seen(prompts, completions, **kwargs):
    with open(f"seen-{os.environ.get('RANK', '0')}-of-{os.environ.get('WORLD_SIZE', '1')}.jsonl", "a") as f:
        f.writelines(json.dumps(p) + "\\n" for p in prompts)
    return [0.0] * len(completions)
"""


@pytest.mark.slow
def test_the_readme_task_trains_through_every_entry_point(tmp_path):
    files, commands = readme_blocks()
    assert set(files) == {"task.py", "upper_ada.yaml"} and len(commands) == 5
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    bin_dir = os.path.dirname(sys.executable)
    with socket.socket() as probe:  # torchrun's port (PET_MASTER_PORT), free: other launches may run beside it
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": "",
        "PET_MASTER_PORT": port,
    }  # the console scripts must find task.py themselves

    def run(command):
        """A shell line or an argv list, run in the folder as a user runs it."""
        shell = isinstance(command, str)
        return subprocess.run(command, shell=shell, cwd=tmp_path, env=env, capture_output=True, text=True)

    for command in commands:
        done = run(command)
        assert done.returncode == 0, f"{command}\n{done.stderr[-3000:]}"
    assert (tmp_path / "out" / "upper" / "model.safetensors").exists()
    assert (tmp_path / "out" / "upper-2p" / "model.safetensors").exists()
    report = json.loads((tmp_path / "out" / "upper-compare" / "report.json").read_text())
    assert report["held_out"] == [["upper_test.jsonl", 32]] and "balanced" in report["arms"]
    scored = json.loads((tmp_path / "out" / "upper" / "eval_avg@4.json").read_text())
    assert scored["datasets"]["upper_test.jsonl"]["size"] == 32 and 0 <= scored["weighted_average"] <= 1
    # The reward sees the prompt as written, on both processes of a 2-process run.
    (tmp_path / "marker.py").write_text(MARKER)
    train = "-m trl_ada.cli.train --config upper_ada.yaml --max_steps 1".split()
    marker = ["--reward_funcs", "task.upper_reward", "marker.seen", "--positive_reward_func", "upper_reward"]
    marker += ["--output_dir", "out/marked"]
    done = run([os.path.join(bin_dir, "torchrun"), "--nproc_per_node", "2", *train, *marker])
    assert done.returncode == 0, done.stderr[-3000:]
    written = [json.loads(line)["prompt"] for line in (tmp_path / "upper.jsonl").read_text().splitlines()]
    for rank in (0, 1):
        seen = [json.loads(line) for line in (tmp_path / f"seen-{rank}-of-2.jsonl").read_text().splitlines()]
        assert seen and all(prompt in written for prompt in seen)
    # One process where two were asked: said, not silent.
    accelerate = [os.path.join(bin_dir, "accelerate"), "launch", "--cpu", "--num_processes", "2"]
    done = run([*accelerate, *train, "--output_dir", "out/one"])
    assert done.returncode == 0 and "asked for more than one process" in done.stderr
    assert "but training runs on 1 process" in done.stderr


# ---------------------------------------------------------------------------------------------------------------------
# What a reward logs: a step's value is the mean over the step's samples, however many calls the rounds made.


@pytest.mark.slow
def test_log_metric_over_rounds_is_the_mean_over_the_steps_samples(tiny_model, tmp_path):
    calls = []  # (the step being sampled, the rewards of one call)

    def logging_reward(prompts, completions, trainer_state=None, log_metric=None, **kwargs):
        rewards = keys_reward([])(prompts, completions)
        calls.append((trainer_state.global_step, rewards))
        log_metric("batch_mean", sum(rewards) / len(rewards))
        return rewards

    args = AdaGRPOConfig(
        output_dir=str(tmp_path), max_steps=3, reinforce_ada_choice="balanced", round_repeat=4, max_rounds=3, **BASE
    )
    trainer = AdaGRPOTrainer(model=tiny_model, reward_funcs=logging_reward, args=args, train_dataset=dataset())
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    by_step = {}
    for step, rewards in calls:
        by_step.setdefault(step, []).append(rewards)
    assert len(logs) == len(by_step) == 3
    assert any(len({len(r) for r in rounds}) > 1 for rounds in by_step.values())  # calls of different sizes
    for log, step in zip(logs, sorted(by_step)):
        samples = [x for rewards in by_step[step] for x in rewards]
        assert log["batch_mean"] == pytest.approx(sum(samples) / len(samples))


@pytest.mark.slow
def test_the_readme_quick_start_runs(tiny_model, tmp_path, monkeypatch):
    """The README's first Python snippet, as written but for the model (the tiny offline one for the Hub id) and a
    shorter run."""
    with open(os.path.join(ROOT, "README.md")) as f:
        snippet = re.search(r"```python\n(from datasets import Dataset.*?)```", f.read(), flags=re.S).group(1)
    assert '"HuggingFaceTB/SmolLM2-135M-Instruct"' in snippet and "max_steps=10" in snippet
    snippet = (
        snippet.replace('"HuggingFaceTB/SmolLM2-135M-Instruct"', repr(tiny_model))
        .replace("max_steps=10", "max_steps=1, report_to='none'")
        .replace("max_completion_length=64", "max_completion_length=8")
    )
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(snippet, "README.md", "exec"), namespace)
    assert namespace["trainer"].state.global_step == 1


@pytest.mark.parametrize("task", ["synthetic", "word_problems", "arithmetic", "products"])
@pytest.mark.parametrize(
    "setting",
    [
        {"dataset_prompt_template": "math"},
        {"dataset_problem_column": "question"},
        {"dataset_answer_column": "gt"},
        {"dataset_num_examples": 8},
    ],
)
def test_a_built_in_task_names_the_fields_it_does_not_read(task, setting):
    """The offline tasks build their own prompts: a math recipe smoke-tested with `--dataset_name synthetic` runs,
    and the fields it sets for its own data are named in a warning, not lost in silence; they stay set for a
    held-out file loaded as the recipe's data."""
    name, value = next(iter(setting.items()))
    with pytest.warns(
        UserWarning,
        match=rf"{name}={value!r}: for a Hub id or a local file; the built-in task "
        rf"dataset_name='{task}'.*its training set ignores them",
    ):
        args = ScriptArguments(dataset_name=task, **setting)
    assert getattr(args, name) == value


def test_hard_arithmetic_is_cut_by_dataset_num_examples_and_files_keep_their_fields():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert ScriptArguments(dataset_name="hard_arithmetic", dataset_num_examples=4).dataset_num_examples == 4
        assert (
            ScriptArguments(dataset_name="my.jsonl", dataset_prompt_template="math").dataset_prompt_template == "math"
        )


def test_a_held_out_built_in_task_drops_the_recipes_file_only_fields(tmp_path):
    """`--eval_dataset hard_arithmetic` beside a recipe whose file needs `dataset_prompt_template: math` loads the
    built-in set as it is; another file keeps the recipe's template (it is loaded as the recipe loads its own)."""
    import warnings

    recipe = ScriptArguments(dataset_name="train.jsonl", dataset_prompt_template="math", dataset_num_examples=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # quietly: the recipe's own data needs its fields
        built_in = with_dataset(recipe, dataset_name="hard_arithmetic", dataset_split="test_hard")
        assert (built_in.dataset_prompt_template, built_in.dataset_num_examples) == (None, 4)
        assert with_dataset(recipe, dataset_name="synthetic").dataset_num_examples is None
    other_file = with_dataset(recipe, dataset_name="test.jsonl")
    assert other_file.dataset_prompt_template == "math" and other_file.dataset_num_examples == 4


def test_held_out_accuracy_calls_a_users_reward_as_grpo_trainer_does(tiny_model):
    """The evaluation helpers (the notebook's, the demo's) hand the reward what training hands it: the prompts,
    conversational completions and the data set's own columns by name, k rows per question in order."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.cli.evaluate import held_out_accuracy

    rows = [
        {
            "prompt": [{"role": "user", "content": f"Write the word {w} in capitals."}],
            "solution": w.upper(),
            "level": i,
        }
        for i, w in enumerate(["alpha", "beta", "gamma"])
    ]
    calls = []

    def upper_reward(prompts, completions, solution, **kwargs):
        calls.append((prompts, completions, solution, kwargs))
        return [1.0 if "Write the word alpha" in p[-1]["content"] else None for p in prompts]

    model, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_model), AutoTokenizer.from_pretrained(tiny_model)
    result = held_out_accuracy(
        model, tokenizer, Dataset.from_list(rows), k=2, max_new_tokens=4, reward_func=upper_reward
    )
    assert result["greedy"] == result["avg@k"] == pytest.approx(1 / 3)  # the None of the other rows counts 0
    greedy, sampled = calls
    assert greedy[0] == [r["prompt"] for r in rows] and greedy[2] == ["ALPHA", "BETA", "GAMMA"]
    assert sampled[2] == ["ALPHA", "ALPHA", "BETA", "BETA", "GAMMA", "GAMMA"]
    assert set(sampled[3]) == {"level", "log_metric", "log_extra", "completion_ids", "trainer_state"} and sampled[3][
        "level"
    ] == [0, 0, 1, 1, 2, 2]
    assert all(c[0]["role"] == "assistant" and isinstance(c[0]["content"], str) for c in sampled[1])

    async def async_reward(completions, **kwargs):  # TRL awaits an `async def` reward; so does the evaluation
        kwargs["log_metric"]("seen", 1.0)
        return [0.5] * len(completions)

    greedy, both = dict(k=0, max_new_tokens=4), [upper_reward, async_reward]
    weighted = held_out_accuracy(
        model, tokenizer, Dataset.from_list(rows), **greedy, reward_func=both, reward_weights=[1.0, 2.0]
    )
    assert weighted == {"greedy": pytest.approx(1 / 3 + 1.0)}

    def short_reward(completions, **kwargs):
        return [1.0]

    with pytest.raises(ValueError, match="'short_reward' returned 1 values for 3 completions"):
        held_out_accuracy(model, tokenizer, Dataset.from_list(rows), **greedy, reward_func=short_reward)
    with pytest.raises(ValueError, match="reward_weights has 1 values for 2 reward functions"):
        held_out_accuracy(model, tokenizer, Dataset.from_list(rows), **greedy, reward_func=both, reward_weights=[1.0])


def test_evaluation_hands_a_reward_the_keys_and_token_ids_grpo_trainer_hands_it(tiny_model, tmp_path, monkeypatch):
    """A reward written for GRPOTrainer (one that takes `completion_ids` or `trainer_state` by name) is scored by the
    evaluation helpers and trl-ada-eval as training calls it: the same keyword arguments as GRPOTrainer's with every
    column kept, each answer's token ids as its text decodes, and a checkpoint's own trainer state."""
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerState

    from trl_ada.cli.evaluate import held_out_accuracy
    from trl_ada.cli.evaluate import main as eval_main

    theirs = set(
        reward_keys(GRPOTrainer, GRPOConfig, tiny_model, tmp_path / "grpo", max_steps=1, remove_unused_columns=False)
    )
    assert len(theirs) == 1 and {"completion_ids", "trainer_state", "answer", "level"} <= next(iter(theirs))
    calls = []
    model, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_model), AutoTokenizer.from_pretrained(tiny_model)
    held_out = dataset(repeat=1)
    held_out_accuracy(model, tokenizer, held_out, k=2, max_new_tokens=6, reward_func=keys_reward(calls))
    assert set(calls) == theirs

    seen = []

    def ids_reward(completions, completion_ids, trainer_state, **kwargs):
        seen.append((completions, completion_ids, trainer_state.global_step))
        return [0.0] * len(completions)

    held_out_accuracy(model, tokenizer, held_out, k=2, max_new_tokens=6, reward_func=ids_reward)
    (greedy, greedy_ids, greedy_step), (sampled, sampled_ids, sampled_step) = seen
    assert (len(greedy_ids), len(sampled_ids), greedy_step, sampled_step) == (len(held_out), 2 * len(held_out), 0, 0)
    for completions, completion_ids in ((greedy, greedy_ids), (sampled, sampled_ids)):
        assert [tokenizer.decode(ids, skip_special_tokens=True) for ids in completion_ids] == [
            c[0]["content"] for c in completions
        ]
        assert all(0 < len(ids) <= 6 and tokenizer.pad_token_id not in ids[:-1] for ids in completion_ids)

    checkpoint = tmp_path / "checkpoint-7"
    shutil.copytree(tiny_model, checkpoint)
    TrainerState(global_step=7).save_to_json(str(checkpoint / "trainer_state.json"))
    (tmp_path / "ids_task.py").write_text(
        "def step_reward(completions, completion_ids, trainer_state, **kwargs):\n"
        "    return [float(trainer_state.global_step) for _ in completion_ids]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = write_jsonl(tmp_path / "held_out.jsonl", held_out.to_list())
    out = tmp_path / "eval.json"
    flags = "--prompt_template none --reward_funcs ids_task.step_reward --k 1 --max_new_tokens 4"
    eval_main(eval_args(checkpoint, data, flags, output_file=out))
    assert json.loads(out.read_text())["datasets"][data]["avg@1"] == 7.0  # the checkpoint's step, not 0


def test_an_async_reward_is_awaited_on_one_lasting_loop_also_where_a_loop_runs():
    """As GRPOTrainer runs async rewards: on one daemon loop that outlives the call (a client bound to a loop keeps
    working from one evaluation to the next), and from inside a running loop too (a notebook's)."""
    import asyncio

    from trl_ada.cli.evaluate import reward_samples

    loops = []

    async def loop_reward(completions, **kwargs):
        loops.append(asyncio.get_running_loop())
        return [1.0] * len(completions)

    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}], "level": 0}])
    assert reward_samples([loop_reward], None, data, ["a", "b"], 2) == [1.0, 1.0]

    async def inside_a_running_loop():
        return reward_samples([loop_reward], [3.0], data, ["a"], 1)

    assert asyncio.run(inside_a_running_loop()) == [3.0]
    assert len(loops) == 2 and loops[0] is loops[1] and loops[0].is_running()


def test_the_eval_command_scores_a_users_task_with_its_own_reward(tiny_model, tmp_path, monkeypatch, capsys):
    """trl-ada-eval on docs/own-task.md's capitals task: the rows as written, the reward by import path from the current
    folder; a wrong reward name fails before the model loads, text prompts with the fix."""
    from trl_ada.cli.evaluate import main as eval_main

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "capitals.py").write_text(
        "def upper_reward(completions, solution, **kwargs):\n"
        "    return [float(word in c[-1]['content']) + 0.25 for c, word in zip(completions, solution)]\n"
    )
    rows = [
        {"prompt": [{"role": "user", "content": f"Write the word {w} in capitals."}], "solution": w.upper()}
        for w in ("alpha", "beta", "gamma")
    ]
    path = write_jsonl(tmp_path / "upper_test.jsonl", rows)
    out = tmp_path / "eval.json"
    flags = "--prompt_template none --reward_funcs capitals.upper_reward --k 2 --max_new_tokens 4"
    eval_main(eval_args(tiny_model, path, flags, output_file=out))
    result = json.loads(out.read_text())
    assert result["datasets"][path]["size"] == 3
    assert 0.25 <= result["datasets"][path]["avg@2"] <= 1.25  # the reward's own scale: it was the one called
    math = write_jsonl(tmp_path / "math.jsonl", [{"problem": "What is 1 + 1?", "answer": "2"}] * 2)
    # the default: the reference's prompt and boxed_math_reward
    eval_main(eval_args(tiny_model, math, "--k 1 --max_new_tokens 4", output_file=out))
    scored = json.loads(out.read_text())["datasets"][math]
    assert scored["size"] == 2 and scored["avg@1"] in (0.0, 0.5, 1.0)
    text = write_jsonl(tmp_path / "text.jsonl", [{**r, "prompt": r["prompt"][0]["content"]} for r in rows])
    no_model = tmp_path / "no-model"
    for data, flags, message in (  # each refused before the model loads
        (
            path,
            "--reward_funcs capitals.no_such_reward",
            "reward_funcs='capitals.no_such_reward': cannot import 'no_such_reward' from 'capitals'",
        ),
        (
            path,
            "--answer_column solution --reward_funcs capitals.upper_reward",
            "--answer_column does not apply with --prompt_template none",
        ),
        (
            path,
            "--reward_funcs capitals.upper_reward --reward_weights 1 2",
            "--reward_weights has 2 values for 1 --reward_funcs",
        ),
        (path, "--num_examples 0 --reward_funcs capitals.upper_reward", "no rows to evaluate"),
        (text, "--reward_funcs capitals.upper_reward", "holds text.*--prompt_template user --problem_column prompt"),
    ):
        with pytest.raises(ValueError, match=message):
            eval_main(eval_args(no_model, data, f"--prompt_template none {flags}"))
