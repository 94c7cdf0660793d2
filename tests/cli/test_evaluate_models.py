"""trl-ada-eval on what training writes: a LoRA run's output folder holds the adapter alone (`use_peft: true`, as the
Qwen3-4B recipes train), and it is scored as its base model with the adapter applied, by transformers and by vLLM.

The reference is the same adapter merged into its base (peft's `merge_and_unload`) and saved as a plain model:
greedy answers must be the same, and differ from the base model's (so an adapter silently left out fails)."""

import json
import os
import shutil
import zlib
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
from trl.import_utils import is_vllm_available

from trl_ada.cli.evaluate import main as eval_main
from trl_ada.examples.tiny import VLLM_CPU_TINY, build_tiny_model


PROMPTS = [[{"role": "user", "content": f"Question {i}: what is {i} + {i}?"}] for i in range(6)]


def text_reward(completions, **kwargs):
    """A value per answer text: two models score the same exactly when they answer the same."""
    return [zlib.crc32(c[0]["content"].encode()) / 2**32 for c in completions]


def lora_folders(root, with_tokenizer=True, template_prefix="", **model):
    """A base model, a LoRA adapter on it (random, non-zero: it changes the answers) and the two merged; the run's
    tokenizer (saved in both, or in the merged one only) with `template_prefix` before the base's chat template."""
    base = build_tiny_model(str(root / "base"), **model)
    torch.manual_seed(0)
    lora = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base),
        LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False),
    )
    adapter, merged = str(root / "adapter"), str(root / "merged")
    lora.save_pretrained(adapter)
    lora.merge_and_unload().save_pretrained(merged)
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.chat_template = template_prefix + tokenizer.chat_template
    for folder in (merged, adapter) if with_tokenizer else (merged,):
        tokenizer.save_pretrained(folder)
    return base, adapter, merged


# trl-ada-eval on the prompts as written, scored by text_reward, one greedy answer of up to 8 tokens each.
GREEDY = (
    "--prompt_template none --reward_funcs tests.cli.test_evaluate_models.text_reward "
    "--k 1 --temperature 0 --max_new_tokens 8"
).split()


def greedy_score(model_path, data, tmp_path, *flags):
    out = tmp_path / f"eval-{os.path.basename(model_path)}.json"
    eval_main(["--model_name_or_path", model_path, "--datasets", data, *GREEDY, "--output_file", str(out), *flags])
    result = json.loads(out.read_text())
    return result["backend"], result["datasets"][data]["avg@1"]


def held_out_file(tmp_path):
    path = tmp_path / "held_out.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return str(path)


class ScriptedModel:
    """A model whose `generate` returns set rows after the prompt (what GRPOTrainer's trimming is checked against)."""

    device = torch.device("cpu")

    def __init__(self, rows, eos_token_id):
        self.rows, self.generation_config, self.kwargs = rows, GenerationConfig(eos_token_id=eos_token_id), None

    def eval(self):
        return self

    def generate(self, input_ids, attention_mask, **kwargs):
        self.kwargs = kwargs
        return torch.cat([input_ids, torch.tensor(self.rows[: len(input_ids)])], dim=1)


def test_answers_are_cut_at_the_first_stop_token_as_grpo_trainer_cuts_them(tiny_model):
    """The ids a reward gets run up to and including the first stop token (the generation config's or the
    tokenizer's: GRPOTrainer stops on both), padding dropped; the text is those ids decoded; generation stops on the
    same tokens and samples the full distribution (no top-k), as training does."""
    from trl_ada.cli.evaluate import _generate_transformers

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    eos, pad, other_stop = tokenizer.eos_token_id, tokenizer.pad_token_id, 7  # the tiny tokenizer pads with id 0
    rows = [
        [40, 41, eos, pad, pad],  # the tokenizer's end, then padding
        [40, other_stop, 42, pad, pad],  # the generation config's own stop token
        [40, 41, 42, 43, 44],  # no stop: the whole row, as GRPOTrainer keeps a truncated answer
        [eos, pad, pad, pad, pad],
    ]  # an empty answer
    model = ScriptedModel(rows, eos_token_id=[other_stop])
    texts, ids = _generate_transformers(model, tokenizer, PROMPTS[:4], 1, 5, 1.0, 1.0, batch_size=4)
    assert ids == [[40, 41, eos], [40, other_stop], [40, 41, 42, 43, 44], [eos]]
    assert texts == tokenizer.batch_decode(ids, skip_special_tokens=True) and texts[3] == ""
    assert model.kwargs["eos_token_id"] == sorted({eos, other_stop})
    assert (model.kwargs["top_k"], model.kwargs["repetition_penalty"], model.kwargs["do_sample"]) == (0, 1.0, True)


