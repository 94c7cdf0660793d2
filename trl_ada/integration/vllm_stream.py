"""A colocated vLLM engine as the pipelined driver's `Engine`: one request per sample, stepped by hand.

`trl_ada.core.pipelined.run_pipelined_sampling` needs an engine that takes single samples and hands them back as they
finish. TRL's colocated backend (`vllm_generation.llm`, a `vllm.LLM`) only offers `generate`, which returns when the
whole batch is done. Under it sits the `LLMEngine` that `generate` itself drives; `VLLMStream` drives it directly:

- `submit`: one `add_request` per sample, n=1, from the prompt's token ids (as TRL's colocate branch sends them);
- `poll`: one `step()` (one forward pass of every running sequence); the finished samples come back, their output
  kept until `take` (FINAL_ONLY: no partial outputs to process);
- `abort`: `abort_request` for samples still running; `aborted_tokens` adds up the engine steps each one ran, a
  bound on the tokens it had decoded (a running sequence gains at most one token per step);
- `free_slots`: `max_num_seqs` minus the requests in flight, so the engine never queues what the driver could still
  reorder (later rounds first);
- `close` (and leaving the `with` block, on any exception too): abort whatever is still running and step until the
  engine holds nothing, so TRL's next `generate`, the weight push and sleep mode find it as `generate` leaves it.

The sampling parameters are TRL's colocate ones (`colocate_sampling_params`: n=1, temperature, top-p/k, min-p,
repetition penalty, max tokens, `logprobs`, `generation_kwargs`, structured outputs), and `take` returns the
completion ids and the sampled tokens' log-probs exactly as `GRPOTrainer._generate_single_turn` extracts them, so a
sample drawn here is indistinguishable from one drawn by `generate`. Request ids are unique per stream (a prefix
and a counter), so two streams or a stream and TRL's own calls never collide.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from trl_ada.core.pipelined import Request


__all__ = ["VLLMStream", "colocate_sampling_params"]

_streams = itertools.count()


def colocate_sampling_params(vllm_generation) -> Any:
    """The `vllm.SamplingParams` TRL's colocate branch of `VLLMGeneration.generate` builds."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    g = vllm_generation
    kwargs = {
        "n": 1,
        "repetition_penalty": g.repetition_penalty,
        "temperature": g.temperature,
        "top_p": g.top_p,
        "top_k": g.top_k,
        "min_p": 0.0 if g.min_p is None else g.min_p,
        "max_tokens": g.max_completion_length,
        "logprobs": g.logprobs,
    }
    kwargs.update(g.generation_kwargs)
    if g.structured_outputs_regex is not None:
        kwargs["structured_outputs"] = StructuredOutputsParams(regex=g.structured_outputs_regex)
    elif isinstance(kwargs.get("structured_outputs"), dict):
        kwargs["structured_outputs"] = StructuredOutputsParams(**kwargs["structured_outputs"])
    return SamplingParams(**kwargs)


class VLLMStream:
    """`trl_ada.core.pipelined.Engine` over a colocated `vllm.LLM`; see the module docstring.

    Args:
        llm: TRL's colocated engine (`trainer.vllm_generation.llm`); it must hold no request when the stream opens.
        prompt_ids: token ids of every prompt the driver may ask for, by prompt number.
        sampling_params: `colocate_sampling_params(trainer.vllm_generation)`; the stream uses a copy that returns
            each sample's output once, when it is finished (FINAL_ONLY).
        max_running: requests in flight at most (the engine's `max_num_seqs`).
    """

    def __init__(self, llm, prompt_ids: Sequence[Sequence[int]], sampling_params, max_running: int):
        from vllm.sampling_params import RequestOutputKind

        if sampling_params.n != 1:
            raise ValueError(
                f"sampling_params.n={sampling_params.n} (generation_kwargs?): a pipelined sample is one "
                "request of n=1."
            )
        self.engine = llm.llm_engine
        if self.engine.has_unfinished_requests():
            raise RuntimeError("VLLMStream: the vLLM engine already holds requests; a stream needs it to itself.")
        if max_running < 1:
            raise ValueError(f"max_running={max_running!r} must be >= 1.")
        self.prompt_ids, self.max_running = prompt_ids, max_running
        self.params = sampling_params.clone()
        self.params.output_kind = RequestOutputKind.FINAL_ONLY
        self._prefix = f"trl-ada-{next(_streams)}-"
        self._running: dict[str, Request] = {}  # request id -> (prompt, slot)
        self._ids: dict[Request, str] = {}
        self._finished: dict[Request, Any] = {}  # (prompt, slot) -> vllm.RequestOutput, until taken
        self._counter = itertools.count()
        self._submitted_at: dict[str, int] = {}  # request id -> engine steps taken before it was added
        self.steps = 0
        self.aborted_tokens = 0

    def submit(self, requests: Sequence[Request]) -> None:
        if len(self._running) + len(requests) > self.max_running:
            raise RuntimeError(f"VLLMStream: {len(requests)} more requests exceed max_running={self.max_running}.")
        for request in requests:
            if request in self._ids or request in self._finished:
                raise ValueError(f"VLLMStream: request {request} was submitted twice.")
            request_id = f"{self._prefix}{next(self._counter)}"
            prompt, _ = request
            self.engine.add_request(request_id, {"prompt_token_ids": list(self.prompt_ids[prompt])}, self.params)
            self._running[request_id] = request
            self._ids[request] = request_id
            self._submitted_at[request_id] = self.steps

    def abort(self, requests: Sequence[Request]) -> None:
        ids = [self._ids.pop(request) for request in requests if request in self._ids]
        for request_id in ids:
            del self._running[request_id]
            self.aborted_tokens += self.steps - self._submitted_at.pop(request_id)
        if ids:
            self.engine.abort_request(ids)

    def poll(self) -> list[Request]:
        finished = []
        for output in self.engine.step():
            request = self._running.pop(output.request_id, None)
            if request is None or not output.finished:
                continue  # not ours (cannot happen while the stream owns the engine) or FINAL_ONLY's no-op
            del self._ids[request]
            del self._submitted_at[output.request_id]
            self._finished[request] = output
            finished.append(request)
        self.steps += 1
        return finished

    def free_slots(self) -> int:
        return self.max_running - len(self._running)

    def take(self, requests: Sequence[Request]) -> tuple[list[list[int]], list[list[float]] | None]:
        """Completion ids and sampled-token log-probs of finished requests (as `_generate_single_turn` returns them)."""
        from trl.generation.vllm_generation import extract_logprobs

        outputs = [self._finished.pop(request) for request in requests]
        completion_ids = [list(output.outputs[0].token_ids) for output in outputs]
        logprobs, _ = extract_logprobs(outputs)
        if logprobs is None:
            return completion_ids, None
        return completion_ids, [[lp[0] for lp in seq] for seq in logprobs]

    def close(self) -> None:
        """Abort what is still running and step until the engine holds nothing (idempotent)."""
        if self._running:
            self.engine.abort_request(list(self._running))
            self._running.clear()
            self._ids.clear()
            self._submitted_at.clear()
        while self.engine.has_unfinished_requests():
            self.engine.step()
        self._finished.clear()

    def __enter__(self) -> VLLMStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def colocated_stream(generation, prompt_ids: list[list[int]]) -> VLLMStream:
    """This rank's colocated vLLM engine (TRL's `VLLMGeneration`) as a stream, one request per sample."""
    max_num_seqs = generation.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs
    return VLLMStream(generation.llm, prompt_ids, colocate_sampling_params(generation), max_num_seqs)
