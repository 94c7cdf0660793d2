"""Every rollout GRPOTrainer runs, inside adaptive rounds: tools, rollout_func, environments.

The pure part (cutting `_generate`'s output into samples and back, merging per-round metrics) is tested
exhaustively; the rest runs the real AdaGRPOTrainer and the real GRPOTrainer on the tiny offline model, with a
scripted stand-in policy where a random model could never write a tool call (tests/helpers/tool_policy.py).
"""

from __future__ import annotations

import math

import pytest
import torch
import transformers
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version
from trl import GRPOConfig, GRPOTrainer

from tests.helpers.tool_policy import (
    MultiplyingEnv,
    ReplayPolicy,
    ScriptedPolicy,
    calculator_dataset,
    install,
    multiply,
    product_reward,
)
from tests.helpers.trainers import small_args
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
from trl_ada.core.memory import prompt_key
from trl_ada.examples.tiny import build_tiny_model
from trl_ada.integration.prompt_keys import row_key
from trl_ada.integration.rollouts import join_rollout, merge_round_metrics, split_rollout


ENVIRONMENTS = Version(transformers.__version__) >= Version("5.2.0")  # TRL's environment_factory needs it
CONTINUOUS_BATCHING = Version(transformers.__version__) >= Version("5.8.0")  # TRL's continuous batching needs it


# ---------------------------------------------------------------------------------------------------------------------
# The pure part.


@st.composite
def rollouts(draw):
    count = draw(st.integers(1, 6))
    ids = st.lists(st.integers(0, 50), min_size=1, max_size=5)
    completion_ids = [draw(ids) for _ in range(count)]
    with_masks, with_logprobs, with_images = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    tool_mask = [[draw(st.integers(0, 1)) for _ in c] for c in completion_ids] if with_masks else None
    logprobs = [[-0.5] * len(c) for c in completion_ids] if with_logprobs else None
    images = [draw(st.one_of(st.none(), st.just([f"img{i}"]))) for i in range(count)] if with_images else None
    if images is not None and all(image is None for image in images):
        images[0] = ["img0"]
    extra = {"per_row": [f"x{i}" for i in range(count)], "shared": "s"} if draw(st.booleans()) else {}
    tool_images = [[] for _ in range(count)]
    prompts = [f"p{i}" for i in range(count)]
    return prompts, (
        [draw(ids) for _ in range(count)],
        completion_ids,
        tool_mask,
        [f"c{i}" for i in range(count)],
        logprobs,
        extra,
        images,
        tool_images,
    )


@given(rollouts(), st.data())
@settings(max_examples=200, deadline=None)
def test_split_then_join_gives_trl_its_rows_back(rollout, data):
    prompts, generated = rollout
    samples = split_rollout(prompts, generated)
    assert len(samples) == len(prompts)
    joined = join_rollout(samples)
    prompt_ids, completion_ids, tool_mask, completions, logprobs, extra, images, tool_images = generated
    assert joined[0] == prompt_ids and joined[1] == completion_ids and joined[2] == tool_mask
    assert joined[3] == completions and joined[4] == logprobs and joined[6] == images and joined[7] == tool_images
    # rollout_func's fields: what TRL would merge into row i, row by row
    assert all(
        {key: values[i] for key, values in joined[5].items()}
        == {key: (v[i] if isinstance(v, list) else v) for key, v in extra.items()}
        for i in range(len(samples))
    )
    # any subset, in any order, joins to those rows (the kept samples of a step)
    order = data.draw(st.permutations(range(len(samples))))
    kept = [samples[i] for i in order]
    again = join_rollout(kept)
    assert again[1] == [completion_ids[i] for i in order]
    if tool_mask is not None:
        assert again[2] == [tool_mask[i] for i in order]


def test_split_refuses_a_rollout_of_the_wrong_size():
    generated = ([[1]], [[2], [3]], None, ["a", "b"], None, {}, None, [])
    with pytest.raises(RuntimeError, match="one completion per row"):
        split_rollout(["p", "q"], generated)


def test_join_masks_a_sample_without_tool_calls_as_model_tokens():
    with_tool = split_rollout(["p"], ([[1]], [[5, 6, 7]], [[1, 0, 1]], ["a"], None, {}, None, [[]]))[0]
    plain = split_rollout(["q"], ([[1]], [[8, 9]], None, ["b"], None, {}, None, []))[0]
    assert join_rollout([with_tool, plain])[2] == [[1, 0, 1], [1, 1]]


