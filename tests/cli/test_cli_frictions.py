"""The command line as a new user meets it: other recipes' keys, `--help` and argparse errors, resuming a
run, and checkpoints that cannot resume."""

import json
import logging
import re

import pytest

from tests.helpers.data import small_tiny_recipe
from trl_ada.cli.train import main as train_main
from trl_ada.cli.train import parse_recipe, resolve_resume, warn_overwrite
from trl_ada.integration.resume import (
    GENERATION_COUNT_FILE,
    SAMPLING_STATE_FILE,
    SamplingState,
    check_checkpoint,
    load_sampling_state,
    save_sampling_state,
)


CPU = ["--use_cpu", "true", "--bf16", "false", "--report_to", "none"]


def write_recipe(tmp_path, text: str) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text("model_name_or_path: tiny\nuse_cpu: true\nbf16: false\n" + text)
    return str(path)


# -- 1. other recipes' keys -------------------------------------------------------------------------------------------


def test_torch_dtype_is_read_as_dtype_with_a_deprecation_warning(tmp_path):
    """open-r1's recipes write `torch_dtype`, TRL's older name of ModelConfig.dtype."""
    recipe = write_recipe(tmp_path, "torch_dtype: bfloat16\n")
    with pytest.warns(FutureWarning, match=r"`torch_dtype` is deprecated, please use `dtype` instead.*'bfloat16'"):
        _, _, model_args = parse_recipe(["--config", recipe, "--output_dir", str(tmp_path)])
    assert model_args.dtype == "bfloat16"
    with pytest.warns(FutureWarning) as caught:
        _, _, model_args = parse_recipe(
            ["--config", recipe, "--output_dir", str(tmp_path), "--torch_dtype", "float16"]
        )
    assert any("the command line's torch_dtype='float16'" in str(w.message) for w in caught)
    assert model_args.dtype == "float16"  # the command line overrides the recipe, as for any key
    with pytest.warns(FutureWarning):
        _, _, model_args = parse_recipe(["--config", recipe, "--output_dir", str(tmp_path), "--torch-dtype=auto"])
    assert model_args.dtype == "auto"


def test_a_recipe_with_torch_dtype_and_a_different_dtype_is_refused(tmp_path):
    recipe = write_recipe(tmp_path, "torch_dtype: bfloat16\ndtype: float32\n")
    with pytest.raises(ValueError, match=r"both torch_dtype='bfloat16' and dtype='float32'.*keep only dtype"):
        parse_recipe(["--config", recipe, "--output_dir", str(tmp_path)])


def test_system_prompt_says_where_the_system_message_goes_instead(tmp_path):
    recipe = write_recipe(tmp_path, "system_prompt: You are a helpful assistant.\n")
    with pytest.raises(ValueError, match=r"'system_prompt' in the recipe: trl-ada has no system_prompt field") as info:
        parse_recipe(["--config", recipe, "--output_dir", str(tmp_path)])
    assert "{'role': 'system'" in str(info.value) and "dataset_prompt_template: math" in str(info.value)
    assert "did you mean" not in str(info.value)


# -- 2. --help and argparse errors ------------------------------------------------------------------------------------


def test_help_lists_config_first(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_recipe(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("--config RECIPE.yaml [--FIELD VALUE ...]")
    assert "--config RECIPE.yaml  The YAML recipe" in out  # and listed with the flags
    assert out.index("from a YAML recipe: --config RECIPE.yaml") < out.index("--dataset_name")


def test_config_with_an_equals_sign_is_read_as_the_recipe(tmp_path):
    """`--config=recipe.yaml`, as argparse writes any flag: TrlParser itself looks for `--config` alone."""
    recipe = write_recipe(tmp_path, "num_generations: 4\n")
    assert parse_recipe([f"--config={recipe}", "--output_dir", str(tmp_path)])[1].num_generations == 4


@pytest.mark.parametrize(
    "bad, message",
    [
        (["--max_steps", "abc"], "argument --max_steps/--max-steps: invalid int value: 'abc'"),
        (["--max", "3"], "ambiguous option: --max could match"),
        (["--config"], "argument --config: expected one argument"),
    ],
    ids=["bad_value", "ambiguous_flag", "config_without_path"],
)
def test_argparse_errors_print_a_short_usage_and_the_message(tmp_path, capsys, bad, message):
    with pytest.raises(SystemExit) as exit_:
        parse_recipe(["--output_dir", str(tmp_path), *CPU, *bad])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "--help` lists every field" in err
    assert len(err.splitlines()) <= 4  # not the usage of every field (some 240 lines) above the message
    assert "--dataset_name" not in err


# -- 3. resume_from_checkpoint true -----------------------------------------------------------------------------------


def fake_checkpoints(output_dir, steps):
    for step in steps:
        folder = output_dir / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))


