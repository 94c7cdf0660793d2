"""Differential conformance: AdaGRPOTrainer against GRPOTrainer itself, input form by input form.

The matrix (`CELLS`) follows TRL's GRPO documentation and `GRPOConfig`'s fields, not trl-ada's code: every dataset
format TRL documents, every kind of reward function, the generation and loss settings, agents, evaluation and
logging. For every cell, on tiny offline models, one or two steps each:

- `test_sampling_off_is_grpo`: `AdaGRPOTrainer` with adaptive sampling off builds the same training batch as
  `GRPOTrainer` (every tensor: completions, masks, images, advantages) and logs the same metrics;
- `test_sampling_on_rows_are_grpo_rows`: with adaptive sampling on (balanced, positive_focused, dynamic sampling,
  the budget), it trains, and every row of the training batch it hands TRL equals the row GRPOTrainer builds for the
  same prompt and completion: GRPOTrainer is trained on the prompts Ada chose, its generation replaced by the
  completions Ada kept (`ReplayGRPO`), and both batches are trapped and compared tensor by tensor, rewards included;
- `test_bad_input_fails_as_grpo_does` (`BAD_INPUTS`): the same error GRPOTrainer gives, before any weight moves.

`compatibility_table()` renders the matrix as docs/compatibility.md's table; a test keeps that page in step:
    python -m tests.test_conformance    # prints the table
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch
import transformers
from datasets import Dataset
from packaging.version import Version
from trl import GRPOConfig, GRPOTrainer

from tests.helpers import ROOT, open_r1, tool_policy
from tests.helpers.tool_policy import ScriptedPolicy, calculator_dataset, install, multiply, product_reward
from tests.helpers.trainers import SMALL
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer


ENVIRONMENTS = Version(transformers.__version__) >= Version("5.2.0")  # TRL's environment_factory needs it

# ---------------------------------------------------------------------------------------------------------------------
# Models (built once per test process) and the inputs of the cells.

_MODELS: dict[str, str] = {}


def model_path(kind: str, root) -> str:
    from trl_ada.examples.tiny import build_tiny_model, build_tiny_qwen2_vl, build_tiny_vlm

    if kind not in _MODELS:
        folder = str(root / kind)
        build = {
            "text": build_tiny_model,
            "tools": lambda p: build_tiny_model(p, tools=True),
            "llava": build_tiny_vlm,
            "qwen2_vl": build_tiny_qwen2_vl,
            "reward_model": build_reward_model,
        }[kind]
        _MODELS[kind] = build(folder)
    return _MODELS[kind]


def build_reward_model(folder: str) -> str:
    """A tiny sequence classifier (one score) with the tiny tokenizer: a reward model TRL loads from its path."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Qwen2Config

    from trl_ada.examples.tiny import build_tiny_model, tiny_qwen2_fields

    text = build_tiny_model(folder + "-text")
    tokenizer = AutoTokenizer.from_pretrained(text)
    torch.manual_seed(1)
    fields = tiny_qwen2_fields(tokenizer, hidden_size=32, num_layers=1, num_attention_heads=2, num_key_value_heads=1)
    config = Qwen2Config(**fields, num_labels=1, bos_token_id=None)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformance-models")
    return lambda kind: model_path(kind, root)


RATES = [0.0, 0.5, 1.0, 0.25]  # per prompt: all wrong, mixed, all right, mostly wrong


def hashed(text: str, rate: float) -> float:
    """1 with 'probability' rate over completions, as a deterministic function of the completion's text."""
    return 1.0 if zlib.crc32(text.encode()) % 1000 / 1000 < rate else 0.0


def text_of(completion) -> str:
    return completion if isinstance(completion, str) else (completion[-1].get("content") or "")


def rate_reward(completions, pass_rate, **kwargs):
    return [hashed(text_of(c), r) for c, r in zip(completions, pass_rate)]


def length_reward(completions, **kwargs):
    return [min(len(text_of(c)), 40) / 40 for c in completions]


async def async_rate_reward(completions, pass_rate, **kwargs):
    await asyncio.sleep(0)
    return [hashed(text_of(c), r) for c, r in zip(completions, pass_rate)]


def partial_reward(completions, pass_rate, **kwargs):
    """None (not applicable) on every other completion, as TRL documents for rewards that skip samples."""
    return [
        None if zlib.crc32(text_of(c).encode()) % 2 else hashed(text_of(c), r) for c, r in zip(completions, pass_rate)
    ]


def none_reward(completions, **kwargs):
    """None for every completion: every sample unscorable (GRPOTrainer warns, and trains on advantages of 0)."""
    return [None] * len(completions)


def logging_reward(completions, pass_rate, log_extra=None, log_metric=None, **kwargs):
    rewards = [hashed(text_of(c), r) for c, r in zip(completions, pass_rate)]
    if log_extra is not None:
        log_extra("crc", [zlib.crc32(text_of(c).encode()) for c in completions])
    if log_metric is not None:
        log_metric("mean_length", sum(len(text_of(c)) for c in completions) / len(completions))
    return rewards


def conversational(extra_system: bool = False, repeat: int = 4) -> Dataset:
    system = [{"role": "system", "content": "Answer briefly."}] if extra_system else []
    return Dataset.from_list(
        [
            {"prompt": system + [{"role": "user", "content": f"What is {i} + {i}?"}], "pass_rate": RATES[i % 4]}
            for i in range(4)
        ]
        * repeat
    )


def standard() -> Dataset:
    return Dataset.from_list(
        [{"prompt": f"What is {i} + {i}? Answer:", "pass_rate": RATES[i % 4]} for i in range(4)] * 4
    )


COLORS = [(200, 10, 10), (10, 200, 10), (10, 10, 200), (90, 90, 90)]
SIZES = [(28, 28), (56, 28), (28, 56), (56, 56)]  # width x height: images of different sizes in one batch


def image(i: int, sized: bool):
    from PIL import Image

    return Image.new("RGB", SIZES[i % 4] if sized else (28, 28), COLORS[i % 4])


def image_dataset(form: str, count: int = 1, sized: bool = False) -> Dataset:
    """Image prompts in the forms TRL documents: `placeholder` puts `{"type": "image"}` blocks in the message (TRL's
    VLM examples), `text` leaves the content a string (TRL inserts the placeholders); `column` is `image` for one
    image, `images` for a list."""
    rows = []
    for i in range(4):
        images = [image(i + j, sized) for j in range(count)]
        if form == "placeholder":
            content = [*({"type": "image"} for _ in images), {"type": "text", "text": "What color is this?"}]
        else:
            content = "What color is this?"
        row = {"prompt": [{"role": "user", "content": content}], "pass_rate": RATES[i]}
        row.update({"image": images[0]} if count == 1 else {"images": images})
        rows.append(row)
    return Dataset.from_list(rows * 4)


def rollout_func(prompts, trainer):
    """A custom rollout (TRL's `rollout_func`): renders the prompt, answers with sampled digits, returns an extra
    column the reward reads."""
    tokenizer = trainer.processing_class
    prompt_ids, completion_ids, guesses = [], [], []
    for prompt in prompts:
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        prompt_ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        guess = str(int(torch.randint(0, 10, (1,))))
        guesses.append(guess)
        completion_ids.append(
            tokenizer(f"It is {guess}", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        )
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": [[-1.0] * len(ids) for ids in completion_ids],
        "guess": guesses,
    }