def test_round_metrics_merge_into_one_value_per_step():
    metrics = {
        "completions/mean_length": [9.0, 10.0, 20.0],
        "completions/min_length": [1.0, 4.0, 2.0],
        "completions/max_terminated_length": [3.0, 5.0, 7.0],
        "tools/call_frequency": [0.5, 1.0],
        "tools/failure_frequency": [0.0, 0.5],
        "num_tokens": [100.0],
        "reward": [0.3],
    }
    before = {
        "completions/mean_length": 1,
        "completions/min_length": 1,
        "completions/max_terminated_length": 1,
        "num_tokens": 1,
        "reward": 1,
    }
    merge_round_metrics(metrics, before, sizes=[30, 10])
    assert metrics["completions/mean_length"] == [9.0, (10 * 30 + 20 * 10) / 40]
    assert metrics["completions/min_length"] == [1.0, 2.0]
    assert metrics["completions/max_terminated_length"] == [3.0, 7.0]
    # 15 + 10 calls, 0 + 5 failures: 5 of 25 calls failed (not the mean of 0 and 0.5)
    assert metrics["tools/call_frequency"] == [25 / 40] and metrics["tools/failure_frequency"] == [5 / 25]
    assert metrics["num_tokens"] == [100.0] and metrics["reward"] == [0.3]
    untouched = {"reward": [0.3], "sampling/total_samples": [8.0]}  # no _generate call (pipelined rounds)
    merge_round_metrics(untouched, {}, sizes=[])
    assert untouched == {"reward": [0.3], "sampling/total_samples": [8.0]}


# ---------------------------------------------------------------------------------------------------------------------
# Tools: TRL's tool-calling loop inside the rounds.


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tool-model") / "model"), tools=True)


def tool_args(tmp_path, config=AdaGRPOConfig, **kwargs):
    tool = dict(max_completion_length=96, max_steps=1, learning_rate=1e-3, shuffle_dataset=False)
    return small_args(tmp_path, config, **{**tool, **kwargs})


class CountingPolicy(ScriptedPolicy):
    """The scripted policy, counting the tool calls it writes (well-formed and malformed)."""

    def __init__(self, tokenizer, malformed_rate=0.25):
        super().__init__(tokenizer, malformed_rate)
        self.tool_calls = self.malformed = 0

    def respond(self, text):
        response = super().respond(text)
        if "<tool_call>" in response:
            self.tool_calls += 1
            self.malformed += '"c":' in response
        return response


def counted_tool_run(trainer_class, model, reward, tmp_path):
    """(trainer, policy): two steps of TRL's tool-calling loop on the calculator questions, the counting scripted
    policy writing every turn."""
    trainer = trainer_class(
        model=model,
        reward_funcs=reward,
        args=tool_args(tmp_path, max_steps=2),
        train_dataset=calculator_dataset(),
        tools=[multiply],
    )
    policy = CountingPolicy(trainer.processing_class)
    install(trainer, policy)
    return trainer, policy


class Keeper(AdaGRPOTrainer):
    """Keeps what the real trainer hands to the loss, and the samples it kept (observation only)."""

    def _collect_selected(self, state, local):
        samples = super()._collect_selected(state, local)
        self.kept = getattr(self, "kept", []) + [list(samples)]
        return samples

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.outputs = getattr(self, "outputs", []) + [output]
        self.rewards = getattr(self, "rewards", []) + [self._last_rewards_per_func.clone()]  # of the kept, in order
        return output


