"""Step time of AdaGRPOTrainer against GRPOTrainer on the tiny offline model, in one run, same machine.

    python benchmarks/step_cost/step_time.py [--steps 8] [--prompts 16]

Rows (all on the same prompts, same reward, same seed):
- `GRPOTrainer n=4` and `AdaGRPOTrainer, 1 round of M=n`: exactly the same generated and trained completions, so
  their ratio is the cost of the adaptive machinery itself (bookkeeping, the extra decode, the exchange);
- `AdaGRPOTrainer, reference (M=8, R=4)` against `GRPOTrainer n=8`, and the time per generated completion, since
  adaptive sampling generates a variable number of completions per step;
- the pure sampling core (`run_adaptive_sampling`) per 1000 prompts, with a free reward.
The reward is a cheap deterministic function of the text with per-prompt pass rates, to time the trainer, not the
reward. Prints a markdown table and writes benchmarks/step_cost/step_time.png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import zlib


os.environ.setdefault("WANDB_MODE", "disabled")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_ada import AdaGRPOConfig, AdaGRPOTrainer  # noqa: E402
from trl_ada.cli.plotting import save  # noqa: E402
from trl_ada.core.sampling import run_adaptive_sampling  # noqa: E402
from trl_ada.data import make_prompt  # noqa: E402
from trl_ada.examples.tiny import build_tiny_model  # noqa: E402


# What every timed run shares (gpu-kit/measure.py's too): nothing reported, saved or drawn on the terminal, a log per
# step (each holds its step_time), one seed and the prompts in order, so that rows differ only in what they choose.
TIMED_RUN = dict(
    report_to="none", save_strategy="no", logging_steps=1, seed=0, disable_tqdm=True, shuffle_dataset=False
)


def hash_reward(completions, pass_rate, **kwargs):
    return [float(zlib.crc32(c[0]["content"].encode()) % 1000 / 1000 < p) for c, p in zip(completions, pass_rate)]


def run(config_class, trainer_class, model, dataset, steps, **kwargs):
    with tempfile.TemporaryDirectory() as out:
        args = config_class(
            output_dir=out,
            max_steps=steps + 1,
            learning_rate=1e-4,
            max_completion_length=24,
            use_cpu=True,
            **TIMED_RUN,
            **kwargs,
        )
        trainer = trainer_class(model=model, reward_funcs=hash_reward, args=args, train_dataset=dataset)
        trainer.train()
    logs = [h for h in trainer.state.log_history if "step_time" in h][1:]  # the first step warms caches up
    generated = [h.get("sampling/total_samples", args.generation_batch_size) for h in logs]
    return statistics.median(h["step_time"] for h in logs), statistics.mean(generated)


def core_overhead(num_prompts=1000, repeats=5):
    rng = random.Random(0)
    rates = [rng.choice([0.0, 0.1, 0.5, 0.9, 1.0]) for _ in range(num_prompts)]

    def sample_round(active, k):
        return [[float(rng.random() < rates[p]) for _ in range(k)] for p in active]

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run_adaptive_sampling(num_prompts, sample_round)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per row (after one warm-up step)")
    parser.add_argument("--prompts", type=int, default=16, help="unique prompts per step")
    parser.add_argument("--plot", default=os.path.join(os.path.dirname(__file__), "step_time.png"))
    args = parser.parse_args(argv)

    model = build_tiny_model(os.path.join(tempfile.gettempdir(), "trl-ada-bench-tiny"))
    rates = [0.0, 0.1, 0.5, 0.9, 1.0, 0.3, 0.7, 0.05]
    dataset = Dataset.from_list(
        [
            {"prompt": make_prompt(f"Problem {i}."), "pass_rate": rates[i % len(rates)]}
            for i in range(args.prompts * (args.steps + 1))
        ]
    )
    p = args.prompts
    plans = [  # name, trainer, and its settings beyond the shared ones
        ("GRPOTrainer n=4", GRPOConfig, GRPOTrainer, dict(num_generations=4)),
        (
            "AdaGRPOTrainer, 1 round of M=n=4",
            AdaGRPOConfig,
            AdaGRPOTrainer,
            dict(num_generations=4, round_repeat=4, max_rounds=1),
        ),
        ("GRPOTrainer n=8", GRPOConfig, GRPOTrainer, dict(num_generations=8)),
        ("AdaGRPOTrainer, reference (n=4, M=8, R=4)", AdaGRPOConfig, AdaGRPOTrainer, dict(num_generations=4)),
    ]
    rows = []
    for name, config, trainer, fields in plans:
        batch = fields["num_generations"] * p
        timed = run(config, trainer, model, dataset, args.steps, per_device_train_batch_size=batch, **fields)
        rows.append((name, timed))
    core = core_overhead()

    print(f"\n{p} prompts per step, median of {args.steps} steps, tiny model on CPU ({os.cpu_count()} cores)\n")
    print("| trainer | step time (s) | generated / step | ms per generated completion |")
    print("|---|---|---|---|")
    for name, (seconds, generated) in rows:
        print(f"| {name} | {seconds:.3f} | {generated:.0f} | {1000 * seconds / generated:.2f} |")
    equal = rows[1][1][0] / rows[0][1][0]
    per_sample = (rows[3][1][0] / rows[3][1][1]) / (rows[2][1][0] / rows[2][1][1])
    print(f"\nequal work (Ada 1 round of n / GRPO n=4): step-time ratio {equal:.3f}")
    print(f"reference Ada vs GRPO n=8: time per generated completion ratio {per_sample:.3f}")
    print(f"sampling core alone: {1000 * core:.1f} ms per 1000 prompts (reference settings, free reward)")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 2.8), dpi=100)
    ax.barh([n for n, _ in rows], [1000 * s / g for _, (s, g) in rows], color=["#888", "#36c", "#888", "#36c"])
    ax.set_xlabel("ms per generated completion (median step)")
    ax.invert_yaxis()
    save(fig, args.plot)
    print(f"plot: {args.plot}")
    data = {
        "prompts_per_step": p,
        "steps": args.steps,
        "cpu_count": os.cpu_count(),
        "rows": [{"trainer": name, "step_seconds": s, "generated_per_step": g} for name, (s, g) in rows],
        "equal_work_step_time_ratio": equal,
        "reference_vs_grpo_n8_time_per_completion_ratio": per_sample,
        "sampling_core_ms_per_1000_prompts": 1000 * core,
    }
    data_path = os.path.splitext(args.plot)[0] + ".json"  # the numbers behind the plot, beside it
    with open(data_path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    print(f"data: {data_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
