"""Data mistakes named before anything slow: a reward function's column the training set lacks (before the model
loads) and a local dataset path that does not exist (before datasets asks the Hub)."""

import os
import re
import time

import pytest
from datasets import Dataset, IterableDataset

from tests.helpers.data import make_recording_reward, pass_rate_dataset
from tests.helpers.trainers import small_args
from trl_ada import AdaGRPOTrainer
from trl_ada.cli.train import main as train_main
from trl_ada.data import load_raw_dataset, looks_like_a_path


def accuracy(completions, solution, **kwargs):
    return [0.0] * len(completions)


def build(tmp_path, reward_funcs, dataset, model="missing-model-folder/not-there", **config):
    return AdaGRPOTrainer(
        model=str(tmp_path / model),
        reward_funcs=reward_funcs,
        args=small_args(tmp_path, **config),
        train_dataset=dataset,
    )


# ---------------------------------------------------------------------------------------------------------------------
# A reward function's required column


def test_a_reward_needing_a_column_the_dataset_lacks_is_named_before_the_model_loads(tmp_path):
    dataset = Dataset.from_list([{"prompt": "What is 1 + 1?", "answer": "2"}] * 8)
    # The model folder does not exist: any error about the reward must come before the model is looked for.
    with pytest.raises(ValueError) as error:
        build(tmp_path, accuracy, dataset)
    message = str(error.value)
    assert "'accuracy'" in message and "'solution'" in message
    assert "['prompt', 'answer']" in message  # the columns there are
    assert "Add the column" in message and "default" in message and "**kwargs" in message


def test_every_reward_function_is_checked_and_the_one_at_fault_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"reward function 'accuracy' requires the argument 'solution'"):
        build(tmp_path, [make_recording_reward(), accuracy], pass_rate_dataset([0.5], repeat=8))


def test_a_singular_prompt_parameter_is_told_its_plural_name(tmp_path):
    def by_prompt(prompt, completions):
        return [0.0] * len(completions)

    with pytest.raises(ValueError, match=r"'by_prompt' requires the argument 'prompt'.*under the name 'prompts'"):
        build(tmp_path, by_prompt, pass_rate_dataset([0.5], repeat=8))


def test_a_column_remove_unused_columns_drops_is_named_with_that_setting(tmp_path):
    with pytest.raises(ValueError, match=r"'pass_rate'.*remove_unused_columns=True drops every column"):
        build(tmp_path, make_recording_reward(), pass_rate_dataset([0.5], repeat=8), remove_unused_columns=True)


def model_error(tmp_path, reward_funcs, dataset, **kwargs) -> BaseException:
    """The error of a trainer whose model folder does not exist: past the argument checks, at the model."""
    with pytest.raises(Exception) as error:
        build(tmp_path, reward_funcs, dataset, **kwargs)
    assert "missing-model-folder" in str(error.value), error.value  # the model, not a reward, failed
    return error.value


def test_rewards_whose_arguments_are_all_passed_get_past_the_check(tmp_path):
    def defaults(completions, solution=None, *args, trainer_state=None, log_extra=None, **kwargs):
        return [0.0] * len(completions)

    def takes_everything(*args, **kwargs):
        return [0.0] * len(kwargs["completions"])

    rows = pass_rate_dataset([0.5], repeat=8)
    rewards = [make_recording_reward(), accuracy, defaults, takes_everything]
    with_solution = rows.add_column("solution", ["2"] * len(rows))
    model_error(tmp_path, rewards, with_solution, positive_reward_func="hash_reward")
    # A stream's columns are not read here; a reward model id is no callable to inspect.
    stream = IterableDataset.from_generator(lambda: iter(rows.to_list()))
    model_error(tmp_path, accuracy, stream, sampler="grpo")
    model_error(tmp_path, str(tmp_path / "missing-model-folder" / "reward"), rows)


def test_a_reward_with_kwargs_builds_a_trainer(tiny_model, tmp_path):
    def any_columns(completions, **kwargs):
        return [0.0] * len(completions)

    trainer = build(tmp_path, any_columns, pass_rate_dataset([0.5], repeat=8), model=tiny_model)
    assert trainer.reward_func_names == ["any_columns"]


# ---------------------------------------------------------------------------------------------------------------------
# A local dataset path that does not exist


@pytest.fixture
def in_a_data_folder(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"prompt": "What is 1 + 1?"}\n')
    monkeypatch.chdir(tmp_path)

    def never(*args, **kwargs):
        raise AssertionError(f"datasets.load_dataset was called with {args} {kwargs}")

    monkeypatch.setattr("trl_ada.data.load_dataset", never)
    return tmp_path


def test_trl_ada_train_names_a_missing_dataset_file_the_folder_and_close_names_at_once(in_a_data_folder):
    start = time.monotonic()
    with pytest.raises(FileNotFoundError) as error:
        train_main(["--dataset_name", "data/trian.jsonl", "--output_dir", "out", "--use_cpu", "true"])
    assert time.monotonic() - start < 10  # the Hub's retries take 32 s
    message = str(error.value)
    assert "dataset_name='data/trian.jsonl'" in message
    assert str(in_a_data_folder) in message  # the folder a relative path is read from
    assert f"Close names there: {os.path.join('data', 'train.jsonl')!r}" in message


@pytest.mark.parametrize("name", ["./my_data", "../my_data", "data/sets/train", "dat/train.jsonl", "/no/such/data"])
def test_a_name_that_can_only_be_a_path_is_never_looked_up_on_the_hub(in_a_data_folder, name):
    with pytest.raises(FileNotFoundError, match=re.escape(f"dataset={name!r}: no such file or folder")):
        load_raw_dataset(name)


def test_hub_ids_and_remote_addresses_are_not_taken_for_paths():
    assert not looks_like_a_path("RLHFlow/reinforce_ada_hard_prompt")
    assert not looks_like_a_path("gsm8k")
    assert not looks_like_a_path("hf://datasets/owner/name/data/train.parquet")
    assert looks_like_a_path("data/train.parquet") and looks_like_a_path("./owner/name")


def test_trl_ada_train_names_a_missing_reward_column_before_building_the_model(tmp_path, monkeypatch):
    """Through the CLI the check comes before the model is resolved: `tiny-warm` would build and warm-start one."""
    (tmp_path / "train.jsonl").write_text('{"prompt": "What is 1 + 1?", "answer": "2"}\n' * 8)
    (tmp_path / "needs.py").write_text("def solution_reward(completions, solution, **kwargs):\n    return [0.0]\n")
    monkeypatch.chdir(tmp_path)
    argv = ["--dataset_name", "train.jsonl", "--reward_funcs", "needs.solution_reward", "--output_dir", "out"]
    with pytest.raises(ValueError, match=r"solution_reward.*'solution'.*\['prompt', 'answer'\]"):
        train_main([*argv, "--model_name_or_path", "tiny-warm", "--use_cpu", "true"])
    assert not (tmp_path / "out").exists()  # no model built or warm-started, nothing written