@pytest.mark.slow
def test_tool_loop_runs_in_every_round_and_its_metrics_count_every_sample(tool_model, tmp_path):
    trainer, policy = counted_tool_run(Keeper, tool_model, product_reward, tmp_path)
    trainer.train()

    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    total = sum(h["sampling/total_samples"] for h in logs)
    assert total > sum(h["sampling/kept_samples"] for h in logs)  # rounds beyond the first ran
    # every generated sample's tool calls are counted, the discarded ones too
    calls = sum(h["tools/call_frequency"] * h["sampling/total_samples"] for h in logs)
    assert calls == pytest.approx(policy.tool_calls) and policy.tool_calls > 0
    failures = sum(
        h["tools/failure_frequency"] * h["tools/call_frequency"] * h["sampling/total_samples"] for h in logs
    )
    assert failures == pytest.approx(policy.malformed) and policy.malformed > 0  # malformed calls fail in TRL's loop
    # the kept samples carry their tool masks into the training batch: 0 exactly on the tool results
    for kept, output in zip(trainer.kept, trainer.outputs):
        assert "tool_mask" in output
        for row, sample in enumerate(kept):
            length = len(sample.completion_ids)
            assert output["completion_ids"][row, :length].tolist() == sample.completion_ids
            assert output["tool_mask"][row, :length].tolist() == (sample.tool_mask or [1] * length)
        assert any(0 in (s.tool_mask or []) for s in kept)


@pytest.mark.slow
def test_a_kept_tool_completion_trains_exactly_as_grpo_trains_it(tool_model, tmp_path):
    """GRPOTrainer, made to write the completions AdaGRPOTrainer kept (its own tool loop runs the tools again),
    builds the same model inputs, loss mask and, with the same advantages, the same loss."""
    ada = Keeper(
        model=tool_model,
        reward_funcs=product_reward,
        args=tool_args(tmp_path),
        train_dataset=calculator_dataset(),
        tools=[multiply],
    )
    install(ada, ScriptedPolicy(ada.processing_class))
    ada.train()
    kept, ada_output = ada.kept[0], ada.outputs[0]
    assert any(0 in (s.tool_mask or []) for s in kept)  # the tool loop is part of what is compared

    grpo = GRPOTrainer(
        model=tool_model,
        reward_funcs=product_reward,
        args=tool_args(tmp_path / "grpo", config=GRPOConfig),
        train_dataset=calculator_dataset(),
        tools=[multiply],
    )
    tok = grpo.processing_class
    install(grpo, ReplayPolicy(tok, [(tok.decode(s.prompt_ids), s.completion_ids, s.tool_mask) for s in kept]))
    answers = {row["prompt"][-1]["content"]: row["answer"] for row in calculator_dataset()}
    rows = [{"prompt": s.prompt, "answer": answers[s.prompt[-1]["content"]]} for s in kept]
    grpo.model.train()
    grpo_output = grpo._generate_and_score_completions(rows)

    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "tool_mask"):
        assert torch.equal(ada_output[key], grpo_output[key]), key
    assert ada_output["num_items_in_batch"] == grpo_output["num_items_in_batch"]
    grpo_output["advantages"] = ada_output["advantages"]
    grpo.current_gradient_accumulation_steps = grpo.args.gradient_accumulation_steps  # what train() sets
    with torch.no_grad():
        ada_loss = grpo._compute_loss(grpo.model, dict(ada_output))
        grpo_loss = grpo._compute_loss(grpo.model, dict(grpo_output))
    assert torch.equal(ada_loss, grpo_loss) and ada_loss.abs() > 0


@pytest.mark.slow
def test_tool_runs_resume_from_a_checkpoint(tool_model, tmp_path):
    args = tool_args(
        tmp_path, max_steps=2, save_strategy="steps", save_steps=1, dynamic_sampling=True, prompt_memory=True
    )
    first = AdaGRPOTrainer(
        model=tool_model, reward_funcs=product_reward, args=args, train_dataset=calculator_dataset(), tools=[multiply]
    )
    install(first, ScriptedPolicy(first.processing_class))
    first.train()
    args = tool_args(
        tmp_path, max_steps=3, save_strategy="steps", save_steps=1, dynamic_sampling=True, prompt_memory=True
    )
    resumed = AdaGRPOTrainer(
        model=tool_model, reward_funcs=product_reward, args=args, train_dataset=calculator_dataset(), tools=[multiply]
    )
    install(resumed, ScriptedPolicy(resumed.processing_class))
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-2"))
    assert resumed.state.global_step == 3
    assert len(resumed.prompt_memory) >= len(first.prompt_memory) > 0  # the memory came back with the checkpoint
    assert [h for h in resumed.state.log_history if "loss" in h][-1]["tools/call_frequency"] >= 0


