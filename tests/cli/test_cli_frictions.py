"""What a new user met on the command line (issue 98): other recipes' keys, `--help` and argparse errors, resuming a
run, and checkpoints that cannot resume."""

import pytest

from trl_ada.cli.train import parse_recipe


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
