"""The cost a comparison reports holds on every path: the trainer's generated completions and tokens
(`trl_ada.integration.generation_count`, logged as `sampling/generated_*_total`) against an independent count.

The independent count sits below trl-ada, where the samples come from: the model's `generate` (each returned row cut
after its first EOS, as TRL cuts it), a `rollout_func` counting what it returns, the stand-in vLLM engine's
`generate` and its pipelined streams. Each path runs the real AdaGRPOTrainer in the real TRL on the tiny model, for
two steps. The 2-process paths (padding, pipelined ranks) are checked in tests/integration/test_multiprocess.py.
"""

import json
import time

import pytest
import torch

from tests.helpers.data import make_recording_reward, pass_rate_dataset
from tests.helpers.trainers import tiny_args
from trl_ada import AdaGRPOTrainer
from trl_ada.integration.generation_count import (
    COMPLETIONS_METRIC,
    GENERATION_SECONDS_METRIC,
    TOKENS_METRIC,
    TRAINED_TOKENS_METRIC,
    GenerationCount,
    model_tokens,
)


# lock_only: the count is our bookkeeping over TRL 1.16 (the same in every CI set); the newest and oldest sets
# check the release-sensitive paths through the rest of the suite.
pytestmark = [pytest.mark.slow, pytest.mark.lock_only]


class GenerateCounter:
    """Stands in for `model.generate`, calls the real one (or the scripted policy installed there) and counts each
    returned row and its tokens up to and including the first EOS."""

    def __init__(self, trainer):
        self.inner, self.eos = trainer.model.generate, list(trainer.eos_token_ids)
        self.rows = self.tokens = 0
        self.seconds = 0.0  # inside model.generate
        trainer.model.generate = self

    def __call__(self, input_ids, **kwargs):
        start = time.perf_counter()
        output = self.inner(input_ids=input_ids, **kwargs)
        self.seconds += time.perf_counter() - start
        completions = output[:, input_ids.shape[1] :]
        is_eos = torch.isin(completions, torch.tensor(self.eos, device=completions.device))
        for row, eos in zip(completions, is_eos):
            self.rows += 1
            self.tokens += int(eos.int().argmax()) + 1 if eos.any() else row.numel()
        return output


def train(trainer):
    trainer.train()
    return [h for h in trainer.state.log_history if "loss" in h]


def assert_counted(trainer, logs, completions, tokens):
    """The trainer's totals equal the independent count, and every step's log holds the totals as they stood."""
    count = trainer.generation_count
    assert (count.completions, count.tokens) == (completions, tokens) and completions > 0 and tokens > completions
    assert (logs[-1][COMPLETIONS_METRIC], logs[-1][TOKENS_METRIC]) == (completions, tokens)
    totals = [h[COMPLETIONS_METRIC] for h in logs]
    assert totals == sorted(totals) and 0 < totals[0] < totals[-1]  # cumulative, logged at every step


def test_plain_grpo_sampling_is_counted_and_checkpointed(tiny_model, tmp_path):
    """Sampling off: TRL's own generation, counted in `_generate`; the totals are saved in checkpoints (sampling off
    too) and a resumed run continues them."""

    def plain_grpo():  # the first run and the resumed one alike
        return AdaGRPOTrainer(
            model=tiny_model,
            reward_funcs=make_recording_reward(),
            args=tiny_args(
                tmp_path,
                per_device_train_batch_size=8,
                multiround_adaptive_downsampling=False,
                save_strategy="steps",
                save_steps=1,
            ),
            train_dataset=pass_rate_dataset([0.5, 0.3]),
        )

    trainer = plain_grpo()
    counter = GenerateCounter(trainer)
    logs = train(trainer)
    assert counter.rows == 2 * 8
    assert_counted(trainer, logs, counter.rows, counter.tokens)

    checkpoint = tmp_path / "out" / "checkpoint-1"
    # generation seconds: every model.generate call inside them, and less than the steps' own time
    step_seconds = sum(h["step_time"] for h in logs)
    assert counter.seconds <= trainer.generation_count.seconds < step_seconds
    assert logs[-1][GENERATION_SECONDS_METRIC] == round(trainer.generation_count.seconds, 3)
    saved = json.loads((checkpoint / "ada_generation_count.json").read_text())
    seconds = saved.pop("seconds")
    assert saved == {"completions": 8, "tokens": logs[0][TOKENS_METRIC], "trained_tokens": logs[0][TOKENS_METRIC]}
    assert round(seconds, 3) == logs[0][GENERATION_SECONDS_METRIC] > 0
    resumed = plain_grpo()
    counter = GenerateCounter(resumed)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert counter.rows == 8  # step 2 only
    state = resumed.generation_count.state_dict()
    assert state.pop("seconds") >= seconds + counter.seconds  # a resumed run's clock continues
    assert state == {
        "completions": 16,
        "tokens": saved["tokens"] + counter.tokens,
        "trained_tokens": saved["tokens"] + counter.tokens,
    }
    assert resumed.state.log_history[-2][COMPLETIONS_METRIC] == 16  # step 2's log (the last is the run summary)