# ---------------------------------------------------------------------------------------------------------------------
# rollout_func: called per round with that round's prompts, one entry per sample.


def make_rollout_func(tokenizer, record):
    """A rollout_func that writes its own completions: a number, then 2 "environment" tokens (env_mask 0) and EOS;
    its extra field `trace` names the completion, so a reward can check it got its own sample's field."""

    def rollout_func(prompts, trainer):
        record.append(len(prompts))
        prompt_ids = [
            tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
            for p in prompts
        ]
        completion_ids, env_mask, traces = [], [], []
        for _ in prompts:
            answer = tokenizer.encode(str(int(torch.randint(0, 3, ()).item())), add_special_tokens=False)
            env = tokenizer.encode("ok", add_special_tokens=False)[:2]
            completion_ids.append(answer + env + [tokenizer.eos_token_id])
            env_mask.append([1] * len(answer) + [0] * len(env) + [1])
            traces.append(tokenizer.decode(answer))
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,
            "env_mask": env_mask,
            "trace": traces,
        }

    return rollout_func


def trace_reward(completions, trace, **kwargs):
    for completion, own in zip(completions, trace):
        assert completion[0]["content"].startswith(own), "a sample received another sample's rollout field"
    return [1.0 if own == "1" else 0.0 for own in trace]


