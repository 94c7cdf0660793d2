"""What a user touches: data loading, every recipe (parsed, then one CPU step), the notebook."""

import glob
import json
import os
import warnings

import pytest
from datasets import Dataset
from trl import ModelConfig, TrlParser

from tests.helpers import ROOT, documented_commands
from tests.helpers.data import small_tiny_recipe
from trl_ada import AdaGRPOConfig
from trl_ada.cli.train import ScriptArguments, load_train_dataset
from trl_ada.cli.train import main as train_main
from trl_ada.data import SYSTEM_PROMPT, load_math_dataset
from trl_ada.examples.arithmetic import ARITHMETIC_KINDS, arithmetic_problems, synthetic_arithmetic


RECIPES = sorted(glob.glob(os.path.join(ROOT, "recipes", "*", "*.yaml")))
RECIPES = [r for r in RECIPES if "accelerate_configs" not in r]


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".parquet"])
def test_local_files_of_the_reference_shape(tmp_path, suffix):
    raw = Dataset.from_dict({"problem": ["What is 1 + 1?", "Solve x = 3."], "gt": ["2", "3"], "level": [1, 2]})
    path = str(tmp_path / f"data{suffix}")
    if suffix == ".parquet":
        raw.to_parquet(path)
    else:
        raw.to_json(path, lines=suffix == ".jsonl")
    dataset = load_math_dataset(path)
    assert dataset[0]["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert dataset[0]["prompt"][1]["content"].startswith("What is 1 + 1? Let's think step by step")
    assert dataset["answer"] == ["2", "3"] and dataset["level"] == [1, 2]


def test_missing_column_names_the_columns_found(tmp_path):
    path = str(tmp_path / "bad.jsonl")
    Dataset.from_dict({"question": ["q"], "gt": ["1"]}).to_json(path, lines=True)
    with pytest.raises(ValueError, match=r"no problem column 'problem'; columns found: \['question', 'gt'\]"):
        load_math_dataset(path)
    with pytest.raises(ValueError, match="columns found"):
        load_math_dataset(path, problem_column="question", answer_column="final")


def test_synthetic_task_is_deterministic_and_has_a_difficulty_knob():
    a, b = synthetic_arithmetic(20, 1, seed=3), synthetic_arithmetic(20, 1, seed=3)
    assert a["answer"] == b["answer"]
    hard = synthetic_arithmetic(50, 3, seed=3)
    assert max(int(x) for x in hard["answer"]) > max(int(x) for x in a["answer"])


def test_chat_arithmetic_task_has_kinds_a_disjoint_held_out_split_and_right_answers():
    train = arithmetic_problems(600, seed=0)
    assert train["answer"] == arithmetic_problems(600, seed=0)["answer"]  # seeded
    assert train["problem"] != arithmetic_problems(600, seed=1)["problem"]
    assert train[0]["prompt"] == [{"role": "user", "content": train[0]["problem"]}]  # a plain chat question
    kinds = [kind for kind, *_ in ARITHMETIC_KINDS]
    assert sorted(set(train["kind"])) == sorted(kinds) and all(train["kind"].count(k) == 200 for k in kinds)
    for problem, answer, kind in zip(train["problem"], train["answer"], train["kind"]):
        a, operator, b = problem.removeprefix("What is ").removesuffix("?").split(" ")
        assert int(answer) == (int(a) + int(b) if operator == "+" else int(a) * int(b))
        assert (kind, operator) in {("1-digit +", "+"), ("1-digit x", "x"), ("2-digit +", "+")}
        assert (len(a), len(b)) == ((2, 2) if kind == "2-digit +" else (1, 1))
    held_out = [arithmetic_problems(72, seed=s, split="test") for s in (0, 1)]
    for test in held_out:
        assert len(set(test["problem"])) == 72 and all(test["kind"].count(k) == 24 for k in kinds)
        # whatever the seeds: no held-out question is ever a training question
        assert not set(test["problem"]) & set(arithmetic_problems(4096, seed=7)["problem"])
    with pytest.raises(ValueError, match="only 24 distinct '1-digit x' questions, 25 asked for"):
        arithmetic_problems(75, seed=0, split="test")
    script_args = ScriptArguments(dataset_name="arithmetic", synthetic_num_examples=30)
    assert load_train_dataset(script_args, seed=0)["problem"] == arithmetic_problems(30, seed=0)["problem"]


@pytest.mark.parametrize("recipe", RECIPES, ids=[os.path.relpath(r, ROOT) for r in RECIPES])
def test_recipe_parses(recipe):
    """Every shipped recipe parses, sets nothing its sampler ignores and selects its sampler by name."""
    parser = TrlParser((ScriptArguments, AdaGRPOConfig, ModelConfig))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        script_args, training_args, model_args = parser.parse_args_and_config(
            args=[
                "--config",
                recipe,
                "--output_dir",
                "unused",
                "--use_cpu",
                "true",
                "--use_vllm",
                "false",
                "--bf16",
                "false",
            ]
        )
    # ours only: a newer transformers deprecates its own fields (gradient_checkpointing) with a FutureWarning too
    said = [
        str(w.message)
        for w in caught
        if "has no effect" in str(w.message) or "Selecting the sampler" in str(w.message)
    ]
    assert not said, said
    assert training_args.num_generations == 4
    on_cpu = "tiny" in recipe or "SmolLM2" in recipe
    variant = os.path.basename(recipe)
    if "SmolLM2" in recipe:  # the CPU recipes of the real model: reference algorithm, CPU-sized batch and length
        assert training_args.use_cpu and not training_args.use_vllm
        assert (training_args.epsilon, training_args.epsilon_high, training_args.beta) == (0.2, 0.28, 0.0)
        assert model_args.model_name_or_path == "runs/models/SmolLM2-135M-Instruct"
    if "SmolLM2" in recipe and variant.startswith(("arith_", "hard_", "bench_")):  # chat arithmetic, the CPU task
        task = {"hard_": "hard_arithmetic", "arith_": "arithmetic", "bench_": "benchmarks/sampler_bench/pool.jsonl"}
        assert script_args.dataset_name == task[variant[: variant.index("_") + 1]]
        assert script_args.reward_funcs == ["last_number_reward"]
        assert not model_args.use_peft and model_args.dtype == "float32" and not training_args.bf16
        # the hard set's rate: GRPO n=4 lost held-out accuracy there at 3e-5 and climbed at 1e-5
        rate = 3e-5 if variant.startswith("arith_") else 1e-5
        assert (training_args.learning_rate, training_args.lr_scheduler_type.value) == (rate, "constant")
        prompts = 8 if variant.startswith("bench_") else 4  # the bench: room for a rule to allocate within a batch
        assert training_args.loss_type == "dapo" and training_args.generation_batch_size == 4 * prompts
        assert (training_args.max_completion_length, training_args.temperature) == (
            96,
            1.0,
        )  # 48 cut right prose
    elif "SmolLM2" in recipe:  # easy word problems with \boxed{} answers, LoRA over a bf16 base
        assert model_args.use_peft and script_args.dataset_name == "word_problems"
        assert training_args.max_completion_length == 192
    if not on_cpu:
        assert training_args.generation_batch_size == 8 * 32  # 64 prompts on one process; 512 on 8
        assert (training_args.learning_rate, training_args.epsilon, training_args.epsilon_high) in (
            (1e-6, 0.2, 0.28),
            (1e-5, 0.2, 0.28),
        )
        assert training_args.beta == 0.0 and training_args.loss_type == "dapo"
    if variant.startswith("tools_"):  # the offline tool-use recipe: an environment whose tool computes the product
        assert script_args.environment_factory == "trl_ada.examples.agents:CalculatorEnv"
        assert script_args.dataset_name == "products" and model_args.model_name_or_path == "tiny-tools-warm"
    variant = variant.removeprefix("arith_").removeprefix("tools_").removeprefix("hard_").removeprefix("bench_")
    expected = {
        "grpo.yaml": (False, "grpo"),
        "ada_pos.yaml": (True, "positive_focused"),
        "ada_balance.yaml": (True, "balanced"),
        "ada_budget.yaml": (True, "balanced"),
        "ada_est.yaml": (True, "balanced"),
    }[variant]
    assert training_args.reinforce_ada_est == (variant == "ada_est.yaml")
    if variant == "ada_budget.yaml":  # GRPO parity, with the memory that makes the budget pay
        assert training_args.sampling_budget == 4.0 and training_args.prompt_memory
    assert training_args.multiround_adaptive_downsampling == expected[0]
    if expected[0]:
        assert training_args.reinforce_ada_choice == expected[1]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=[os.path.relpath(r, ROOT) for r in RECIPES])