def test_a_column_named_as_a_training_argument_gives_way_to_it():
    """As GRPOTrainer: a data set's `completion_ids` column is not handed on, and a `trainer_state` column is replaced
    by the trainer state (no "got multiple values" TypeError)."""
    from datasets import Dataset
    from transformers import TrainerState

    from trl_ada.cli.evaluate import reward_samples

    seen = {}

    def reward(completions, completion_ids, trainer_state, **kwargs):
        seen.update(completion_ids=completion_ids, trainer_state=trainer_state, columns=sorted(kwargs))
        return [1.0] * len(completions)

    data = Dataset.from_list([{"prompt": PROMPTS[0], "completion_ids": [9], "trainer_state": "a column", "level": 1}])
    assert reward_samples([reward], None, data, ["a", "b"], 2, completion_ids=[[1], [2]]) == [1.0, 1.0]
    assert seen["completion_ids"] == [[1], [2]] and isinstance(seen["trainer_state"], TrainerState)
    assert seen["columns"] == ["level", "log_extra", "log_metric", "prompts"]


def test_an_adapters_base_model_is_checked_before_anything_loads(tmp_path):
    from trl_ada.cli.evaluate import adapter_base

    assert (
        adapter_base("out", {"base_model_name_or_path": "Qwen/Qwen3-4B-Instruct-2507"})
        == "Qwen/Qwen3-4B-Instruct-2507"
    )
    assert adapter_base("out", {"base_model_name_or_path": str(tmp_path)}) == str(tmp_path)
    assert adapter_base("out", {"base_model_name_or_path": "runs/gone/model"}, base_model="elsewhere") == "elsewhere"
    for config, message in (
        ({"base_model_name_or_path": "runs/x/tiny-model"}, "not a folder here.*--base_model"),
        ({"base_model_name_or_path": "./model"}, "not a folder here.*--base_model"),
        ({}, "names no base_model_name_or_path: give the base model with --base_model"),
    ):
        with pytest.raises(ValueError, match=message):
            adapter_base("out", config)


@pytest.mark.parametrize(
    "setting",
    [
        {"use_dora": True},
        {"modules_to_save": ["lm_head"]},
        {"bias": "all"},
        {"lora_bias": True},
        {"rank_pattern": {"q_proj": 16}},
        {"alpha_pattern": {"q": 8}},
        {"trainable_token_indices": [5]},
        {"peft_type": "LOHA"},
    ],
    ids=lambda setting: next(iter(setting)),
)
def test_what_vllm_would_serve_unlike_peft_is_refused_before_an_engine_starts(setting):
    from trl_ada.cli.evaluate import check_vllm_adapter

    adapter = {"peft_type": "LORA", "r": 8, "bias": "none", **setting}
    name = (
        "bias"
        if "bias" in next(iter(setting))
        else "rank_pattern"
        if "pattern" in next(iter(setting))
        else next(iter(setting))
    )
    with pytest.raises(ValueError, match=f"sets {name}, which vLLM's LoRA serving .* --backend transformers"):
        check_vllm_adapter("out", adapter)


def test_vllms_lora_rank_is_the_smallest_it_accepts_above_the_adapters():
    from trl_ada.cli.evaluate import check_vllm_adapter

    assert [check_vllm_adapter("out", {"r": r}) for r in (1, 4, 8, 9, 64, 300)] == [1, 8, 8, 16, 64, 320]
    with pytest.raises(ValueError, match="rank 1024; vLLM serves ranks up to 512"):
        check_vllm_adapter("out", {"r": 1024})


@pytest.mark.parametrize("with_tokenizer", [True, False], ids=["tokenizer_saved", "base_tokenizer"])
def test_a_lora_output_folder_is_scored_as_its_merged_model(tmp_path, with_tokenizer):
    base, adapter, merged = lora_folders(tmp_path, with_tokenizer=with_tokenizer)
    data = held_out_file(tmp_path)
    flags = ("--backend", "transformers")
    assert greedy_score(adapter, data, tmp_path, *flags) == greedy_score(merged, data, tmp_path, *flags)
    assert greedy_score(adapter, data, tmp_path, *flags) != greedy_score(base, data, tmp_path, *flags)