@pytest.mark.slow
def test_rollout_func_is_called_per_round_and_its_fields_stay_with_their_sample(tiny_model, tmp_path):
    from transformers import AutoTokenizer

    record = []
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    trainer = Keeper(
        model=tiny_model,
        reward_funcs=trace_reward,
        args=tool_args(tmp_path, max_steps=2),
        train_dataset=calculator_dataset(),
        rollout_func=make_rollout_func(tokenizer, record),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert sum(record) == sum(h["sampling/total_samples"] for h in logs)  # one entry per sample, every round
    assert len(record) > 2 and max(record) == 8 * 8 // 4  # round 1: 2 prompts x round_repeat 8
    for kept, output in zip(trainer.kept, trainer.outputs):
        for row, sample in enumerate(kept):
            length = len(sample.completion_ids)
            assert output["tool_mask"][row, :length].tolist() == sample.tool_mask == [1] * (length - 3) + [0, 0, 1]
            assert sample.extra["trace"] == tokenizer.decode(sample.completion_ids[: length - 3])


# ---------------------------------------------------------------------------------------------------------------------
# environment_factory: one instance per sample of every round, reset with its row; environment-owned rewards and data.


class CalculatorEnv(MultiplyingEnv):
    """Its `multiply` is the tool; it owns the reward (1 when the rollout called multiply with the row's numbers)."""

    resets = 0

    def reset(self, **row):
        CalculatorEnv.resets += 1
        self.question = row.get("prompt", [{"content": ""}])[-1]["content"]
        self.called_with = None
        if not self.question:  # environment-owned data: the task comes from reset()
            a, b = 11 + CalculatorEnv.resets % 7, 23
            self.question = f"What is {a} x {b}?"
            return self.question
        return None

    def get_reward(self) -> float:
        import re

        numbers = tuple(int(x) for x in re.findall(r"\d+", self.question))
        return 1.0 if self.called_with == numbers else 0.0


class OtherEnv(CalculatorEnv):
    """A second environment of a multi-environment run (same tool, its own class: its own reward column)."""


def environment_trainer(tool_model, tmp_path, factory, dataset, **kwargs):
    trainer = Keeper(
        model=tool_model,
        reward_funcs=kwargs.pop("reward_funcs", None),
        args=tool_args(tmp_path, **kwargs),
        train_dataset=dataset,
        environment_factory=factory,
    )
    install(trainer, ScriptedPolicy(trainer.processing_class, malformed_rate=0.0))
    return trainer


@pytest.mark.slow
@pytest.mark.skipif(not ENVIRONMENTS, reason="TRL's environment_factory needs transformers >= 5.2")
def test_environment_rewards_are_read_in_the_round_and_the_pool_stays_bounded(tool_model, tmp_path):
    CalculatorEnv.resets = 0
    trainer = environment_trainer(tool_model, tmp_path, CalculatorEnv, calculator_dataset(), max_steps=3)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    total = sum(h["sampling/total_samples"] for h in logs)
    assert total > sum(h["sampling/kept_samples"] for h in logs)
    # one reset per sample of every round, plus one per kept sample when TRL builds the training batch
    assert CalculatorEnv.resets == total + sum(h["sampling/kept_samples"] for h in logs)
    # the reward of each kept sample is what its own rollout did: the tool call with its question's numbers
    column = trainer.reward_func_names.index("CalculatorEnv")
    for kept, rewards in zip(trainer.kept, trainer.rewards):
        for sample, reward in zip(kept, rewards[:, column].tolist()):
            called = any(m.get("role") == "tool" and "error" not in str(m.get("content")) for m in sample.completion)
            assert reward == float(called) and called == (sample.tool_mask is not None and 0 in sample.tool_mask)
    rewards = [h["rewards/CalculatorEnv/mean"] for h in logs]
    assert all(0 < r < 1 for r in rewards)  # balanced groups of environment-owned rewards
    # instances come from TRL's pool: as many as the largest round needs, not more each step
    assert len(trainer._environment_pool[None]) == 2 * 8 // trainer.accelerator.num_processes


@pytest.mark.slow
@pytest.mark.skipif(not ENVIRONMENTS, reason="TRL's environment_factory needs transformers >= 5.2")
def test_environment_owned_data_and_several_environments(tool_model, tmp_path):
    owned = environment_trainer(
        tool_model, tmp_path / "owned", CalculatorEnv, None, max_steps=2, dynamic_sampling=True
    )
    owned.train()
    logs = [h for h in owned.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    assert any("What is" in str(s.prompt) for kept in owned.kept for s in kept)  # prompts came from reset()

    rows = [dict(row, environment="calc" if i % 2 else "other") for i, row in enumerate(calculator_dataset())]
    several = environment_trainer(
        tool_model,
        tmp_path / "several",
        {"calc": CalculatorEnv, "other": OtherEnv},
        Dataset.from_list(rows),
        max_steps=2,
    )
    several.train()
    logs = [h for h in several.state.log_history if "loss" in h]
    assert {"rewards/CalculatorEnv/mean", "rewards/OtherEnv/mean"} <= set(logs[0])


class PlainEnv(CalculatorEnv):
    """An environment that supplies the prompt and the tool but owns no reward (TRL then adds no reward column)."""

    get_reward = None


def answer_format_reward(completions, **kwargs):
    """1 when the final assistant message states an answer: it needs no dataset column."""
    return [
        1.0 if (completion[-1].get("content") or "").startswith("The answer is") else 0.0 for completion in completions
    ]


def routing_dataset():
    """Only an `environment` column: each rollout's environment supplies the prompt from reset()."""
    return Dataset.from_dict({"environment": ["calc", "other", "plain", "calc"] * 2})


ROUTED = {"calc": CalculatorEnv, "other": OtherEnv, "plain": PlainEnv}


@pytest.mark.slow
@pytest.mark.skipif(not ENVIRONMENTS, reason="TRL's environment_factory needs transformers >= 5.2")
@pytest.mark.parametrize("sampling", ["off", "balanced", "dynamic"])
def test_an_environment_routed_dataset_without_prompts_builds_as_grpo_and_trains(tool_model, tmp_path, sampling):
    """GRPOTrainer trains a dataset with only an `environment` column (the environment supplies the prompt);
    AdaGRPOTrainer builds it with the same reward sources, and trains it with sampling off and on."""
    config = {
        "off": dict(multiround_adaptive_downsampling=False),  # rewards 1 or 2: a tool call adds the env's 1
        "balanced": dict(  # the format reward and a tool call's 1: only a sum of 2 is solved
            reinforce_ada_choice="balanced",
            round_repeat=4,
            max_rounds=2,
            positive_threshold=1.5,
            positive_reward_func="weighted_sum",
        ),
        "dynamic": dict(multiround_adaptive_downsampling=False, dynamic_sampling=True, max_refill_batches=1),
    }
    grpo = GRPOTrainer(
        model=tool_model,
        reward_funcs=answer_format_reward,
        train_dataset=routing_dataset(),
        args=tool_args(tmp_path / "grpo", config=GRPOConfig),
        environment_factory=ROUTED,
    )
    CalculatorEnv.resets = 0
    ada = environment_trainer(
        tool_model,
        tmp_path / "ada",
        ROUTED,
        routing_dataset(),
        reward_funcs=answer_format_reward,
        max_steps=2,
        **config[sampling],
    )
    assert ada.reward_func_names == grpo.reward_func_names == ["answer_format_reward", "CalculatorEnv", "OtherEnv"]
    assert torch.equal(ada.reward_weights, grpo.reward_weights)
    ada.train()
    logs = [h for h in ada.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    kept = [s for batch in ada.kept for s in batch] if sampling != "off" else []
    assert all("What is" in str(s.prompt) for s in kept)  # every kept prompt came from its environment's reset()
    assert CalculatorEnv.resets > 0


def test_environment_owned_data_refuses_prompt_memory_before_the_model_loads(tmp_path):
    with pytest.raises(ValueError, match="prompt_memory needs a train_dataset"):
        AdaGRPOTrainer(
            model="no/such-model",
            reward_funcs=product_reward,
            environment_factory=CalculatorEnv,
            args=tool_args(tmp_path, prompt_memory=True),
        )


@pytest.mark.slow
@pytest.mark.skipif(not ENVIRONMENTS, reason="TRL's environment_factory needs transformers >= 5.2")
def test_the_budget_without_memory_trains_on_environment_owned_data(tool_model, tmp_path):
    """The budget draws its candidates from the placeholder rows GRPOTrainer builds, each a fresh reset(); only the
    prompt memory, which could not tell those rows apart, is refused there."""
    CalculatorEnv.resets = 0
    trainer = environment_trainer(tool_model, tmp_path, CalculatorEnv, None, max_steps=2, sampler="budget")
    assert not trainer.args.prompt_memory
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    assert any("What is" in str(s.prompt) for kept in trainer.kept for s in kept)  # prompts came from reset()
    assert CalculatorEnv.resets > 0


def test_pipelined_rounds_refuse_tools_before_the_model_loads(tmp_path):
    args = tool_args(tmp_path)
    args.pipelined_rounds = True  # set after construction: the config alone would ask for vLLM
    with pytest.raises(ValueError, match="pipelined_rounds=True cannot run tools"):
        AdaGRPOTrainer(
            model="no/such-model",
            reward_funcs=product_reward,
            args=args,
            train_dataset=calculator_dataset(),
            tools=[multiply],
        )


# ---------------------------------------------------------------------------------------------------------------------
# Image prompts on a tiny vision-language model.

COLORS = {
    "red": ((200, 10, 10), 0.0),
    "green": ((10, 200, 10), 1.0),
    "blue": ((10, 10, 200), 0.5),
    "gray": ((90, 90, 90), 0.25),
}


def color_dataset():
    from PIL import Image

    return Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": "What color is this?"}],
                "image": Image.new("RGB", (28, 28), rgb),
                "color": name,
            }
            for name, (rgb, _) in COLORS.items()
        ]
        * 4
    )