def guess_reward(completions, guess, **kwargs):
    return [1.0 if g in "0123" else 0.0 for g in guess]


class ProductEnv:
    """An environment whose tool is `multiply` (TRL's `environment_factory`: one instance per rollout)."""

    multiply = staticmethod(multiply)

    def reset(self, **row):
        return None


class AskingEnv(tool_policy.MultiplyingEnv):
    """An environment that owns the data: the dataset row names only the environment, `reset()` supplies the question,
    `multiply` is the tool and `get_reward` scores the rollout (1 when it called the tool with the question's
    numbers)."""

    a, b = 12, 21

    def reset(self, **row):
        self.called_with = None
        return f"What is {self.a} x {self.b}?"

    def get_reward(self) -> float:
        return 1.0 if self.called_with == (self.a, self.b) else 0.0


class OtherAskingEnv(AskingEnv):
    a, b = 13, 22


def routing_dataset() -> Dataset:
    return Dataset.from_dict({"environment": ["asking", "other", "other", "asking"] * 2})


# ---------------------------------------------------------------------------------------------------------------------
# The matrix.

SAMPLERS = {  # adaptive sampling on, the four ways a user turns it on
    "balanced": dict(reinforce_ada_choice="balanced", round_repeat=4, max_rounds=2),
    "positive_focused": dict(reinforce_ada_choice="positive_focused", round_repeat=4, max_rounds=2),
    "dynamic": dict(multiround_adaptive_downsampling=False, dynamic_sampling=True, max_refill_batches=1),
    "budget": dict(sampling_budget=6.0, prompt_memory=True),
    # Three steps on 4 prompts: a prompt comes back, so groups get unequal sizes; learning rate 0 so that every batch
    # is built from the initial weights, as GRPOTrainer's replay builds it.
    "est": dict(reinforce_ada_est=True, max_steps=3, learning_rate=0.0),
    "knapsack": dict(sampler="knapsack", max_steps=3, learning_rate=0.0),  # as Est: groups of unequal sizes
    "retire_solved": dict(sampler="retire_solved", max_steps=3),  # three steps: a prompt comes back retired
}
OFF = dict(multiround_adaptive_downsampling=False)
# The agent cells' common part: the tool model in TRL's tool-calling loop, the scripted policy answering for it; that
# generation cannot be handed to GRPOTrainer, so they train without a replay.
TOOL_LOOP = dict(model="tools", policy=True, replay=False, config=dict(max_completion_length=96))


@dataclass
class Cell:
    id: str
    feature: str  # the table's row: what a TRL user writes
    model: str = "text"  # text, tools, llava, qwen2_vl
    dataset: Callable[[], Dataset] = conversational
    rewards: Callable[[Callable[[str], str]], Any] = lambda models: rate_reward
    config: dict[str, Any] = field(default_factory=dict)
    kwargs: Callable[[Callable[[str], str]], dict] = lambda models: {}
    samplers: tuple[str, ...] = ("balanced",)  # the samplers whose training rows are replayed through GRPOTrainer
    replay: bool = True  # False: generation GRPOTrainer cannot be handed (tool loop, rollout_func): trains only
    policy: Any = False  # True: the scripted tool-calling policy answers for the model (tests/helpers/tool_policy.py);
    # or a class that does, built with the tokenizer
    ada: dict[str, Any] = field(default_factory=dict)  # AdaGRPOConfig's own fields, which GRPOConfig does not take
    requires: str | None = None  # what the stack must have (shown in the table whatever is installed)
    needs: str | None = None  # set where the installed stack lacks it: the reason to skip
    instance: bool = False  # hand the trainer a model instance (loaded here) instead of its path
    lock_only: bool = False  # run in the lock set only (CI's newest and oldest sets skip it; see LOCK_ONLY)