@pytest.mark.parametrize(
    "mode",
    [
        {"reinforce_ada_choice": "balanced"},
        {"dynamic_sampling": True, "multiround_adaptive_downsampling": False},
        {"sampling_budget": 6.0, "budget_top_up": 2, "prompt_memory": True},
    ],
    ids=["rounds", "dynamic_refills", "budget_top_ups"],
)
def test_synchronous_rounds_count_every_sample(tiny_model, tmp_path, mode):
    reward = make_recording_reward()
    trainer = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=reward,
        args=tiny_args(tmp_path, per_device_train_batch_size=8, **mode),
        train_dataset=pass_rate_dataset([0.0, 0.5, 1.0, 0.3], repeat=4),
    )
    counter = GenerateCounter(trainer)
    logs = train(trainer)
    assert_counted(trainer, logs, counter.rows, counter.tokens)
    assert counter.rows == len(reward.log) == sum(h["sampling/total_samples"] for h in logs)  # one process: no padding
    assert counter.rows > sum(h["sampling/kept_samples"] for h in logs)  # the path did sample beyond the kept groups
    if "dynamic_sampling" in mode:
        assert sum(h["sampling/refill_batches"] for h in logs) > 0
    if "sampling_budget" in mode:
        assert sum(h["sampling/top_up_rounds"] for h in logs) > 0


def test_rollout_func_rows_and_model_tokens_are_counted(tiny_model, tmp_path):
    """A rollout_func's rows are completions; its tokens are those env_mask marks as the model's."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    returned = {"rows": 0, "model_tokens": 0}

    def rollout_func(prompts, trainer):
        prompt_ids = [
            tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
            for p in prompts
        ]
        completion_ids, env_mask = [], []
        for _ in prompts:
            answer = tokenizer.encode("1" * int(torch.randint(1, 4, ()).item()), add_special_tokens=False)
            env = tokenizer.encode("ok", add_special_tokens=False)[:2]  # written by the environment, not the model
            completion_ids.append(answer + env + [tokenizer.eos_token_id])
            env_mask.append([1] * len(answer) + [0] * len(env) + [1])
        returned["rows"] += len(prompts)
        returned["model_tokens"] += sum(map(sum, env_mask))
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "env_mask": env_mask}

    def reward(completions, **kwargs):
        return [float(len(c[0]["content"]) % 2) for c in completions]

    trainer = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=reward,
        rollout_func=rollout_func,
        args=tiny_args(tmp_path, per_device_train_batch_size=8),
        train_dataset=pass_rate_dataset([0.5], repeat=16),
    )
    logs = train(trainer)
    assert_counted(trainer, logs, returned["rows"], returned["model_tokens"])
    assert returned["rows"] == sum(h["sampling/total_samples"] for h in logs)


def test_tool_loop_counts_a_sample_once_and_every_model_turn_s_tokens(tmp_path):
    """With tools a sample is one completion, however many turns; its tokens are those of every model turn as
    written (the scripted policy writes each turn: its rows are turns), tool results left out, and a last turn TRL
    cuts at max_completion_length in full."""
    from tests.helpers.tool_policy import product_reward
    from tests.integration.test_rollouts import counted_tool_run
    from trl_ada.examples.tiny import build_tiny_model

    model = build_tiny_model(str(tmp_path / "tool-model"), tools=True)
    scored = []

    def reward(completions, **kwargs):
        scored.extend(completions)
        return product_reward(completions, **kwargs)

    trainer, policy = counted_tool_run(AdaGRPOTrainer, model, reward, tmp_path)
    counter = GenerateCounter(trainer)
    logs = train(trainer)
    assert policy.tool_calls > 0 and counter.rows > len(scored)  # some samples took a second turn
    assert_counted(trainer, logs, len(scored), counter.tokens)
    assert len(scored) == sum(h["sampling/total_samples"] for h in logs)
    # TRL's completion lengths (model tokens it kept) are never more: a second turn that ran past
    # max_completion_length=96 is counted in full (whether one does depends on the transformers release)
    kept = sum(h["completions/mean_length"] * h["sampling/total_samples"] for h in logs)
    assert counter.tokens >= kept - 0.5


def test_vllm_colocate_and_pipelined_rounds_count_every_sample(tiny_model, tmp_path, monkeypatch):
    """On the stand-in colocated engine (tests/helpers/standin_engine.py): the synchronous rounds through TRL's vLLM
    `generate`, and the pipelined rounds, which never call `_generate`: every finished sample, the speculative ones
    discarded too, and the tokens of the aborted requests."""
    from trl.generation import vllm_generation

    from tests.helpers.standin_engine import install

    monkeypatch.setattr(vllm_generation, "SamplingParams", lambda **kwargs: kwargs, raising=False)

    def run(pipelined):
        trainer = AdaGRPOTrainer(
            model=tiny_model,
            reward_funcs=make_recording_reward(),
            args=tiny_args(tmp_path / f"pipelined-{pipelined}", per_device_train_batch_size=16),
            train_dataset=pass_rate_dataset([0.0, 0.5, 0.3, 1.0]),
        )
        llm = install(trainer, capacity=48)
        seen = {"rows": 0, "tokens": 0, "aborted_tokens": 0}
        generate, open_stream = llm.generate, trainer.vllm_generation.open_stream

        def counting_generate(prompts, sampling_params, use_tqdm=False):
            outputs = generate(prompts, sampling_params, use_tqdm)
            seen["rows"] += len(outputs)
            seen["tokens"] += sum(len(o.outputs[0].token_ids) for o in outputs)
            return outputs

        def counting_stream(prompt_ids):
            stream = open_stream(prompt_ids)
            take = stream.take

            def counting_take(requests):
                tokens, logprobs = take(requests)
                seen["rows"] += len(tokens)
                seen["tokens"] += sum(map(len, tokens))
                return tokens, logprobs

            stream.take = counting_take
            return stream

        llm.generate, trainer.vllm_generation.open_stream = counting_generate, counting_stream
        trainer.args.pipelined_rounds = pipelined  # after construction: use_vllm=True would start a real engine
        trainer.args.pipelined_speculation = pipelined
        logs = train(trainer)
        aborted = sum(len(s.aborted) for s in llm.streams)
        return trainer, logs, seen["rows"], seen["tokens"] + sum(s.aborted_tokens for s in llm.streams), aborted

    sync, sync_logs, rows, tokens, _ = run(False)
    assert_counted(sync, sync_logs, rows, tokens)
    assert rows == sum(h["sampling/total_samples"] for h in sync_logs)

    piped, logs, rows, tokens, aborted = run(True)
    assert_counted(piped, logs, rows, tokens)
    wasted = sum(h["sampling/pipelined/wasted_samples"] for h in logs)
    assert wasted > 0  # speculative samples whose round never happened: their cost is counted all the same
    # an aborted request returned no completion (its tokens count): every other sample generated is one
    assert rows == sum(h["sampling/total_samples"] for h in logs) - aborted
    assert rows == sync.generation_count.completions + wasted - aborted  # the synchronous run's pools, and the rest


def test_counts_are_summed_over_processes_and_survive_a_checkpoint():
    """`flush` sums every process's pending counts (gather, as TRL gathers), and restarts them from 0."""
    from types import SimpleNamespace

    count = GenerationCount()
    count.add(completions=2, tokens=model_tokens([[1, 2, 3], [4]]))
    count.add(completions=1, tokens=model_tokens([[5, 6, 7, 8]], [[1, 0, 0, 1]]))
    count.add(tokens=5)
    count.add(trained_tokens=3)
    fake = SimpleNamespace(device="cpu", gather=lambda t: torch.cat([t, torch.tensor([[10, 100, 7]])]))  # 2 processes
    count.flush(fake)
    assert count.metrics() == {
        COMPLETIONS_METRIC: 3 + 10,
        TOKENS_METRIC: 4 + 2 + 5 + 100,
        TRAINED_TOKENS_METRIC: 3 + 7,
        GENERATION_SECONDS_METRIC: 0.0,  # nothing generated inside `timed`
    }
    count.flush(fake)  # nothing pending here: only the other process's
    assert (count.completions, count.tokens) == (23, 211)
    with count.timed():
        time.sleep(0.01)
    again = GenerationCount()
    again.load_state_dict(json.loads(json.dumps(count.state_dict())))
    assert again.state_dict() == count.state_dict()
    assert count.state_dict() == {"completions": 23, "tokens": 211, "trained_tokens": 17, "seconds": count.seconds}
    assert count.seconds >= 0.01