def color_reward(completions, color, **kwargs):
    from tests.helpers.data import hash_reward_value

    return [hash_reward_value(c[0]["content"], COLORS[name][1]) for c, name in zip(completions, color)]


def color_trainer(model, dataset, tmp_path, **args):
    """A Keeper of the color task's image prompts, scored by color_reward, answers of up to 8 tokens."""
    return Keeper(
        model=model,
        reward_funcs=color_reward,
        train_dataset=dataset,
        args=tool_args(tmp_path, max_completion_length=8, **args),
    )


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    from trl_ada.examples.tiny import build_tiny_vlm

    return build_tiny_vlm(str(tmp_path_factory.mktemp("vlm") / "model"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "sampling", [dict(dynamic_sampling=True, prompt_memory=True), dict(sampling_budget=4.0, prompt_memory=True)]
)
def test_image_prompts_train_in_rounds_and_the_memory_tells_images_apart(tiny_vlm, tmp_path, sampling):
    trainer = color_trainer(tiny_vlm, color_dataset(), tmp_path, max_steps=3, **sampling)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 3 and all(math.isfinite(h["loss"]) for h in logs)
    # one question text, four images: four prompts to remember, each with its own pass rate
    table = trainer.prompt_memory.table()
    assert len(table["prompt_hash"]) == 4
    assert len({prompt_key(ids) for ids in trainer._tokenize(list(color_dataset()))}) == 1  # the text alone: one
    export = trainer.export_prompt_memory(str(tmp_path / "memory.parquet"))
    assert set(export["prompt"]) == {"What color is this?"}  # the export finds every image's row again
    # each trained row's pixels are its own sample's image
    processor = trainer.processing_class.image_processor
    for kept, output in zip(trainer.kept, trainer.outputs):
        expected = processor(images=[s.images[0] for s in kept], return_tensors="pt")["pixel_values"]
        assert torch.equal(output["pixel_values"], expected)


def placeholder_color_dataset(column="images"):
    """The color task as TRL's VLM examples write it: the image placeholder inside the message."""
    rows = []
    for row in color_dataset():
        content = [{"type": "image"}, {"type": "text", "text": row["prompt"][-1]["content"]}]
        image = row.pop("image")
        rows.append(
            {
                **row,
                "prompt": [{"role": "user", "content": content}],
                **({"images": [image]} if column == "images" else {"image": image}),
            }
        )
    return Dataset.from_list(rows)


@pytest.mark.slow
def test_image_placeholder_prompts_resume_with_their_memory_and_keep_the_keys_of_text_prompts(tiny_vlm, tmp_path):
    """Placeholder-in-message image prompts (which crashed step 1 before) train with prompt memory and dynamic
    sampling, checkpoint and resume; a plain-text image prompt keeps the memory key it had before placeholders were
    understood (the text's token ids and the image's pixels), so a memory saved then still matches."""
    sampling = dict(dynamic_sampling=True, prompt_memory=True, save_strategy="steps", save_steps=1)
    first = color_trainer(tiny_vlm, placeholder_color_dataset(), tmp_path, max_steps=2, **sampling)
    first.train()
    assert len(first.prompt_memory.table()["prompt_hash"]) == 4  # four images, one question: four prompts
    resumed = color_trainer(tiny_vlm, placeholder_color_dataset(), tmp_path, max_steps=2, **sampling)
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-1"))
    assert resumed.state.global_step == 2
    # restored from checkpoint-1, then updated by step 2: the same four prompts
    assert sorted(resumed.prompt_memory.table()["prompt_hash"]) == sorted(first.prompt_memory.table()["prompt_hash"])
    # the key of a plain-text image row: its text tokens as TRL renders them, then the image, no other context
    text_rows = list(color_dataset())
    ids = first._tokenize(text_rows)
    rendered, _, _ = first._tokenize_prompts([row["prompt"] for row in text_rows])
    assert ids == [list(x) for x in rendered]
    assert [row_key(row, i, with_environment=False) for row, i in zip(text_rows, ids)] == [
        prompt_key(i, images=[row["image"]]) for row, i in zip(text_rows, ids)
    ]
    # the same question with the placeholder in the message: a different prompt to the model, a different key
    placeholder_rows = list(placeholder_color_dataset())
    keys = {row_key(row, i, False) for row, i in zip(placeholder_rows, first._tokenize(placeholder_rows))}
    assert len(keys) == 4 and not keys & {prompt_key(i, images=[row["image"]]) for row, i in zip(text_rows, ids)}


@pytest.mark.slow
@pytest.mark.skipif(
    not CONTINUOUS_BATCHING, reason="TRL's use_transformers_continuous_batching needs transformers>=5.8"
)
def test_transformers_continuous_batching_runs_the_rounds(tiny_model, tmp_path):
    from tests.helpers.data import make_recording_reward, pass_rate_dataset

    reward = make_recording_reward()
    # A small paged KV cache: left to size itself from free memory, it took 12 GB of this CPU machine's RAM.
    args = tool_args(
        tmp_path,
        max_completion_length=8,
        round_repeat=4,
        max_rounds=2,
        use_transformers_continuous_batching=True,
        transformers_continuous_batching_config={"num_blocks": 32, "block_size": 32, "max_batch_tokens": 1024},
    )
    trainer = AdaGRPOTrainer(
        model=tiny_model, reward_funcs=reward, args=args, train_dataset=pass_rate_dataset([0.0, 0.5])
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 1 and math.isfinite(logs[0]["loss"])
    assert logs[0]["sampling/rounds_max"] == 2 and len(reward.log) == logs[0]["sampling/total_samples"] == 16