def test_recipe_runs_one_step_offline(recipe, tmp_path, tiny_model):
    out = tmp_path / "out"
    # The offline recipes keep their own task (chat arithmetic is offline too); the others get the synthetic one.
    offline_task = "arithmetic" if os.path.basename(recipe).startswith("arith_") else "synthetic"
    model = tiny_model
    if os.path.basename(recipe).startswith("tools_"):  # a chat template that renders tools, and the tool task
        from tests.integration.test_rollouts import ENVIRONMENTS

        if not ENVIRONMENTS:
            pytest.skip("the tools recipe's environment_factory needs transformers >= 5.2 (TRL's floor for it)")
        model, offline_task = "tiny-tools", "products"
    train_main(
        [
            "--config",
            recipe,
            "--output_dir",
            str(out),
            "--model_name_or_path",
            model,
            "--dataset_name",
            offline_task,
            "--synthetic_num_examples",
            "64",
            "--dtype",
            "float32",
            "--use_vllm",
            "false",
            "--use_cpu",
            "true",
            "--bf16",
            "false",
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "8",
            "--gradient_accumulation_steps",
            "1",
            "--steps_per_generation",
            "1",
            "--max_completion_length",
            "8",
            "--report_to",
            "none",
            "--save_strategy",
            "no",
            "--gradient_checkpointing",
            "false",
        ]
    )
    assert (out / "config.json").exists() or (out / "adapter_config.json").exists()
    assert json.load(open(out / "trainer_state.json"))["global_step"] == 1  # beside the model, for trl-ada-eval
    if (out / "adapter_config.json").exists():  # a LoRA run names its base by an absolute path: it loads from anywhere
        base = json.load(open(out / "adapter_config.json"))["base_model_name_or_path"]
        assert os.path.isabs(base) and os.path.isdir(base)


