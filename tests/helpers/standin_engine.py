"""A deterministic stand-in for the colocated vLLM engine, for pipelined-rounds tests without vLLM installed.

The completion of a sample is a function of (prompt token ids, slot, weight version) only: the synchronous rounds
(`LLM.generate`, slot = how many samples of that prompt the step has asked for so far) and the pipelined ones (a
stream that finishes requests in a seeded random order, some polls finishing nothing) then draw the very same
samples, so the two runs must train identically. The weight version counts pushes (`reload_weights`), so every step
samples anew, as after a real push. Everything above the engine is real: TRL's `VLLMGeneration`, trl-ada's weight
push, the trainer's rounds.
"""

import random
import zlib
from types import SimpleNamespace

import torch

from trl_ada.integration.vllm_backend import ReloadingVLLMGeneration


def completion_for(prompt_ids, slot, version, vocab_size, eos):
    rng = random.Random(zlib.crc32(repr((list(prompt_ids), slot, version)).encode()))
    return [rng.randrange(3, vocab_size) for _ in range(rng.randint(1, 6))] + [eos]


def logprobs_for(tokens):
    return [-0.1 - (t % 7) / 10 for t in tokens]


def driver_engine(reload_weights):
    """vLLM's `llm_engine` as trl-ada's weight push reaches it: one driver worker whose model has no tied layers
    (nothing to process again after a reload)."""
    model = torch.nn.Module()
    worker = SimpleNamespace(reload_weights=reload_weights, model_runner=SimpleNamespace(get_model=lambda: model))
    return SimpleNamespace(model_executor=SimpleNamespace(driver_worker=worker))


def request_output(prompt_ids, tokens, logprobs):
    """What `LLM.generate` returns for one prompt: one completion, each token with its log-prob at rank 1."""
    ranked = [{t: SimpleNamespace(rank=1, logprob=lp)} for t, lp in zip(tokens, logprobs)]
    return SimpleNamespace(prompt_token_ids=prompt_ids, outputs=[SimpleNamespace(token_ids=tokens, logprobs=ranked)])


class DeterministicLLM:
    def __init__(self, vocab_size, eos_token_id):
        self.vocab_size, self.eos = vocab_size, eos_token_id
        self.version, self.issued, self.generate_calls = 0, {}, 0
        self.llm_engine = driver_engine(self.reload_weights)

    def reload_weights(self, weights_iterator, is_checkpoint_format):
        assert len(list(weights_iterator)) > 0
        self.version += 1
        self.issued = {}  # slots count from 0 again after every push (one push per step)

    def wake_up(self, tags):
        pass

    def sleep(self, level):
        pass

    def reset_prefix_cache(self):
        pass

    def complete(self, prompt_ids, slot):
        return completion_for(prompt_ids, slot, self.version, self.vocab_size, self.eos)

    def generate(self, prompts, sampling_params, use_tqdm=False):
        self.generate_calls += 1
        outputs = []
        for prompt in prompts:
            ids = tuple(prompt["prompt_token_ids"])
            slot = self.issued.get(ids, 0)
            self.issued[ids] = slot + 1
            tokens = self.complete(ids, slot)
            outputs.append(request_output(list(ids), tokens, logprobs_for(tokens)))
        return outputs


class StandInStream:
    """`trl_ada.core.pipelined.Engine` plus `take`, finishing running requests in a seeded random order; `pace` is the
    chance that a running request finishes at a poll (a slow rank has a small one)."""

    def __init__(self, llm, prompt_ids, seed, capacity=12, pace=0.5):
        self.llm, self.prompt_ids, self.capacity, self.pace = llm, prompt_ids, capacity, pace
        self.rng = random.Random(seed)
        self.running, self.finished, self.max_seen, self.polls = [], {}, 0, 0
        self.closed, self.aborted_tokens, self.aborted = False, 0, []
        # Slots continue where the step's earlier samples of the same prompt text stopped, as `generate` counts
        # them (a refill batch may hold a prompt the step has already sampled).
        self.base = [llm.issued.get(tuple(ids), 0) for ids in prompt_ids]

    def submit(self, requests):
        assert len(self.running) + len(requests) <= self.capacity
        self.running += list(requests)
        self.max_seen = max(self.max_seen, len(self.running))
        for prompt, slot in requests:
            ids = tuple(self.prompt_ids[prompt])
            self.llm.issued[ids] = max(self.llm.issued.get(ids, 0), self.base[prompt] + slot + 1)

    def abort(self, requests):
        self.aborted += [r for r in self.running if r in requests]
        self.running = [r for r in self.running if r not in requests]
        self.aborted_tokens += 2 * len(requests)  # a stand-in figure: what matters is that the trainer logs it

    def poll(self):
        self.polls += 1
        done = [r for r in self.running if self.rng.random() < self.pace]
        self.running = [r for r in self.running if r not in done]
        self.rng.shuffle(done)
        for prompt, slot in done:
            self.finished[(prompt, slot)] = self.llm.complete(self.prompt_ids[prompt], self.base[prompt] + slot)
        return done

    def free_slots(self):
        return self.capacity - len(self.running)

    def take(self, requests):
        tokens = [self.finished.pop(r) for r in requests]
        return tokens, [logprobs_for(t) for t in tokens]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.running.clear()
        self.closed = True


def backend(trainer, mode="colocate", sleep_mode=False, **engine):
    """The backend AdaGRPOTrainer builds (TRL's class and methods, trl-ada's weight push), its attributes set as its
    __init__ would; `engine` is what it generates with: `llm=` in colocate mode, `vllm_client=` in server mode."""
    generation = object.__new__(ReloadingVLLMGeneration)
    generation.__dict__.update(
        model=trainer.model,
        accelerator=trainer.accelerator,
        processing_class=trainer.processing_class,
        mode=mode,
        tensor_parallel_size=1,
        enable_sleep_mode=sleep_mode,
        _llm_weights_sleeping=sleep_mode,
        structured_outputs_regex=None,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        max_completion_length=8,
        logprobs=0,
        generation_kwargs={},
        _dist=trainer._dist,
        **engine,
    )
    return generation


def install(trainer, seed=0, pace=0.5, capacity=12):
    """Give `trainer` the colocated backend AdaGRPOTrainer builds (TRL's class, trl-ada's push) over a
    DeterministicLLM, and pipelined rounds over StandInStream. Returns the engine; opened streams are kept on it."""
    tokenizer = trainer.processing_class
    llm = DeterministicLLM(len(tokenizer), tokenizer.eos_token_id)
    generation = backend(trainer, llm=llm)
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, generation, -1
    llm.streams = []

    def open_stream(prompt_ids):
        stream = StandInStream(llm, prompt_ids, seed=seed + 1000 * len(llm.streams), pace=pace, capacity=capacity)
        llm.streams.append(stream)
        return stream

    generation.open_stream = open_stream
    return llm
