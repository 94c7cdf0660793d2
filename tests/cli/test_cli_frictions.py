"""What a new user met on the command line (issue 98): other recipes' keys, `--help` and argparse errors, resuming a
run, and checkpoints that cannot resume."""

import json
import re

import pytest

from trl_ada.cli.train import parse_recipe, resolve_resume


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
    assert "--config RECIPE.yaml  The YAML recipe" in out
    assert out.index("--config RECIPE.yaml  ") < out.index("--dataset_name") < out.index("--num_generations")


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