TRAININGS = documented_commands("trl-ada-train") + documented_commands("trl_ada.cli.train")


@pytest.mark.parametrize(
    "page, words", [pytest.param(*found, id=f"{found[0]}-{i}") for i, found in enumerate(TRAININGS)]
)
def test_every_training_the_docs_print_parses_as_printed(page, words, tmp_path, monkeypatch):
    """Each `trl-ada-train` or `-m trl_ada.cli.train` line of a shell block in the README or docs/ names a recipe that
    exists, and its recipe and flags parse (on a GPU recipe too: parsing needs no GPU); its --output_dir moved out of
    the clone. docs/own-task.md's lines run on the files that page writes: tests/cli/test_user_task.py trains them."""
    import torch

    from tests.samplers.test_samplers import docs_example
    from trl_ada.cli.train import parse_recipe

    if "upper_ada.yaml" in words:
        pytest.skip("docs/own-task.md's trainings run on the files that page writes: tests/cli/test_user_task.py")
    (tmp_path / "my_sampler.py").write_text(docs_example()[0])  # the user's file samplers.md writes first
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(ROOT)  # the pages' paths are from the root of a clone
    words = words + ["--output_dir", "moved"] if "--output_dir" not in words else list(words)
    words[words.index("--output_dir") + 1] = str(tmp_path / "out")
    recipe = words[words.index("--config") + 1]
    assert os.path.isfile(recipe)
    # transformers refuses bf16 where there is no GPU, at parse time: a GPU recipe parses here as its CPU smoke test
    on_cpu = ["--bf16", "false"] if "bf16: true" in open(recipe).read() and not torch.cuda.is_available() else []
    script_args, training_args, model_args = parse_recipe(words + on_cpu)
    assert training_args.output_dir == str(tmp_path / "out") and model_args.model_name_or_path
    for flag, value in zip(words, words[1:]):  # what the line sets on top of its recipe is what the run gets
        name = flag.removeprefix("--")
        if flag.startswith("--") and name not in ("config", "output_dir"):
            held = next(getattr(a, name) for a in (script_args, training_args, model_args) if hasattr(a, name))
            assert str(held) == value or json.dumps(held) == value, (flag, held)


def test_the_docs_print_the_trainings_the_test_above_parses():
    assert {"docs/scaling.md", "docs/real-model.md", "docs/samplers.md", "docs/agents.md"} <= {p for p, _ in TRAININGS}


def test_tools_and_environments_load_by_import_path():
    from trl_ada.cli.train import load_object
    from trl_ada.examples.agents import CalculatorEnv, multiply

    assert load_object("trl_ada.examples.agents:multiply", "tools") is multiply
    assert load_object("trl_ada.examples.agents.CalculatorEnv", "environment_factory") is CalculatorEnv
    with pytest.raises(ValueError, match="tools='trl_ada.examples.agents:nothing': cannot import 'nothing'"):
        load_object("trl_ada.examples.agents:nothing", "tools")