def test_a_lora_adapter_on_the_hub_is_scored_as_the_same_folder(tmp_path, monkeypatch):
    """An adapter's Hub id (here in a Hub cache built offline) is read as the folder it was pushed from: the adapter on
    its base, with its own tokenizer and chat template."""
    import huggingface_hub

    base, adapter, merged = lora_folders(tmp_path, template_prefix="Answer briefly.\n")
    cache, commit = tmp_path / "hub", "0" * 40
    (cache / "models--user--tiny-lora" / "refs").mkdir(parents=True)
    (cache / "models--user--tiny-lora" / "refs" / "main").write_text(commit)
    shutil.copytree(adapter, cache / "models--user--tiny-lora" / "snapshots" / commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    data, flags = held_out_file(tmp_path), ("--backend", "transformers")
    assert greedy_score("user/tiny-lora", data, tmp_path, *flags) == greedy_score(adapter, data, tmp_path, *flags)
    assert greedy_score("user/tiny-lora", data, tmp_path, *flags) != greedy_score(base, data, tmp_path, *flags)
    # Without --output_file the JSON goes to the current folder, not into the Hub cache.
    monkeypatch.chdir(tmp_path)
    eval_main(["--model_name_or_path", "user/tiny-lora", "--datasets", data, *GREEDY, *flags])
    assert json.loads((tmp_path / "eval_avg@1-user--tiny-lora.json").read_text())["backend"] == "transformers"
    assert not list(cache.rglob("eval_avg@*"))
    # A cache filled by loading the adapter alone (offline: no tokenizer files) falls back to the base's, and says so.
    for name in ("tokenizer_config.json", "tokenizer.json", "chat_template.jinja"):
        (cache / "models--user--tiny-lora" / "snapshots" / commit / name).unlink(missing_ok=True)
    with pytest.warns(UserWarning, match="holds no tokenizer files, so it is evaluated with its base model's"):
        from_base = greedy_score("user/tiny-lora", data, tmp_path, *flags)
    assert from_base != greedy_score(adapter, data, tmp_path, *flags)


def test_a_folder_given_with_a_tilde_is_read_as_that_folder(tmp_path, monkeypatch):
    """`~/run` as a shell passes it unexpanded (quoted, or from Python or a recipe): its own tokenizer and template,
    its trainer_state.json and its default output file, as for the expanded path."""
    base, adapter, merged = lora_folders(tmp_path, template_prefix="Answer briefly.\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    data, flags = held_out_file(tmp_path), ("--backend", "transformers")
    assert greedy_score("~/adapter", data, tmp_path, *flags) == greedy_score(adapter, data, tmp_path, *flags)
    eval_main(["--model_name_or_path", "~/adapter", "--datasets", data, *GREEDY, *flags])
    assert json.loads((tmp_path / "adapter" / "eval_avg@1.json").read_text())["backend"] == "transformers"


@pytest.mark.skipif(is_vllm_available(), reason="checks the message where vLLM is not installed")
def test_the_vllm_backend_without_vllm_names_the_install(tmp_path):
    with pytest.raises(ValueError, match=r"--backend vllm: vLLM is not installed"):
        no_model = str(tmp_path / "no-model")
        eval_main(
            ["--model_name_or_path", no_model, "--datasets", held_out_file(tmp_path), *GREEDY, "--backend", "vllm"]
        )


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(
    not is_vllm_available(), reason="vLLM is not installed: `make test-vllm` runs this with vllm-cpu in .venv-vllm"
)
def test_vllm_serves_a_lora_output_folder_as_its_merged_model(tmp_path, monkeypatch):
    """vLLM's own LoRA serving (the base model, the adapter per request), against the merged model through vLLM: the
    same greedy token ids in float32; and through trl-ada-eval --backend vllm, as a user runs it."""
    from trl_ada.cli.evaluate import _generate_vllm

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: no spawned pytest
    greedy = dict(k=1, max_new_tokens=8, temperature=0.0, top_p=1.0, dtype="float32")
    # A folder without tokenizer files is served with its base's tokenizer and template: there the adapter alone
    # changes the answers.
    base, adapter, merged = lora_folders(tmp_path / "no-tokenizer", with_tokenizer=False, **VLLM_CPU_TINY)
    with_base_template = _generate_vllm(adapter, PROMPTS, **greedy)
    assert with_base_template == _generate_vllm(merged, PROMPTS, **greedy)
    assert with_base_template[1] != _generate_vllm(base, PROMPTS, **greedy)[1]
    # The run's own chat template (here one that adds a line before every prompt) travels with the adapter: the same
    # weights, so the template alone changes the answers.
    _, templated, templated_merged = lora_folders(
        tmp_path / "template", template_prefix="Answer briefly.\n", **VLLM_CPU_TINY
    )
    assert Path(templated_merged, "model.safetensors").read_bytes() == Path(merged, "model.safetensors").read_bytes()
    served = _generate_vllm(templated, PROMPTS, **greedy)
    assert served == _generate_vllm(templated_merged, PROMPTS, **greedy)
    assert served[1] != with_base_template[1]
    backend, score = greedy_score(adapter, held_out_file(tmp_path), tmp_path, "--backend", "vllm")
    assert backend == "vllm" and 0.0 <= score <= 1.0
