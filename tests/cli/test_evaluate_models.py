"""trl-ada-eval on what training writes: a LoRA run's output folder holds the adapter alone (`use_peft: true`, as the
Qwen3-4B recipes train), and it is scored as its base model with the adapter applied, by transformers and by vLLM.

The reference is the same adapter merged into its base (peft's `merge_and_unload`) and saved as a plain model:
greedy answers must be the same, and differ from the base model's (so an adapter silently left out fails)."""

import json
import os
import zlib

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.import_utils import is_vllm_available

from trl_ada.cli.evaluate import main as eval_main
from trl_ada.examples.tiny import VLLM_CPU_TINY, build_tiny_model

PROMPTS = [[{"role": "user", "content": f"Question {i}: what is {i} + {i}?"}] for i in range(6)]


def text_reward(completions, **kwargs):
    """A value per answer text: two models score the same exactly when they answer the same."""
    return [zlib.crc32(c[0]["content"].encode()) / 2**32 for c in completions]


def lora_folders(root, with_tokenizer=True, **model):
    """A base model, a LoRA adapter on it (random, non-zero: it changes the answers) and the two merged."""
    base = build_tiny_model(str(root / "base"), **model)
    torch.manual_seed(0)
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                          LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj", "down_proj"],
                                     init_lora_weights=False))
    adapter, merged = str(root / "adapter"), str(root / "merged")
    lora.save_pretrained(adapter)
    lora.merge_and_unload().save_pretrained(merged)
    for folder in (merged, adapter) if with_tokenizer else (merged,):
        AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return base, adapter, merged


def greedy_score(model_path, data, tmp_path, *flags):
    out = tmp_path / f"eval-{os.path.basename(model_path)}.json"
    eval_main(["--model_name_or_path", model_path, "--datasets", data, "--prompt_template", "none", "--reward_funcs",
               "tests.cli.test_evaluate_models.text_reward", "--k", "1", "--temperature", "0", "--max_new_tokens",
               "8", "--output_file", str(out), *flags])
    result = json.loads(out.read_text())
    return result["backend"], result["datasets"][data]["avg@1"]


def held_out_file(tmp_path):
    path = tmp_path / "held_out.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return str(path)


@pytest.mark.parametrize("with_tokenizer", [True, False], ids=["tokenizer_saved", "base_tokenizer"])
def test_a_lora_output_folder_is_scored_as_its_merged_model(tmp_path, with_tokenizer):
    base, adapter, merged = lora_folders(tmp_path, with_tokenizer=with_tokenizer)
    data = held_out_file(tmp_path)
    flags = ("--backend", "transformers")
    assert greedy_score(adapter, data, tmp_path, *flags) == greedy_score(merged, data, tmp_path, *flags)
    assert greedy_score(adapter, data, tmp_path, *flags) != greedy_score(base, data, tmp_path, *flags)


@pytest.mark.skipif(is_vllm_available(), reason="checks the message where vLLM is not installed")
def test_the_vllm_backend_without_vllm_names_the_install(tmp_path):
    with pytest.raises(ValueError, match=r"--backend vllm: vLLM is not installed"):
        eval_main(["--model_name_or_path", str(tmp_path / "no-model"), "--datasets", held_out_file(tmp_path),
                   "--prompt_template", "none", "--reward_funcs", "tests.cli.test_evaluate_models.text_reward",
                   "--backend", "vllm"])


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not is_vllm_available(), reason="vLLM is not installed: `make test-vllm` runs this with "
                                                   "vllm-cpu in .venv-vllm")
def test_vllm_serves_a_lora_output_folder_as_its_merged_model(tmp_path, monkeypatch):
    """vLLM's own LoRA serving (the base model, the adapter per request), against the merged model through vLLM: the
    same greedy token ids in float32; and through trl-ada-eval --backend vllm, as a user runs it."""
    from trl_ada.cli.evaluate import _generate_vllm

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: no spawned pytest
    base, adapter, merged = lora_folders(tmp_path, **VLLM_CPU_TINY)  # head_dim 64, which vLLM's CPU kernels take
    greedy = dict(k=1, max_new_tokens=8, temperature=0.0, top_p=1.0, dtype="float32")
    served = _generate_vllm(adapter, PROMPTS, **greedy)
    assert served == _generate_vllm(merged, PROMPTS, **greedy)
    assert served[1] != _generate_vllm(base, PROMPTS, **greedy)[1]
    backend, score = greedy_score(adapter, held_out_file(tmp_path), tmp_path, "--backend", "vllm")
    assert backend == "vllm" and 0.0 <= score <= 1.0