CELLS = [
    # Dataset formats (TRL docs: "Dataset format", prompt-only, standard and conversational)
    Cell(
        "standard",
        "standard prompt-only (`prompt` is text)",
        dataset=standard,
        samplers=("balanced", "positive_focused", "est", "knapsack"),
    ),
    Cell("conversational", "conversational prompt-only", samplers=tuple(SAMPLERS)),
    Cell(
        "system",
        "conversational with a system message",
        dataset=lambda: conversational(extra_system=True),
        samplers=("positive_focused",),
    ),
    # Images (TRL docs: vision-language models) on two layouts: LLaVA (fixed patches per image) and Qwen2-VL (a grid
    # per image, patches concatenated across rows)
    Cell(
        "llava-image-placeholder",
        'images: `{"type": "image"}` in the message, `image` column (LLaVA)',
        model="llava",
        dataset=lambda: image_dataset("placeholder"),
        samplers=tuple(SAMPLERS),
    ),
    Cell(
        "llava-images-placeholder",
        "images: several per prompt, `images` column (LLaVA)",
        model="llava",
        dataset=lambda: image_dataset("placeholder", count=2),
        samplers=("balanced", "budget"),
    ),
    Cell(
        "llava-image-text",
        "images: plain-text content, `image` column (TRL inserts the placeholder; LLaVA)",
        model="llava",
        dataset=lambda: image_dataset("text"),
        samplers=("positive_focused", "dynamic"),
    ),
    Cell(
        "qwen2vl-image-placeholder",
        "images of different sizes, placeholder in the message (Qwen2-VL)",
        model="qwen2_vl",
        dataset=lambda: image_dataset("placeholder", sized=True),
        samplers=tuple(SAMPLERS),
    ),
    Cell(
        "qwen2vl-images-text",
        "images: several per prompt, plain-text content, `images` column (Qwen2-VL)",
        model="qwen2_vl",
        dataset=lambda: image_dataset("text", count=2, sized=True),
        samplers=("positive_focused", "dynamic"),
    ),
    # Reward functions (TRL docs: "Using a custom reward function")
    Cell(
        "reward-weights",
        "several reward functions with `reward_weights`",
        rewards=lambda models: [rate_reward, length_reward],
        config=dict(reward_weights=[1.0, 0.5]),
        ada=dict(positive_reward_func="rate_reward"),
        samplers=("balanced", "dynamic", "est", "knapsack"),
    ),
    Cell(
        "open-r1",
        "open-r1's rewards: accuracy + format + tag count summed, a `solution` column, golds that do not parse",
        dataset=open_r1.dataset,
        rewards=lambda models: open_r1.REWARDS,
        config=dict(max_completion_length=48),
        ada=dict(positive_reward_func="accuracy_reward"),
        policy=open_r1.OpenR1Policy,
        samplers=("balanced", "positive_focused", "dynamic", "budget", "est", "knapsack"),
    ),
    Cell("reward-async", "an `async def` reward function", rewards=lambda models: async_rate_reward),
    Cell(
        "reward-model",
        "a reward model (a sequence classifier's path) beside a function",
        rewards=lambda models: [rate_reward, models("reward_model")],
        ada=dict(positive_reward_func="rate_reward"),
        samplers=("positive_focused",),
    ),
    Cell(
        "reward-none",
        "a reward returning `None` for some samples, beside one that scores all",
        rewards=lambda models: [partial_reward, length_reward],
        ada=dict(positive_reward_func="partial_reward"),
        samplers=("balanced", "budget", "est", "knapsack"),
    ),
    Cell(
        "reward-all-none",
        "a reward returning `None` for every sample (all unscorable: advantages 0, as GRPO)",
        rewards=lambda models: none_reward,
        samplers=("balanced", "positive_focused", "dynamic", "budget"),
    ),
    Cell(
        "reward-logging",
        "a reward calling `log_extra` and `log_metric`",
        rewards=lambda models: logging_reward,
        samplers=("balanced", "dynamic"),
    ),
    Cell(
        "remove-unused-columns",
        "`remove_unused_columns=True` (the reward gets no extra column, refills included)",
        rewards=lambda models: length_reward,
        config=dict(remove_unused_columns=True),
        samplers=("dynamic", "budget"),
    ),
    # Loss and advantage settings (GRPOConfig)
    *(
        Cell(f"loss-{loss}", f'`loss_type="{loss}"`', config=dict(loss_type=loss))
        for loss in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo")
    ),
    Cell(
        "loss-luspo",
        '`loss_type="luspo"` (with its sequence-level ratios)',
        config=dict(loss_type="luspo", importance_sampling_level="sequence"),
    ),
    *(
        Cell(f"scale-{scale}", f'`scale_rewards="{scale}"`', config=dict(scale_rewards=scale), samplers=("dynamic",))
        for scale in ("group", "batch", "none")
    ),  # GRPO's advantages: where it is read
    Cell("beta", "a KL term (`beta=0.1`, a reference model)", config=dict(beta=0.1)),
    Cell(
        "num-iterations",
        "`num_iterations=2` (old log-probs, clipping)",
        config=dict(num_iterations=2),
        samplers=("balanced", "dynamic"),
    ),
    Cell(
        "steps-per-generation",
        "`steps_per_generation=2`",
        config=dict(steps_per_generation=2),
        samplers=("balanced", "budget", "est"),
    ),
    Cell("grad-accumulation", "`gradient_accumulation_steps=2`", config=dict(gradient_accumulation_steps=2)),
    Cell("mask-truncated", "`mask_truncated_completions=True`", config=dict(mask_truncated_completions=True)),
    Cell("top-entropy", "`top_entropy_quantile=0.5`", config=dict(top_entropy_quantile=0.5)),
    Cell(
        "sequence-is",
        '`importance_sampling_level="sequence"` (GSPO)',
        config=dict(importance_sampling_level="sequence", loss_type="grpo", num_iterations=2),
    ),
    Cell(
        "lora",
        "peft LoRA (`peft_config`)",
        kwargs=lambda models: {"peft_config": __import__("peft").LoraConfig(r=4, target_modules=["q_proj", "v_proj"])},
        samplers=("balanced", "budget", "est"),
    ),
    Cell(
        "eval",
        "an `eval_dataset` evaluated during training",
        config=dict(eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=8),
        kwargs=lambda models: {"eval_dataset": conversational(repeat=1)},
    ),
    # Agents (TRL docs: tools, environments, rollout_func)
    Cell(
        "tools",
        "`tools=[...]` (the tool-calling loop)",
        dataset=lambda: calculator_dataset(8),
        rewards=lambda models: product_reward,
        kwargs=lambda models: {"tools": [multiply]},
        samplers=("balanced", "dynamic", "est", "knapsack"),
        **TOOL_LOOP,
    ),
    Cell(
        "environment",
        "`environment_factory` (one environment per rollout)",
        dataset=lambda: calculator_dataset(8),
        rewards=lambda models: product_reward,
        kwargs=lambda models: {"environment_factory": ProductEnv},
        samplers=("positive_focused",),
        requires="transformers >= 5.2",
        needs=None if ENVIRONMENTS else "environment_factory needs transformers >= 5.2",
        **TOOL_LOOP,
    ),
    Cell(
        "environment-routed",
        "`environment_factory` dict, a dataset of only an `environment` column (`reset()` "
        "supplies the prompt, `get_reward` the reward)",
        dataset=routing_dataset,
        rewards=lambda models: None,
        kwargs=lambda models: {"environment_factory": {"asking": AskingEnv, "other": OtherAskingEnv}},
        samplers=("balanced", "dynamic"),
        requires="transformers >= 5.2",
        needs=None if ENVIRONMENTS else "environment_factory needs transformers >= 5.2",
        **TOOL_LOOP,
    ),
    Cell(
        "rollout-func",
        "`rollout_func` with an extra column for rewards",
        rewards=lambda models: guess_reward,
        kwargs=lambda models: {"rollout_func": rollout_func},
        replay=False,
        samplers=("balanced", "budget", "est", "knapsack"),
    ),
    # The rest of GRPOConfig's loss-time and logging options (TRL docs: GRPOConfig), sampling on as well as off
    Cell(
        "epsilon-high",
        "`epsilon_high=0.28` (DAPO's clip-higher)",
        config=dict(epsilon_high=0.28, num_iterations=2),
        lock_only=True,
    ),
    Cell("delta", "`delta=1.5` (two-sided clipping)", config=dict(delta=1.5, num_iterations=2), lock_only=True),
    Cell(
        "sapo-temperatures",
        '`loss_type="sapo"` with `sapo_temperature_pos/neg`',
        config=dict(loss_type="sapo", sapo_temperature_pos=0.7, sapo_temperature_neg=1.3),
        lock_only=True,
    ),
    Cell(
        "vespo",
        '`loss_type="vespo"` with `vespo_k_pos/neg`, `vespo_lambda_pos/neg`',
        config=dict(loss_type="vespo", vespo_k_pos=1.5, vespo_lambda_pos=0.5, vespo_k_neg=2.5, vespo_lambda_neg=1.5),
        lock_only=True,
    ),
    Cell(
        "off-policy-mask",
        "`off_policy_mask_threshold=0.5`",
        config=dict(off_policy_mask_threshold=0.5, num_iterations=2),
        lock_only=True,
    ),
    Cell(
        "bias-correction-kl",
        "`beta=0.1, use_bias_correction_kl=False`",
        config=dict(beta=0.1, use_bias_correction_kl=False),
        lock_only=True,
    ),
    Cell("entropy-coef", "`entropy_coef=0.01` (an entropy bonus)", config=dict(entropy_coef=0.01), lock_only=True),
    Cell(
        "adaptive-entropy",
        "`use_adaptive_entropy=True`",
        config=dict(use_adaptive_entropy=True, entropy_coef=0.01),
        lock_only=True,
    ),
    Cell(
        "sync-ref-model",
        "`sync_ref_model=True` (a reference model synced every step)",
        config=dict(beta=0.1, sync_ref_model=True, ref_model_sync_steps=1),
        lock_only=True,
    ),
    Cell(
        "log-completions",
        "`log_completions=True, log_unique_prompts=True`",
        config=dict(log_completions=True, log_unique_prompts=True),
        lock_only=True,
    ),
    Cell(
        "model-instance",
        "a model instance (GRPOTrainer then ignores `model_init_kwargs`)",
        instance=True,
        config=dict(model_init_kwargs={"dtype": "float32"}),
        lock_only=True,
    ),
    Cell("no-shuffle", "`shuffle_dataset=False`", config=dict(shuffle_dataset=False), lock_only=True),
]

BASE = dict(SMALL, max_steps=1, learning_rate=1e-3)


def config_of(cell: Cell, config_class, tmp_path, **extra):
    ada = cell.ada if config_class is AdaGRPOConfig and extra != OFF else {}  # OFF: exactly GRPOTrainer's fields
    values = {**BASE, **cell.config, **ada, **extra, "output_dir": str(tmp_path / "out")}
    return config_class(**values)


