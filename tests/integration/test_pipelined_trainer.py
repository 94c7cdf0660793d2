"""`AdaGRPOConfig(pipelined_rounds=True)` in the real trainer, over a deterministic stand-in engine (no vLLM needed).

The stand-in (tests/helpers/standin_engine.py) makes a sample a function of (prompt, slot, weight version), and its stream
finishes requests in a seeded random order. The synchronous rounds and the pipelined ones then draw the same samples,
so everything TRL trains on must be identical: completions, rewards, advantages, losses. The 2-process run (ranks
finishing apart) is in tests/integration/test_multiprocess.py; the real engine in tests/integration/test_vllm_stream.py.
"""

import pytest
from trl.generation import vllm_generation

from tests.helpers.data import make_recording_reward, pass_rate_dataset
from tests.helpers.standin_engine import install
from tests.helpers.trainers import Recorder, tiny_args


pytestmark = pytest.mark.slow


def run(tiny_model, tmp_path, pipelined, speculative=False, capacity=12, **kwargs):
    reward = make_recording_reward()
    args = tiny_args(
        tmp_path / f"pipelined-{pipelined}-{speculative}", per_device_train_batch_size=16, max_steps=3, **kwargs
    )
    trainer = Recorder(
        model=tiny_model, reward_funcs=reward, args=args, train_dataset=pass_rate_dataset([0.0, 0.5, 0.3, 1.0])
    )
    trainer.reward_log = reward.log
    llm = install(trainer, capacity=capacity)
    # Set after construction: with use_vllm=True the config would start a real engine (its checks: test_config.py).
    trainer.args.pipelined_rounds = pipelined
    trainer.args.pipelined_speculation = speculative
    trainer.train()
    return trainer, reward, llm


@pytest.mark.parametrize(
    "mode",
    [
        {"reinforce_ada_choice": "balanced"},
        {"reinforce_ada_choice": "positive_focused"},
        {"dynamic_sampling": True},
        {"pool_selection": "random"},
    ],
    ids=["balanced", "positive_focused", "dynamic", "random"],
)
def test_pipelined_rounds_train_exactly_like_the_synchronous_ones(tiny_model, tmp_path, monkeypatch, mode):
    monkeypatch.setattr(vllm_generation, "SamplingParams", lambda **kwargs: kwargs, raising=False)
    sync, sync_reward, sync_llm = run(tiny_model, tmp_path, False, **mode)
    piped, piped_reward, piped_llm = run(tiny_model, tmp_path, True, **mode)

    assert sync_llm.generate_calls > 0 and piped_llm.generate_calls == 0  # the pipelined run never used generate
    assert len(piped_llm.streams) >= 3 and all(s.closed and not s.running for s in piped_llm.streams)
    assert any(s.polls > s.max_seen for s in piped_llm.streams)  # finishing in dribs: not one batch per poll
    # Every sample scored once, the same samples (in another order).
    assert sorted(piped_reward.log) == sorted(sync_reward.log)
    for (_, a), (_, b) in zip(sync.recorded, piped.recorded, strict=True):
        assert a["completion_ids"].tolist() == b["completion_ids"].tolist()
        assert a["advantages"].tolist() == b["advantages"].tolist()
        assert a["sampling_per_token_logps"].tolist() == b["sampling_per_token_logps"].tolist()
    # TRL's generation metrics too (lengths, clipped ratio, tokens seen), which the pipelined rounds log per round as
    # GRPOTrainer's `_generate` logs them per call.
    history = [
        [
            {
                k: v
                for k, v in h.items()
                if k.startswith(("loss", "reward", "sampling/rounds", "sampling/total", "completions/", "num_tokens"))
            }
            for h in t.state.log_history
            if "loss" in h
        ]
        for t in (sync, piped)
    ]
    assert all("completions/mean_length" in h and h["num_tokens"] > 0 for h in history[1])
    assert piped.state.num_input_tokens_seen == sync.state.num_input_tokens_seen > 0
    assert history[0] == history[1] and len(history[0]) == 3
    logs = [h for h in piped.state.log_history if "loss" in h]
    assert all(h["sampling/pipelined/engine_steps"] > 0 and h["sampling/pipelined/max_running"] <= 12 for h in logs)
    if mode.get("reinforce_ada_choice") == "balanced":  # the 0.0 prompt's rounds overlap: certain continuation
        assert sum(h["sampling/pipelined/early_samples"] for h in logs) > 0


def test_speculative_rounds_train_exactly_like_the_synchronous_ones(tiny_model, tmp_path, monkeypatch):
    """Speculation changes what the engine runs, never what is trained: its discarded samples leave no trace but the
    wasted-sample metrics and the generated count."""
    monkeypatch.setattr(vllm_generation, "SamplingParams", lambda **kwargs: kwargs, raising=False)
    sync, sync_reward, _ = run(tiny_model, tmp_path, False)
    # 4 prompts x 8 certain samples leave 16 of 48 slots idle at the start: speculation gets two prompts' round 2
    piped, piped_reward, piped_llm = run(tiny_model, tmp_path, True, speculative=True, capacity=48)

    for (_, a), (_, b) in zip(sync.recorded, piped.recorded, strict=True):
        assert a["completion_ids"].tolist() == b["completion_ids"].tolist()
        assert a["advantages"].tolist() == b["advantages"].tolist()
    logs = [[h for h in t.state.log_history if "loss" in h] for t in (sync, piped)]
    keys = ("loss", "reward", "sampling/rounds_mean", "sampling/kept_samples", "sampling/iid_reward")
    assert [{k: h[k] for k in keys} for h in logs[0]] == [{k: h[k] for k in keys} for h in logs[1]]
    speculative = sum(h["sampling/pipelined/speculative_samples"] for h in logs[1])
    wasted = [h["sampling/pipelined/wasted_samples"] for h in logs[1]]
    assert speculative > 0 and sum(wasted) > 0  # mixed prompts retire with a speculative round issued
    assert sum(h["sampling/pipelined/wasted_tokens"] for h in logs[1]) > 0
    # generated = pools + wasted; the pools are the synchronous run's
    assert [h["sampling/total_samples"] for h in logs[1]] == [
        h["sampling/total_samples"] + w for h, w in zip(logs[0], wasted)
    ]
    # every sample scored once: the synchronous run's, plus the speculative samples that finished and were discarded
    extra = list(piped_reward.log)
    for entry in sync_reward.log:
        extra.remove(entry)
    aborted = sum(len(s.aborted) for s in piped_llm.streams)
    assert len(extra) == sum(wasted) - aborted
    assert all(s.closed and not s.running for s in piped_llm.streams)