@pytest.mark.slow
def test_train_takes_tools_by_import_path(tmp_path):
    out = tmp_path / "out"
    train_main(
        [
            "--model_name_or_path",
            "tiny-tools",
            "--dataset_name",
            "products",
            "--synthetic_num_examples",
            "32",
            "--reward_funcs",
            "last_number_reward",
            "--tools",
            "trl_ada.examples.agents:multiply",
            "--output_dir",
            str(out),
            "--use_cpu",
            "true",
            "--bf16",
            "false",
            "--report_to",
            "none",
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "8",
            "--num_generations",
            "4",
            "--max_completion_length",
            "16",
            "--save_strategy",
            "steps",
            "--save_steps",
            "1",
            "--max_rounds",
            "2",
            "--logging_steps",
            "1",
        ]
    )
    state = json.load(open(out / "checkpoint-1" / "trainer_state.json"))
    assert state["global_step"] == 1 and "tools/call_frequency" in state["log_history"][0]


@pytest.mark.slow
def test_tiny_recipe_run_directly_starts_from_the_warm_start(tmp_path):
    # Run as its comment says (model line untouched): the untrained tiny model would score 0 on every sample.
    out = tmp_path / "out"
    train_main(
        [
            "--config",
            small_tiny_recipe(tmp_path, max_completion_length=8),
            "--output_dir",
            str(out),
            "--max_steps",
            "1",
            "--warm_start_steps",
            "2",
            "--save_strategy",
            "no",
        ]
    )
    assert (out / "warm-model" / "model.safetensors").exists() and (out / "tiny-model" / "config.json").exists()
    assert (out / "model.safetensors").exists()


def test_imports_run_one_way_no_package_module_imports_the_demo():
    # The demo builds on the training entry point; the warm start both need lives in a module of its own. Lazy
    # imports inside functions count too: a cycle hides there as easily as at the top.
    import ast

    importers = []
    demo = os.path.join(ROOT, "trl_ada", "cli", "demo.py")
    paths = [p for p in glob.glob(os.path.join(ROOT, "trl_ada", "**", "*.py"), recursive=True) if p != demo]
    assert len(paths) > 40  # every module of the package, in every layer
    for path in paths:
        for node in ast.walk(ast.parse(open(path).read())):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n.split(".")[-1] == "demo" or n.endswith("trl_ada.cli.demo") for n in names):
                importers.append(os.path.relpath(path, ROOT))
    assert importers == []


@pytest.mark.slow
@pytest.mark.parametrize("own_task", [False, True], ids=["as_shipped", "own_task"])
def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch, own_task):
    """As shipped, and with its switch to a user's own task (docs/own-task.md's capitals task, built in Python) turned on."""
    nbformat = pytest.importorskip("nbformat")
    monkeypatch.setenv("TRL_ADA_NOTEBOOK_STEPS", "4")  # its default run (200 steps) learns: measured, in its text
    monkeypatch.setenv("TRL_ADA_NOTEBOOK_WARM_STEPS", "20")  # its default warm start: 300 supervised steps
    from nbclient import NotebookClient

    notebook = nbformat.read(os.path.join(ROOT, "notebooks", "lora_quickstart.ipynb"), as_version=4)
    switch = [cell for cell in notebook.cells if cell.source.startswith("OWN_TASK = False")]
    assert len(switch) == 1
    if own_task:
        switch[0].source = switch[0].source.replace("OWN_TASK = False", "OWN_TASK = True", 1)
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert (tmp_path / "runs" / "notebook" / "ada-lora" / "adapter_config.json").exists()
    printed = "".join(o.get("text", "") for o in outputs)
    assert f"held-out ({32 if own_task else 128} problems)" in printed


@pytest.mark.slow
def test_demo_main_job_runs_and_reports(tmp_path, capsys):
    from trl_ada.cli.demo import main as demo_main

    out = tmp_path / "demo"
    demo_main(
        [
            "--model",
            "tiny",
            "--output_dir",
            str(out),
            "--config",
            small_tiny_recipe(tmp_path, max_completion_length=8),
            "--max_steps",
            "2",
            "--warm_start_steps",
            "2",
            "--eval_examples",
            "8",
            "--eval_k",
            "2",
        ]
    )
    summary = json.loads((out / "demo_summary.json").read_text())
    assert summary["steps"] == 2 and summary["kept_samples"] == 2 * 8
    assert summary["generated_samples"] >= summary["kept_samples"]
    assert 0 <= summary["held_out_avg@2_before"] <= 1 and 0 <= summary["held_out_avg@2_after"] <= 1
    assert (out / "demo.png").stat().st_size > 0 and (out / "warm-model" / "model.safetensors").exists()
    assert "| held-out accuracy (avg@2, 8 problems) |" in capsys.readouterr().out