def processing_class(cell: Cell, models):
    if cell.model != "qwen2_vl":
        return None
    from trl_ada.examples.tiny import tiny_qwen2_vl_processor

    return tiny_qwen2_vl_processor(models("qwen2_vl"))


# ---------------------------------------------------------------------------------------------------------------------
# Traps: subclasses that only observe what the real trainers build.


class Trap:
    """Keeps every training batch the trainer hands its loss, and the rewards behind it."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.batches = getattr(self, "batches", []) + [output]
            self.batch_rewards = getattr(self, "batch_rewards", []) + [self.trapped_rewards]
        return output

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.trapped_rewards = rewards.clone()
        return rewards


class TrappedGRPO(Trap, GRPOTrainer):
    pass


class TrappedAda(Trap, AdaGRPOTrainer):
    def _collect_selected(self, state, local):
        samples = super()._collect_selected(state, local)
        self.chosen_rows = getattr(self, "chosen_rows", []) + [[dict(state.rows[p]) for p in local]]
        self.group_sizes = getattr(self, "group_sizes", []) + [[len(state.results[p].selected) for p in local]]
        self.kept = getattr(self, "kept", []) + [samples]
        return samples

    def _replace_advantages(self, output, results):
        if (
            results is not None
        ):  # the chosen prompts' sampling and every reward of their pools, for an independent check
            pools = [torch.stack(self._step_sampling.pool_rewards_per_func[p]) for p in self._step_sampling.chosen]
            self.sampled = getattr(self, "sampled", []) + [results]
            self.sampled_pools = getattr(self, "sampled_pools", []) + [pools]
        return super()._replace_advantages(output, results)


class ReplayGRPO(TrappedGRPO):
    """GRPOTrainer whose generation returns recorded completions (in order), so that it builds its training batch
    for exactly the prompts and completions AdaGRPOTrainer trained on. Everything else is GRPOTrainer's own:
    tokenization, image processing, decoding, rewards, padding, log-probs."""

    def __init__(self, *args, script, **kwargs):
        self.script = [list(ids) for ids in script]
        super().__init__(*args, **kwargs)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if len(self.script) < len(prompt_ids):
            raise AssertionError(f"ReplayGRPO: {len(prompt_ids)} completions asked, {len(self.script)} recorded")
        taken, self.script = self.script[: len(prompt_ids)], self.script[len(prompt_ids) :]
        return taken, None


def model_of(cell: Cell, models):
    """The model argument as the cell's user writes it: a path, or (cell.instance) a model they loaded themselves."""
    if not cell.instance:
        return models(cell.model)
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(models(cell.model))


def run(trainer_class, cell: Cell, models, tmp_path, config_class, dataset=None, **config):
    kwargs = cell.kwargs(models)
    pc = processing_class(cell, models)
    if pc is not None:
        kwargs["processing_class"] = pc
    trainer = trainer_class(
        model=model_of(cell, models),
        reward_funcs=cell.rewards(models),
        args=config_of(cell, config_class, tmp_path, **config),
        train_dataset=dataset if dataset is not None else cell.dataset(),
        **kwargs,
    )
    if cell.policy is True:
        install(trainer, ScriptedPolicy(trainer.processing_class, malformed_rate=0.0))
    elif cell.policy:
        install(trainer, cell.policy(trainer.processing_class))
    trainer.train()
    return trainer


def assert_same_batch(ours: dict, theirs: dict, skip=()) -> None:
    assert set(ours) == set(theirs), f"keys differ: {set(ours) ^ set(theirs)}"
    for key, value in theirs.items():
        if key in skip:
            continue
        mine = ours[key]
        if isinstance(value, torch.Tensor):
            assert mine.shape == value.shape, f"{key}: shape {tuple(mine.shape)} != GRPO's {tuple(value.shape)}"
            if value.is_floating_point():
                assert torch.allclose(mine, value, atol=1e-5, equal_nan=True), f"{key} differs from GRPO's"
            else:
                assert torch.equal(mine, value), f"{key} differs from GRPO's"
        elif isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            assert len(mine) == len(value) and all(torch.equal(a, b) for a, b in zip(mine, value)), key
        else:
            assert mine == value, f"{key}: {mine!r} != GRPO's {value!r}"


VOLATILE = ("step_time", "runtime", "per_second", "seconds")


# What AdaGRPOTrainer adds to GRPOTrainer's logs with sampling off: the cost it generated and trained, logged on
# every sampling path so that a GRPO run and an adaptive one share the axes.
GENERATED = (
    "sampling/generated_completions_total",
    "sampling/generated_tokens_total",
    "sampling/trained_tokens_total",
)


def comparable_logs(trainer) -> list[dict]:
    # NaN (the mean reward of unscorable completions only) compares equal to NaN here, unlike in a dict comparison.
    return [
        {
            k: "nan" if isinstance(v, float) and math.isnan(v) else v
            for k, v in entry.items()
            if not any(word in k for word in VOLATILE) and k not in GENERATED
        }
        for entry in trainer.state.log_history
    ]


# CI's newest and oldest sets run every cell but these, which the lock set runs: the loss-time and logging options
# of GRPOConfig (sampling never touches the loss: their rows are the rows of any other cell) and Est beyond its
# conversational cell (our allocation, not the release's behaviour). Both sets run the same TRL (>=1.16,<1.17).
LOCK_ONLY = pytest.mark.lock_only


def marks_of(cell, sampler=None) -> list:
    marks = [pytest.mark.skipif(True, reason=cell.needs)] if cell.needs else []
    if cell.lock_only or (sampler in ("est", "knapsack") and cell.id != "conversational"):
        marks.append(LOCK_ONLY)
    return marks


def cell_params(filter_=lambda cell: True):
    return [pytest.param(cell, id=cell.id, marks=marks_of(cell)) for cell in CELLS if filter_(cell)]


# ---------------------------------------------------------------------------------------------------------------------
# The tests.


@pytest.mark.slow
@pytest.mark.parametrize("cell", cell_params())
def test_sampling_off_is_grpo(cell, models, tmp_path):
    grpo = run(TrappedGRPO, cell, models, tmp_path / "grpo", GRPOConfig)
    ada = run(TrappedAda, cell, models, tmp_path / "ada", AdaGRPOConfig, **OFF)
    assert len(ada.batches) == len(grpo.batches) >= 1
    for mine, theirs in zip(ada.batches, grpo.batches):
        assert_same_batch(mine, theirs)
    for mine, theirs in zip(ada.batch_rewards, grpo.batch_rewards):
        assert torch.equal(mine, theirs) or torch.allclose(mine, theirs, equal_nan=True)
    assert comparable_logs(ada) == comparable_logs(grpo)
    assert all(entry[GENERATED[0]] > 0 for entry in ada.state.log_history if "loss" in entry)


def sampler_params():
    return [
        pytest.param(cell, sampler, id=f"{cell.id}-{sampler}", marks=marks_of(cell, sampler))
        for cell in CELLS
        for sampler in cell.samplers
    ]


