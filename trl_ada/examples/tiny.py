"""A tiny offline model and tokenizer, built locally (no hub): the model of `make demo-tiny`, the tests and benchmarks.

A byte-level BPE tokenizer trained on text the project generates, with a ChatML chat template, an EOS
(`<|im_end|>`) and a separate pad token, and a 2-layer Qwen2 model, saved to a folder that TRL loads like any
checkpoint:

    >>> from trl_ada.examples.tiny import build_tiny_model   # doctest: +SKIP
    >>> path = build_tiny_model("runs/tiny-model")  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import os
import random

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

from trl_ada.data import SYSTEM_PROMPT, USER_SUFFIX
from trl_ada.examples.arithmetic import synthetic_problem, synthetic_solution


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


def _corpus(seed: int = 0, size: int = 4000, fixed: tuple[str, ...] = ()) -> list[str]:
    rng = random.Random(seed)
    # The fixed prompt text repeats so that BPE merges it into few tokens: short prompts keep CPU steps fast.
    lines = [SYSTEM_PROMPT, USER_SUFFIX, "system", "user", "assistant", *fixed] * 500
    for _ in range(size):
        problem, answer = synthetic_problem(rng, rng.randint(1, 3))
        lines += [problem, synthetic_solution(problem, answer)]
    return lines


def build_tokenizer(
    vocab_size: int = 512,
    seed: int = 0,
    chat_template: str = CHATML_TEMPLATE,
    fixed_text: tuple[str, ...] = (),
    added_tokens: tuple[str, ...] = (),
) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(_corpus(seed, fixed=fixed_text), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.add_tokens(list(added_tokens))
    fast.chat_template = chat_template
    return fast


def build_tiny_model(
    output_dir: str, *, vocab_size: int = 512, seed: int = 0, tools: bool = False, **sizes: int
) -> str:
    """Build (or reuse, if already there) the tiny model and tokenizer in `output_dir`; returns the path.

    `sizes` (hidden_size, num_layers, num_attention_heads, num_key_value_heads) go to `tiny_qwen2_fields`, which
    holds their defaults. The default has head_dim 16 (64 / 4 heads), which vLLM's CPU attention kernel refuses;
    `VLLM_CPU_TINY` is a variant it accepts (head_dim 64): `build_tiny_model(path, **VLLM_CPU_TINY)`.

    `tools=True` gives the tokenizer TRL's Qwen2.5 chat template (`trl/chat_templates/qwen2_5.jinja`: tool schemas,
    `<tool_call>` and `<tool_response>`), for which TRL parses tool calls, and a context of 2048 positions, so
    that TRL's tool-calling loop runs on it; its BPE learns the template's fixed text, so prompts stay short.
    """
    inspect.signature(tiny_qwen2_fields).bind(None, **sizes)  # a misspelled size fails here, also on a reused folder
    if os.path.exists(os.path.join(output_dir, "config.json")) and os.path.exists(
        os.path.join(output_dir, "tokenizer.json")
    ):
        return output_dir
    torch.manual_seed(seed)
    tokenizer = build_tool_tokenizer(4 * vocab_size, seed) if tools else build_tokenizer(vocab_size, seed)
    text = tiny_qwen2_fields(tokenizer, **sizes)
    text.update(max_position_embeddings=2048 if tools else 512, tie_word_embeddings=True, bos_token_id=None)
    model = AutoModelForCausalLM.from_config(Qwen2Config(**text))
    return _save(model, tokenizer, output_dir, tokenizer)


def tiny_qwen2_fields(tokenizer, hidden_size=64, num_layers=2, num_attention_heads=4, num_key_value_heads=2) -> dict:
    """The tiny Qwen2 text model's config fields: the tokenizer's vocabulary and tokens, a feed-forward layer twice
    the hidden size, 512 positions."""
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def _save(model, tokenizer, output_dir, *processors) -> str:
    """Save `model` to `output_dir` with its `processors` (tokenizer, image processor), generating until the
    tokenizer's end token and padding with its pad token; returns the path."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    os.makedirs(output_dir, exist_ok=True)
    for processor in processors:
        processor.save_pretrained(output_dir)
    model.save_pretrained(output_dir)
    return output_dir


TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


def build_tool_tokenizer(vocab_size: int = 512, seed: int = 0) -> PreTrainedTokenizerFast:
    """The tiny tokenizer with TRL's Qwen2.5 chat template and its tool-call tokens (see `build_tiny_model`)."""
    from pathlib import Path

    import trl

    template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    plain = build_tokenizer(vocab_size, seed, chat_template=template)
    # The template's fixed text (default system prompt, tool instructions), rendered once, joins the BPE corpus.
    rendered = plain.apply_chat_template([{"role": "user", "content": "x"}], tools=[_schema_example], tokenize=False)
    return build_tokenizer(
        vocab_size, seed, chat_template=template, fixed_text=tuple(rendered.split("\n")), added_tokens=TOOL_TOKENS
    )


def _schema_example(a: int, b: int) -> int:
    """
    Multiplies two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a * b


def build_tiny_vlm(output_dir: str, seed: int = 0) -> str:
    """A tiny vision-language model (LLaVA: a 1-layer CLIP vision tower on 28x28 images, 4 image tokens, and the tiny
    Qwen2 text model) with its processor and TRL's LLaVA chat template, saved to `output_dir`; returns the path.

    Built from configs, offline; its image processor runs without torchvision. For tests of image prompts."""
    if os.path.exists(os.path.join(output_dir, "config.json")):
        return output_dir
    from pathlib import Path

    import trl
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    torch.manual_seed(seed)
    template = (Path(trl.__file__).parent / "chat_templates" / "llava_next.jinja").read_text()
    tokenizer = build_tokenizer(seed=seed, chat_template=template)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}),
        tokenizer=tokenizer,
        chat_template=template,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's class token, dropped by the "default" feature strategy
    )
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=28,
            patch_size=14,
        ),
        text_config=Qwen2Config(**tiny_qwen2_fields(tokenizer)),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    return _save(LlavaForConditionalGeneration(config), tokenizer, output_dir, processor)


# Qwen2-VL's chat template reduced to what the tests render: text and image blocks.
QWEN2_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_qwen2_vl(output_dir: str, seed: int = 0) -> str:
    """A tiny Qwen2-VL (a 1-layer vision tower; each image a grid of 14-pixel patches merged 2x2, so the number of
    image tokens follows the image's size, and every row's patches are concatenated into one `pixel_values` with an
    `image_grid_thw` per image) and the tiny Qwen2 text model, saved to `output_dir`; returns the path.

    Its processor is built in memory by `tiny_qwen2_vl_processor` (pass it as `processing_class`): transformers'
    saved Qwen2-VL processor loads a video processor, which needs torchvision."""
    if os.path.exists(os.path.join(output_dir, "config.json")):
        return output_dir
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor

    torch.manual_seed(seed)
    tokenizer = build_tokenizer(seed=seed, chat_template=QWEN2_VL_TEMPLATE)
    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"]}
    )
    ids = tokenizer.convert_tokens_to_ids
    config = Qwen2VLConfig(
        vision_config=dict(
            depth=1,
            embed_dim=32,
            hidden_size=64,
            num_heads=2,
            mlp_ratio=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            in_chans=3,
        ),
        text_config=dict(
            tiny_qwen2_fields(tokenizer), rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}, bos_token_id=None
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )
    # 28x28 to 56x56 pixels: one to four merged image tokens per image
    images = Qwen2VLImageProcessor(
        min_pixels=28 * 28, max_pixels=56 * 56, patch_size=14, merge_size=2, temporal_patch_size=2
    )
    return _save(Qwen2VLForConditionalGeneration(config), tokenizer, output_dir, tokenizer, images)


def tiny_qwen2_vl_processor(path: str):
    """The processor of `build_tiny_qwen2_vl`'s model: Qwen2-VL's, images only (no video processor)."""
    from transformers import AutoTokenizer, Qwen2VLImageProcessor, Qwen2VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token, self.video_token = "<|image_pad|>", "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return ImageOnlyQwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor.from_pretrained(path),
        tokenizer=AutoTokenizer.from_pretrained(path),
        chat_template=QWEN2_VL_TEMPLATE,
    )
