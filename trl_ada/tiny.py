"""A tiny offline model and tokenizer, built locally (no hub): the default of the demo, tests and benchmarks.

A byte-level BPE tokenizer trained on text the project generates, with a ChatML chat template, an EOS
(`<|im_end|>`) and a separate pad token, and a 2-layer Qwen2 model, saved to a folder that TRL loads like any
checkpoint:

    >>> from trl_ada.tiny import build_tiny_model   # doctest: +SKIP
    >>> path = build_tiny_model("runs/tiny-model")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import random

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

from .data import SYSTEM_PROMPT, USER_SUFFIX, synthetic_problem, synthetic_solution

# The tiny model as vLLM's CPU backend can run it: its attention kernel needs head_dim 64 (hidden 128 / 2 heads), and
# refuses the default's head_dim 16.
VLLM_CPU_TINY = dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=1)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _corpus(seed: int = 0, size: int = 4000) -> list[str]:
    rng = random.Random(seed)
    # The fixed prompt text repeats so that BPE merges it into few tokens: short prompts keep CPU steps fast.
    lines = [SYSTEM_PROMPT, USER_SUFFIX, "system", "user", "assistant"] * 500
    for _ in range(size):
        problem, answer = synthetic_problem(rng, rng.randint(1, 3))
        lines += [problem, synthetic_solution(problem, answer)]
    return lines


def build_tokenizer(vocab_size: int = 512, seed: int = 0) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny_model(
    output_dir: str,
    hidden_size: int = 64,
    num_layers: int = 2,
    vocab_size: int = 512,
    seed: int = 0,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
) -> str:
    """Build (or reuse, if already there) the tiny model and tokenizer in `output_dir`; returns the path.

    The default has head_dim 16 (64 / 4 heads), which vLLM's CPU attention kernel refuses; `VLLM_CPU_TINY` is a
    variant it accepts (head_dim 64): `build_tiny_model(path, **VLLM_CPU_TINY)`.
    """
    if os.path.exists(os.path.join(output_dir, "config.json")) and os.path.exists(
        os.path.join(output_dir, "tokenizer.json")
    ):
        return output_dir
    torch.manual_seed(seed)
    tokenizer = build_tokenizer(vocab_size, seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    os.makedirs(output_dir, exist_ok=True)
    tokenizer.save_pretrained(output_dir)
    model.save_pretrained(output_dir)
    return output_dir