@pytest.mark.slow
@pytest.mark.parametrize("cell,sampler", sampler_params())
def test_sampling_on_rows_are_grpo_rows(cell, sampler, models, tmp_path):
    ada = run(TrappedAda, cell, models, tmp_path / "ada", AdaGRPOConfig, **SAMPLERS[sampler])
    losses = [h["loss"] for h in ada.state.log_history if "loss" in h]
    assert losses and all(math.isfinite(x) for x in losses)
    # One sampling record per generation batch (steps_per_generation=2: every other optimizer step).
    assert sum("sampling/total_samples" in h for h in ada.state.log_history if "loss" in h) == len(ada.batches)
    for batch, rewards in zip(ada.batches, ada.batch_rewards):  # an unscorable row moves nothing, as in GRPOTrainer
        assert batch["advantages"].shape[0] == rewards.shape[0]
        assert (batch["advantages"][torch.isnan(rewards).all(dim=1)] == 0).all()
    if not cell.replay:
        return
    rows = [row for batch in ada.chosen_rows for row in batch]
    kept = [sample for batch in ada.kept for sample in batch]
    n = BASE["num_generations"]
    assert len(kept) == n * len(rows)
    if sampler in ("est", "knapsack"):
        return replay_unequal_groups(ada, cell, models, tmp_path, kept, sampler)
    replay = replay_grpo(
        cell, models, tmp_path, kept, Dataset.from_list(rows), shuffle_dataset=False, max_steps=len(ada.batches)
    )
    replay.train()
    assert replay.script == [], "GRPOTrainer did not ask for every kept completion"
    assert len(replay.batches) == len(ada.batches)
    for mine, theirs in zip(ada.batches, replay.batches):
        # The advantages are Reinforce-Ada's by design; everything else is the row GRPOTrainer builds.
        assert_same_batch(mine, theirs, skip=("advantages",))
    for mine, theirs in zip(ada.batch_rewards, replay.batch_rewards):
        assert torch.allclose(mine, theirs, equal_nan=True), "a kept completion's rewards are not its own"
    check_advantages_and_metrics(ada, replay, sampler)


OPEN_R1 = next(cell for cell in CELLS if cell.id == "open-r1")


class UsersRule:
    """A user's sampler: nothing tells whether it reads the positives `context.sample` returns, so it is checked as
    one that does."""

    def __init__(self, args):
        pass

    def sample(self, context, target):
        raise AssertionError("sampled")


READ_POSITIVES = {**SAMPLERS, "a user's": dict(sampler=UsersRule)}


@pytest.mark.parametrize(
    "sampler", ["balanced", "positive_focused", "budget", "est", "knapsack", "retire_solved", "a user's"]
)
def test_open_r1_summed_rewards_without_positive_reward_func_are_refused_before_the_model_loads(sampler, tmp_path):
    """The sum of accuracy, format and tag count passes positive_threshold on format alone: every sampler that reads
    positives refuses it, naming the functions and the field to set (a model path that does not exist: the error
    comes first)."""
    args = config_of(OPEN_R1, AdaGRPOConfig, tmp_path, **READ_POSITIVES[sampler], positive_reward_func=None)
    names = r"\['accuracy_reward', 'format_reward', 'tag_count_reward'\]"
    with pytest.raises(ValueError, match=rf"3 reward functions {names} are summed.*Set positive_reward_func"):
        AdaGRPOTrainer(
            model=str(tmp_path / "no-model"), reward_funcs=open_r1.REWARDS, args=args, train_dataset=OPEN_R1.dataset()
        )
    with pytest.raises(ValueError, match=r"positive_reward_func='accuracy' is not one of the reward functions"):
        AdaGRPOTrainer(
            model=str(tmp_path / "no-model"),
            reward_funcs=open_r1.REWARDS,
            args=config_of(
                OPEN_R1, AdaGRPOConfig, tmp_path, **READ_POSITIVES[sampler], positive_reward_func="accuracy"
            ),
            train_dataset=OPEN_R1.dataset(),
        )


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["balanced", "positive_focused", "dynamic", "budget", "est", "knapsack"])
def test_open_r1_positives_are_the_correct_answers(sampler, models, tmp_path):
    """With positive_reward_func='accuracy_reward', what every sampler reads as a prompt's pool is each sample's
    correctness (None where the gold does not parse), while well-formatted wrong answers (2.0 of 3) are there to be
    miscounted; a balanced group that met its exit rule holds exactly floor(n/2) correct answers."""
    ada = run(TrappedAda, OPEN_R1, models, tmp_path, AdaGRPOConfig, **SAMPLERS[sampler])
    accuracy = ada.reward_func_names.index("accuracy_reward")
    n, traps, balanced = ada.args.num_generations, 0, 0
    for results, pools in zip(ada.sampled, ada.sampled_pools):
        for result, pool in zip(results, pools):
            assert torch.allclose(torch.tensor(result.pool_rewards), pool[:, accuracy], equal_nan=True)
            traps += int(((pool[:, accuracy] == 0) & (pool.nansum(dim=1) >= 2)).sum())
            if ada.args.sampler == "reinforce_ada" and ada.args.reinforce_ada_choice == "balanced" and result.finished:
                assert sum(float(pool[i, accuracy]) == 1.0 for i in result.selected) == n // 2
                balanced += 1
    assert traps > 0, "no well-formatted wrong answer was sampled: the test would not see the sum miscount"
    assert balanced > 0 or sampler != "balanced", "no balanced group met its exit rule: nothing was checked"


MAXRL_CELLS = ("standard", "conversational", "reward-weights", "reward-none", "llava-image-placeholder")


@pytest.mark.slow
@pytest.mark.parametrize("cell", cell_params(lambda cell: cell.id in MAXRL_CELLS))
def test_grpo_with_maxrl_is_grpos_batch_with_maxrls_advantages(cell, models, tmp_path):
    """GRPO n=4 with `advantage_estimator="maxrl"`: GRPOTrainer's training batch, every tensor, but the advantages,
    which are (r - mean) / mean over each group of GRPOTrainer's own rewards (0 where the mean is 0 or below)."""
    grpo = run(TrappedGRPO, cell, models, tmp_path / "grpo", GRPOConfig)
    ada = run(TrappedAda, cell, models, tmp_path / "ada", AdaGRPOConfig, sampler="grpo", advantage_estimator="maxrl")
    assert len(ada.batches) == len(grpo.batches) >= 1
    n = BASE["num_generations"]
    for mine, theirs, rewards_per_func in zip(ada.batches, grpo.batches, grpo.batch_rewards):
        assert_same_batch(mine, theirs, skip=("advantages",))
        weights = torch.tensor(cell.config.get("reward_weights") or [1.0] * rewards_per_func.shape[1])
        rewards = weighted(rewards_per_func, weights)
        expected = []
        for group in rewards.split(n):
            finite = group[~torch.isnan(group)]
            mean = finite.mean().item() if finite.numel() else 0.0
            expected += [0.0 if mean <= 0 or math.isnan(r) else (r - mean) / mean for r in group.tolist()]
        rank_rows = mine["advantages"].shape[0]  # one process: every row
        assert torch.allclose(mine["advantages"], torch.tensor(expected[:rank_rows]), atol=1e-5)


# The metrics both trainers compute from the same kept rows (the rest, e.g. completion lengths and tokens seen, cover
# every generated sample on Ada's side by design).
SAME_VALUE = ("reward", "reward_std", "frac_reward_zero_std")  # and `entropy` at the first optimizer step of a
# one-step generation batch: the same weights and rows then (later steps follow each trainer's own update; with
# steps_per_generation > 1 TRL shuffles the batch before splitting it, with each trainer's own random state)


