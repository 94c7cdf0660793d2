"""The glue between the algorithm (`trl_ada.core`), the samplers (`trl_ada.samplers`) and TRL/vLLM; `trl_ada.trainer`
wires it into `GRPOTrainer`. No module here receives the trainer: each takes the values and functions it needs.

- `context`: the `SamplingContext` a sampler decides a generation batch with, and what the step keeps of it.
- `rollouts`: a step's bookkeeping, samples as TRL's rollout returns them, the step's metrics.
- `estimators`: the configured advantage estimator over a step's chosen prompts.
- `prompt_keys`: the prompt memory's key of a training row, and folding a step into the memory.
- `refill`: the training-set stream dynamic sampling and the budget draw replacements from.
- `resume`: the sampling state a checkpoint carries, and the memory export.
- `generation_count`: what training generated and trained on (cumulative, checkpointed).
- `seams`: the GRPOTrainer internals the trainer overrides, checked at start.
- `support`: early, named checks of the trainer's arguments, rewards and launch.
- `vllm_backend`, `vllm_stream`, `pipelined_rank`: the colocated vLLM engine, its request stream, and the
  pipelined rounds on one rank.
"""