@pytest.mark.parametrize("spelling", ["true", "True", " TRUE "])
def test_resume_true_is_the_latest_checkpoint_in_output_dir(tmp_path, spelling):
    fake_checkpoints(tmp_path, [2, 10, 4])
    assert resolve_resume(spelling, str(tmp_path)) == str(tmp_path / "checkpoint-10")
    assert resolve_resume(None, str(tmp_path)) is None and resolve_resume("false", str(tmp_path)) is None


def test_resume_true_without_checkpoints_and_a_missing_folder_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"resume_from_checkpoint=true: output_dir '.*' holds no checkpoint"):
        resolve_resume("true", str(tmp_path / "nothing"))
    fake_checkpoints(tmp_path, [3])
    missing = str(tmp_path / "checkpoint-7")
    with pytest.raises(FileNotFoundError, match=re.escape(f"checkpoint folder {missing!r} does not exist")) as info:
        resolve_resume(missing, str(tmp_path))
    assert "checkpoint-3 is the latest in output_dir" in str(info.value)
    with pytest.raises(FileNotFoundError, match=r"is no checkpoint folder.*the latest .*checkpoint-3: give that"):
        resolve_resume(str(tmp_path), str(tmp_path))  # the output_dir, given as the checkpoint


# -- 4. checkpoints that cannot resume --------------------------------------------------------------------------------