def check_advantages_and_metrics(ada, replay, sampler):
    """Each kept row's advantage against an independent computation of the configured estimator, and the logged
    metrics against GRPOTrainer's: every key it logs, the same value where both compute it from the same rows, and
    nothing more than `sampling/*`."""
    if ada.args.advantage_estimator == "grpo":  # TRL's own group statistics over the kept groups: GRPOTrainer's
        for mine, theirs in zip(ada.batches, replay.batches):
            assert torch.allclose(mine["advantages"], theirs["advantages"], atol=1e-6)
    else:
        assert ada.args.advantage_estimator == "reinforce_ada" and not ada.args.pool_std_scaling
        threshold, name = ada.args.positive_threshold, ada.args.positive_reward_func
        for batch, results, pools, rewards_per_func in zip(
            ada.batches, ada.sampled, ada.sampled_pools, replay.batch_rewards
        ):
            weights = torch.tensor(ada.args.reward_weights or [1.0] * rewards_per_func.shape[1])
            # what decides a positive, as GRPOTrainer scored the kept rows: the weighted sum, or the named function's
            decides = [weighted(rewards_per_func, weights)]
            if name is not None:
                decides = [rewards_per_func[:, ada.reward_func_names.index(name)]]
            expected, trained = [], []
            for r, pool in zip(results, pools):  # r - (the pool's share of positives, or its mean reward)
                trained_pool = weighted(pool, weights).tolist()
                scorable = [x for x in r.pool_rewards if not math.isnan(x)]
                if ada.args.pool_baseline == "threshold_fraction":
                    baseline = sum(x > threshold for x in scorable) / len(scorable) if scorable else 0.0
                else:
                    finite = [x for x in trained_pool if not math.isnan(x)]
                    baseline = sum(finite) / len(finite) if finite else 0.0
                trained += [trained_pool[i] for i in r.selected]
                expected += [0.0 if math.isnan(trained_pool[i]) else trained_pool[i] - baseline for i in r.selected]
            assert torch.allclose(
                decides[0], torch.tensor([r.pool_rewards[i] for r in results for i in r.selected]), equal_nan=True
            ), "the kept rows are not the selected pool samples"
            assert torch.allclose(weighted(rewards_per_func, weights), torch.tensor(trained), equal_nan=True)
            assert torch.allclose(batch["advantages"], torch.tensor(expected), atol=1e-5)
    mine_logs = [h for h in ada.state.log_history if "loss" in h]
    their_logs = [h for h in replay.state.log_history if "loss" in h]
    assert len(mine_logs) == len(their_logs) >= 1
    for index, (mine, theirs) in enumerate(zip(mine_logs, their_logs)):
        assert not set(theirs) - set(mine), f"GRPOTrainer logs {set(theirs) - set(mine)}, Ada does not"
        extra = set(mine) - set(theirs)
        assert all(key.startswith("sampling/") for key in extra), f"Ada logs {extra} outside sampling/*"
        for key in theirs:
            first_step = index == 0 and ada.args.steps_per_generation == 1
            if key in SAME_VALUE or key.startswith("rewards/") or (key == "entropy" and first_step):
                assert mine[key] == pytest.approx(theirs[key], nan_ok=True, abs=1e-6), key