@pytest.mark.parametrize(
    "sampler",
    [
        dict(multiround_adaptive_downsampling=False),
        dict(reinforce_ada_choice="balanced", round_repeat=4, max_rounds=2),
        dict(reinforce_ada_est=True),
    ],
    ids=["grpo", "balanced", "est"],
)
def test_trained_tokens_are_the_completion_tokens_of_every_training_batch(tiny_model, tmp_path, sampler):
    class Batches(AdaGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            self.trained = getattr(self, "trained", 0) + int(output["completion_mask"].sum())
            return output

    reward = make_recording_reward()
    trainer = Batches(
        model=tiny_model,
        reward_funcs=reward,
        train_dataset=pass_rate_dataset([0.5, 0.2]),
        args=tiny_args(tmp_path, per_device_train_batch_size=8, max_steps=2, **sampler),
    )
    trainer.train()
    last = [h for h in trainer.state.log_history if TRAINED_TOKENS_METRIC in h][-1]
    assert last[TRAINED_TOKENS_METRIC] == trainer.trained > 0  # the loss's completion tokens, every batch
    if not sampler.get("reinforce_ada_choice") and not sampler.get("reinforce_ada_est"):
        assert last[TRAINED_TOKENS_METRIC] == last[TOKENS_METRIC]  # GRPO trains on every token it generates
    else:
        assert last[TRAINED_TOKENS_METRIC] <= last[TOKENS_METRIC]