def test_a_truncated_sampling_state_names_the_file_and_an_earlier_checkpoint(tmp_path):
    fake_checkpoints(tmp_path, [1, 2])
    checkpoint = tmp_path / "checkpoint-2"
    save_sampling_state(str(checkpoint), 7)
    text = (checkpoint / SAMPLING_STATE_FILE).read_text()
    (checkpoint / SAMPLING_STATE_FILE).write_text(text[: len(text) // 2])
    for load in (lambda: load_sampling_state(str(checkpoint)), lambda: check_checkpoint(str(checkpoint))):
        with pytest.raises(
            ValueError, match=re.escape(str(checkpoint / SAMPLING_STATE_FILE)) + ": not valid JSON"
        ) as e:
            load()
        assert f"checkpoint {checkpoint} is damaged" in str(e.value)
        assert f"--resume_from_checkpoint {tmp_path / 'checkpoint-1'}" in str(e.value)
    (checkpoint / SAMPLING_STATE_FILE).write_text("{}")
    with pytest.raises(ValueError, match="holds no prompts_drawn"):
        load_sampling_state(str(checkpoint))
    (checkpoint / GENERATION_COUNT_FILE).write_text('{"completions": 1')
    with pytest.raises(ValueError, match=re.escape(GENERATION_COUNT_FILE) + ": not valid JSON"):
        check_checkpoint(str(checkpoint))


def test_a_truncated_safetensors_file_is_named_before_the_model_loads(tmp_path):
    import torch
    from safetensors.torch import save_file

    fake_checkpoints(tmp_path, [4])
    checkpoint = tmp_path / "checkpoint-4"
    save_file({"weight": torch.zeros(256)}, str(checkpoint / "model.safetensors"))
    check_checkpoint(str(checkpoint))  # whole: fine
    data = (checkpoint / "model.safetensors").read_bytes()
    (checkpoint / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=re.escape(str(checkpoint / "model.safetensors"))) as info:
        resolve_resume("true", str(tmp_path))
    assert "not a complete safetensors file" in str(info.value) and "start a new run" in str(info.value)


def test_resuming_with_other_sampling_settings_warns_naming_them(tmp_path):
    from trl_ada import AdaGRPOConfig
    from trl_ada.integration.generation_count import GenerationCount

    def state(**changes):
        args = AdaGRPOConfig(
            output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8, prompt_memory=True, **CPU_ARGS
        )
        for name, value in changes.items():  # set after __post_init__, as a resumed run's own recipe would give
            setattr(args, name, value)
        return SamplingState.for_settings(args, list(range(16)), shuffle=True)

    saved = state()
    saved.save(str(tmp_path / "checkpoint-1"), GenerationCount(), sampling_active=True)
    warned = []
    state().load(str(tmp_path / "checkpoint-1"), GenerationCount(), warned.append)
    assert warned == []  # the same settings: nothing to say
    state(reinforce_ada_choice="positive_focused", round_repeat=4).load(
        str(tmp_path / "checkpoint-1"), GenerationCount(), warned.append
    )
    assert len(warned) == 1
    assert "reinforce_ada_choice='balanced' (now 'positive_focused'), round_repeat=8 (now 4)" in warned[0]
    assert "sampler" not in warned[0]


CPU_ARGS = dict(use_cpu=True, bf16=False, report_to="none")


@pytest.mark.slow
def test_resume_from_checkpoint_true_continues_the_run_through_the_cli(tmp_path, tiny_model, caplog):
    out = tmp_path / "out"
    common = [
        "--config",
        small_tiny_recipe(tmp_path, max_completion_length=8),
        "--model_name_or_path",
        tiny_model,
        "--output_dir",
        str(out),
        "--prompt_memory",
        "true",
        "--save_strategy",
        "steps",
        "--save_steps",
        "1",
        "--warmup_steps",
        "0",
    ]
    train_main([*common, "--max_steps", "1"])
    assert (out / "checkpoint-1" / SAMPLING_STATE_FILE).exists()
    with caplog.at_level(logging.WARNING):
        train_main(
            [
                *common,
                "--max_steps",
                "2",
                "--resume_from_checkpoint",
                "true",
                "--reinforce_ada_choice",
                "positive_focused",
            ]
        )
    state = json.load(open(out / "checkpoint-2" / "trainer_state.json"))
    assert state["global_step"] == 2 and [e["step"] for e in state["log_history"] if "loss" in e] == [1, 2]
    assert "reinforce_ada_choice='balanced' (now 'positive_focused')" in caplog.text


# -- 5. a new run into an output_dir with checkpoints -----------------------------------------------------------------


def test_a_new_run_into_an_output_dir_with_checkpoints_warns_it_overwrites_them(tmp_path):
    args = parse_recipe(["--output_dir", str(tmp_path), *CPU])[1]
    with warnings_recorded() as caught:
        warn_overwrite(args, resume=None)  # nothing there yet: no warning
    assert not caught
    fake_checkpoints(tmp_path, [5])
    with pytest.warns(
        UserWarning, match=r"already holds checkpoints \(the latest: checkpoint-5\).*overwrites those"
    ) as w:
        warn_overwrite(args, resume=None)
    assert "--resume_from_checkpoint true" in str(w[0].message)
    with warnings_recorded() as caught:
        warn_overwrite(args, resume=str(tmp_path / "checkpoint-5"))  # a resume continues them
    assert not caught


def warnings_recorded():
    import warnings

    class Recorded:
        def __enter__(self):
            self.manager = warnings.catch_warnings(record=True)
            caught = self.manager.__enter__()
            warnings.simplefilter("always")
            return caught

        def __exit__(self, *exc):
            return self.manager.__exit__(*exc)

    return Recorded()


# -- 6. the docs ------------------------------------------------------------------------------------------------------


def test_the_documented_resume_command_resumes_from_the_latest_checkpoint(tmp_path, monkeypatch):
    """docs/own-task.md's "Resume a run" command, on that page's recipe: the latest checkpoint of output_dir."""
    import os
    import shlex

    from tests.helpers import ROOT

    text = open(os.path.join(ROOT, "docs", "own-task.md")).read()
    recipe = re.search(r"```yaml\n# upper_ada\.yaml.*?\n(.*?)```", text, flags=re.S).group(1)
    section = text[text.index("## Resume a run") :]
    command = shlex.split(re.search(r"```bash\n(.*?)\n```", section, flags=re.S).group(1))
    assert command[0] == "trl-ada-train" and command[-2:] == ["--resume_from_checkpoint", "true"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "upper_ada.yaml").write_text(recipe)
    (tmp_path / "upper.jsonl").write_text("")
    _, training_args, _ = parse_recipe(command[1:])
    fake_checkpoints(tmp_path / training_args.output_dir, [2, 4])
    resumed = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    assert os.path.samefile(resumed, tmp_path / "out" / "upper" / "checkpoint-4")