def weighted(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """GRPOTrainer's reward: the weighted nansum over the functions, NaN where every function returned None."""
    total = (rewards_per_func * weights).nansum(dim=1)
    total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return total


def replay_grpo(cell, models, tmp_path, kept, dataset, **config) -> ReplayGRPO:
    """GRPOTrainer on the cell's inputs, handed Ada's kept completions in order instead of generating."""
    kwargs = cell.kwargs(models)
    pc = processing_class(cell, models)
    if pc is not None:
        kwargs["processing_class"] = pc
    cell_config = {k: v for k, v in cell.config.items() if k not in ("eval_strategy", "eval_steps")}
    return ReplayGRPO(
        model=models(cell.model),
        reward_funcs=cell.rewards(models),
        args=GRPOConfig(**{**BASE, **cell_config, **config, "output_dir": str(tmp_path / "replay")}),
        train_dataset=dataset,
        script=[s.completion_ids for s in kept],
        **kwargs,
    )


def est_expected(group, finite, mixed):  # (r - mean) / sqrt(mean), unscorable out of the mean, 0
    mean = finite.mean() if finite.numel() else torch.tensor(0.0)
    return [0.0 if not mixed or torch.isnan(r) else ((r - mean) / torch.sqrt(mean + 1e-6)).item() for r in group]


def knapsack_expected(group, finite, mixed):  # GRPO's within the group: (r - mean) / (std + 1e-4)
    if finite.numel() < 2:
        return [0.0] * len(group)
    mean, std = finite.mean(), finite.std()
    return [0.0 if torch.isnan(r) else ((r - mean) / (std + 1e-4)).item() for r in group]


def replay_unequal_groups(ada, cell, models, tmp_path, kept, sampler):
    """Est and Knapsack hand TRL N_x rows per prompt, not num_generations: GRPOTrainer's own batch builder
    (`_generate_and_score_completions`) is called on exactly those rows, its generation replaced by Ada's kept
    completions; every row must be GRPOTrainer's, and every advantage the sampler's formula on the prompt's
    rewards."""
    expected_of = {"est": est_expected, "knapsack": knapsack_expected}[sampler]
    replay = replay_grpo(cell, models, tmp_path, kept, cell.dataset())
    replay.model.train()
    sizes = [size for batch in ada.group_sizes for size in batch]
    if sampler == "est" or cell.id == "conversational":  # the knapsack may value two prompts alike elsewhere
        assert len(set(sizes)) > 1, "a returning prompt should have been allocated a different number of samples"
    weights = torch.tensor(ada.args.reward_weights or [1.0] * len(ada.reward_funcs))
    for rows, batch_sizes, mine, rewards_per_func in zip(
        ada.chosen_rows, ada.group_sizes, ada.batches, ada.batch_rewards
    ):
        theirs = replay._generate_and_score_completions(
            [dict(row) for row, size in zip(rows, batch_sizes) for _ in range(size)]
        )
        assert_same_batch(mine, theirs, skip=("advantages",))
        assert torch.allclose(rewards_per_func, replay.trapped_rewards, equal_nan=True)
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        expected = []
        for group in torch.split(rewards, batch_sizes):
            finite = group[~torch.isnan(group)]
            mixed = finite.numel() > 1 and finite.max() - finite.min() > 1e-6
            expected += expected_of(group, finite, mixed)
        assert torch.allclose(mine["advantages"], torch.tensor(expected), atol=1e-5)
    assert replay.script == [], "GRPOTrainer did not ask for every kept completion"


# ---------------------------------------------------------------------------------------------------------------------
# Bad input: the same error as GRPOTrainer (or a clearer one naming the field), before any weight moves.


@dataclass
class BadInput:
    id: str
    what: str
    model: str
    dataset: Callable[[], Dataset]
    error: type
    match: str  # a phrase both messages carry
    kwargs: Callable[[], dict] = lambda: {}
    config: dict[str, Any] = field(default_factory=dict)


def _row_environment_dataset():
    return Dataset.from_list([{**row, "environment": "unknown"} for row in calculator_dataset(8)])


BAD_INPUTS = [
    BadInput(
        "images-standard-prompts",
        "images with standard (text) prompts",
        "llava",
        lambda: Dataset.from_list(
            [{"prompt": "What color?", "image": image(i, False), "pass_rate": 0.5} for i in range(8)]
        ),
        ValueError,
        "conversational",
    ),
    BadInput(
        "unknown-environment",
        "a row naming an environment `environment_factory` lacks",
        "tools",
        _row_environment_dataset,
        ValueError,
        "'unknown'",
        kwargs=lambda: {"environment_factory": {"calc": ProductEnv}},
    ),
]


def build_bad(trainer_class, config_class, bad: BadInput, models, tmp_path, **extra):
    return trainer_class(
        model=models(bad.model),
        reward_funcs=rate_reward if bad.model != "tools" else product_reward,
        args=config_class(**{**BASE, **bad.config, **extra, "output_dir": str(tmp_path)}),
        train_dataset=bad.dataset(),
        **bad.kwargs(),
    )


@pytest.mark.slow
@pytest.mark.parametrize("bad", [pytest.param(b, id=b.id) for b in BAD_INPUTS])
@pytest.mark.parametrize("sampler", ["off", "balanced", "budget"])
def test_bad_input_fails_as_grpo_does(bad, sampler, models, tmp_path):
    if bad.id == "unknown-environment" and not ENVIRONMENTS:
        pytest.skip("environment_factory needs transformers >= 5.2")
    with pytest.raises(bad.error, match=bad.match) as grpo_error:
        build_bad(GRPOTrainer, GRPOConfig, bad, models, tmp_path / "grpo").train()
    extra = OFF if sampler == "off" else SAMPLERS[sampler]
    try:
        trainer = build_bad(AdaGRPOTrainer, AdaGRPOConfig, bad, models, tmp_path / "ada", **extra)
    except bad.error as error:  # refused at construction: no weight exists yet to move
        assert bad.match in str(error)
        return
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    with pytest.raises(bad.error, match=bad.match) as ada_error:
        trainer.train()
    assert str(ada_error.value) == str(grpo_error.value) or len(str(ada_error.value)) > len(str(grpo_error.value))
    for name, p in trainer.model.named_parameters():
        assert torch.equal(p.detach(), before[name]), f"{name} moved before the error"


def test_the_batch_size_must_hold_whole_groups():
    """GRPOConfig refuses a generation batch that is not a multiple of num_generations; AdaGRPOConfig too, naming the
    field."""
    with pytest.raises(ValueError, match="num_generations"):
        GRPOConfig(output_dir="/nonexistent", num_generations=4, per_device_train_batch_size=6, use_cpu=True)
    with pytest.raises(ValueError, match="num_generations"):
        AdaGRPOConfig(output_dir="/nonexistent", num_generations=4, per_device_train_batch_size=6, use_cpu=True)


# ---------------------------------------------------------------------------------------------------------------------
# Combinations sampling refuses (GRPOTrainer has no such option), before the model loads, with the reason.


@dataclass
class Refused:
    what: str
    config: dict[str, Any]
    inputs: Callable[[], dict]
    match: str
    reason: str
    world_size: int = 1  # processes the config is built for (patched in: the check reads the config's world size)
    check: Callable[[], Any] | None = None  # a refusal raised once the model exists: how to reach it without one


def _iterable():
    return {"train_dataset": conversational().to_iterable_dataset()}


def _pipelined_with_a_sharded_reward_model():
    """What AdaGRPOTrainer.__init__ checks once TRL has prepared the reward models (DeepSpeed ZeRO-3 partitions
    them): a trainer whose reward model has a ZeRO-3 partitioned parameter."""

    from trl_ada.integration.pipelined_rank import check_reward_models_unsharded

    reward_model = torch.nn.Linear(2, 1)
    reward_model.weight.ds_tensor = torch.zeros(1)  # what deepspeed.zero.Init leaves on a partitioned parameter
    check_reward_models_unsharded(True, ["rate_reward", "rm"], [rate_reward, reward_model])


_SAMPLED = lambda: {"train_dataset": conversational()}  # noqa: E731
_PIPELINED = dict(pipelined_rounds=True, use_vllm=True)

REFUSED = [
    Refused(
        "`pipelined_rounds=True` with image prompts",
        _PIPELINED,
        lambda: {"train_dataset": image_dataset("placeholder")},
        "pipelined_rounds",
        "the pipelined driver feeds the engine token prompts; images need the processor (synchronous rounds run them)",
    ),
    Refused(
        "`pipelined_rounds=True` with `tools`",
        _PIPELINED,
        lambda: {"train_dataset": calculator_dataset(8), "tools": [multiply]},
        "pipelined_rounds",
        "a tool loop is several engine requests per sample, run by TRL for a whole batch",
    ),
    Refused(
        "`pipelined_rounds=True` with `environment_factory`",
        _PIPELINED,
        lambda: {"train_dataset": calculator_dataset(8), "environment_factory": ProductEnv},
        "pipelined_rounds",
        "as with `tools`: an environment's tool loop is several engine requests per sample",
    ),
    Refused(
        "`pipelined_rounds=True` with `rollout_func`",
        _PIPELINED,
        lambda: {"train_dataset": conversational(), "rollout_func": rollout_func},
        "pipelined_rounds",
        "a `rollout_func` generates a whole batch itself; the driver needs one engine request per sample",
    ),
    Refused(
        '`pipelined_rounds=True` without a colocated vLLM engine (`vllm_mode="server"`, or no vLLM)',
        dict(pipelined_rounds=True, use_vllm=True, vllm_mode="server"),
        _SAMPLED,
        "vllm_mode='colocate'",
        "it steps this process's engine request by request; a server or transformers generates whole batches "
        "(the synchronous rounds run them)",
    ),
    Refused(
        "`pipelined_rounds=True` with `vllm_tensor_parallel_size` > 1",
        dict(_PIPELINED, vllm_tensor_parallel_size=2),
        _SAMPLED,
        "vllm_tensor_parallel_size=1",
        "a tensor-parallel group shares one engine across processes, which each pipeline their own prompts",
    ),
    Refused(
        "`pipelined_rounds=True` with a reward model sharded by DeepSpeed ZeRO-3",
        _PIPELINED,
        _SAMPLED,
        "sharded across processes",
        "each process scores its samples when they finish; a sharded model needs every process in each forward "
        "pass (FSDP, ZeRO-2 and DDP keep reward models whole)",
        check=_pipelined_with_a_sharded_reward_model,
    ),
    Refused(
        '`multi_objective_aggregation="normalize_then_sum"`',
        dict(multi_objective_aggregation="normalize_then_sum"),
        _SAMPLED,
        "multi_objective_aggregation",
        "it normalizes each reward function within the trained group, so a sample has no reward until its group "
        "is chosen; the exit rule, the selection and the pooled baseline need one when it is scored (weigh the "
        "functions with `reward_weights`)",
    ),
    Refused(
        "a prompt's group split across processes (`per_device_train_batch_size * steps_per_generation` not a "
        "multiple of `num_generations`)",
        dict(per_device_train_batch_size=2),
        _SAMPLED,
        "straddle",
        "every process hands TRL whole groups of its chosen prompts (GRPOTrainer only needs the generation batch "
        "of all processes to hold whole groups)",
        world_size=2,
    ),
    Refused(
        '`sampler="dapo"` (or `dynamic_sampling=True`) with an `IterableDataset`',
        dict(sampler="dapo"),
        _iterable,
        "IterableDataset",
        "refills draw prompts by index (a seeded permutation a resumed run continues); a stream has none",
    ),
    Refused(
        '`sampler="budget"` with an `IterableDataset`',
        dict(sampler="budget", sampling_budget=6.0),
        _iterable,
        "IterableDataset",
        "as above",
    ),
    Refused(
        '`sampler="retire_solved"` with an `IterableDataset`',
        dict(sampler="retire_solved"),
        _iterable,
        "IterableDataset",
        "as above: a retired prompt is replaced by one drawn from the training set",
    ),
    Refused(
        "`prompt_memory=True` with environment-owned data (`environment_factory`, no `train_dataset`)",
        dict(prompt_memory=True),
        lambda: {"environment_factory": ProductEnv},
        "prompt_memory needs a train_dataset",
        "every row is the same placeholder and the task comes from `reset()`: there is no prompt to remember",
    ),
    Refused(
        '`sampler="knapsack"` or `"est"` with environment-owned data (`environment_factory`, no `train_dataset`)',
        dict(sampler="knapsack"),
        lambda: {"environment_factory": ProductEnv},
        r"prompt_memory needs a train_dataset \(sampler='knapsack' uses it\)",
        "as above: their allocation reads the prompt memory, which they turn on",
    ),
]


@pytest.mark.parametrize("refused", [pytest.param(r, id=r.what) for r in REFUSED])
def test_refused_combinations_fail_before_the_model_loads(refused, tmp_path, monkeypatch):
    if refused.world_size != 1:
        monkeypatch.setattr(GRPOConfig, "world_size", property(lambda self: refused.world_size))
    # GRPOTrainer takes the same TRL fields: the refusal is sampling's.
    trl_fields = {k: v for k, v in refused.config.items() if k in GRPOConfig.__dataclass_fields__}
    GRPOConfig(**{**BASE, **trl_fields, "output_dir": str(tmp_path / "grpo")})
    with pytest.raises(ValueError, match=refused.match):
        if refused.check is not None:
            refused.check()
        else:  # the config or the trainer's argument check refuses it, before "no/such-model" is ever looked up
            args = AdaGRPOConfig(**{**BASE, **refused.config, "output_dir": str(tmp_path)})
            AdaGRPOTrainer(model="no/such-model", reward_funcs=rate_reward, args=args, **refused.inputs())


# ---------------------------------------------------------------------------------------------------------------------
# Seams on their own, on a trainer built the way TRL's unit tests build one (no __init__).


@pytest.mark.slow
def test_generate_outside_a_sampling_step_is_grpos(models, tmp_path):
    """`_generate` called on its own, as TRL's rollout-dispatch tests call it on a trainer with a `rollout_func`:
    on an AdaGRPOTrainer built normally, and on one that never ran AdaGRPOTrainer.__init__ (GRPOTrainer's state
    only), it dispatches exactly as GRPOTrainer's."""
    cell = next(c for c in CELLS if c.id == "rollout-func")
    prompts = [row["prompt"] for row in conversational(repeat=1)]
    built = {}
    pairs = (("grpo", GRPOTrainer, GRPOConfig), ("ada", AdaGRPOTrainer, AdaGRPOConfig))
    for name, trainer_class, config_class in pairs:
        built[name] = trainer_class(
            model=models("text"),
            reward_funcs=guess_reward,
            train_dataset=cell.dataset(),
            args=config_of(cell, config_class, tmp_path / name),
            rollout_func=rollout_func,
        )
    bare = object.__new__(AdaGRPOTrainer)
    bare.__dict__.update(built["grpo"].__dict__)
    results = []
    for trainer in (built["grpo"], built["ada"], bare):
        torch.manual_seed(0)
        results.append(trainer._generate(prompts))
    assert results[0][0] and results[1] == results[0] and results[2] == results[0]


# ---------------------------------------------------------------------------------------------------------------------
# Logging: Reinforce-Ada's metrics reach the tracker's run files, beside TRL's.


def _wandb_history(run_file: str, key: str) -> list[str]:
    """The values logged under `key` in an offline wandb run file, in order. The file's history records are protobuf
    messages whose items carry the key (field 2) and the value as JSON (field 16), both plain strings on disk."""
    import re

    data = open(run_file, "rb").read()
    pattern = re.compile(rb"\x12" + bytes([len(key)]) + re.escape(key.encode()) + rb"\x82\x01([\x00-\x7f])")
    return [data[m.end() : m.end() + m.group(1)[0]].decode() for m in pattern.finditer(data)]


@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib").util.find_spec("wandb") is None, reason="pip install trl-ada[wandb]")
def test_sampling_metrics_reach_wandb_offline_run_files(models, tmp_path, monkeypatch):
    import glob

    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    cell = next(c for c in CELLS if c.id == "conversational")
    trainer = run(
        TrappedAda,
        cell,
        models,
        tmp_path,
        AdaGRPOConfig,
        report_to="wandb",
        max_steps=2,
        run_name="conformance",
        **SAMPLERS["balanced"],
    )
    wandb.finish()
    [run_file] = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    logged = [h for h in trainer.state.log_history if "loss" in h]
    for key in ("sampling/total_samples", "sampling/rounds_max", "sampling/iid_reward", "loss"):
        # wandb's service process may still be writing the file when finish() returns (wandb 0.22): wait for it
        deadline = time.time() + 60
        while len(_wandb_history(run_file, f"train/{key}")) < 2 * len(logged) and time.time() < deadline:
            time.sleep(0.5)
        values = [float(v) for v in _wandb_history(run_file, f"train/{key}")]
        # each step's history record, then the summary record that repeats its values
        assert values[0::2] == values[1::2] == pytest.approx([h[key] for h in logged]), key


# ---------------------------------------------------------------------------------------------------------------------
# The compatibility table of docs/compatibility.md (the README links to it), generated from the matrix.


def compatibility_table() -> str:
    samplers = list(SAMPLERS)
    lines = [
        "| What you write (GRPOTrainer) | sampling off = GRPOTrainer | " + " | ".join(samplers) + " |",
        "|---|---|" + "---|" * len(samplers),
    ]
    for cell in CELLS:
        marks = []
        for sampler in samplers:
            if sampler not in cell.samplers:
                marks.append("·")
            else:
                marks.append("rows = GRPO's" if cell.replay else "trains †")
        note = f" ({cell.requires})" if cell.requires else ""
        lines.append(f"| {cell.feature}{note} | same batch and logs | " + " | ".join(marks) + " |")
    lines.append(
        '| `report_to="wandb"` (offline run files) | TRL\'s metrics | `sampling/*` reach the run file |'
        + " · |" * (len(samplers) - 1)
    )
    for bad in BAD_INPUTS:
        lines.append(
            f"| bad input: {bad.what} | GRPOTrainer's error | "
            + " | ".join(["its error, no weight moved" if s in ("balanced", "budget") else "·" for s in samplers])
            + " |"
        )
    lines += ["", "| refused with sampling on (GRPOTrainer has no such option) | why |", "|---|---|"]
    lines += [f"| {refused.what} | {refused.reason} |" for refused in REFUSED]
    return "\n".join(lines)


def test_the_docs_carry_the_generated_compatibility_table():
    page = open(os.path.join(ROOT, "docs", "compatibility.md")).read()
    assert compatibility_table() in page, "docs/compatibility.md's table is stale: python -m tests.test_conformance"


if __name__ == "__main__":
    print(compatibility_table())
