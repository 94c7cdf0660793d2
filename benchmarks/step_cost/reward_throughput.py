"""Throughput of the math reward: in-process `verify_answer` loop vs. the worker pool behind `boxed_math_reward`.

Measures, on typical completions (short reasoning ending in a boxed answer; integers, fractions, decimals, roots,
tuples, half of them wrong):

- completions scored per second, in this process (a `verify_answer` loop, no deadline) and through the pool;
- the wall time of a batch of 200 typical completions, alone and with 5 adversarial ones mixed in (two answers
  sympy would evaluate for hours, 10,000 nested braces, a megabyte of text, binary garbage). The in-process loop
  is not run on that batch: it would hang on the first of them.

    python benchmarks/step_cost/reward_throughput.py               # ~40 s on 2 CPU cores
    TRL_ADA_REWARD_WORKERS=8 python benchmarks/step_cost/reward_throughput.py

Prints a markdown table and writes benchmarks/step_cost/reward_throughput.png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

import matplotlib


matplotlib.use("Agg")  # headless: the figure goes to a file
import matplotlib.pyplot as plt  # noqa: E402

from trl_ada import rewards  # noqa: E402
from trl_ada.cli.plotting import save  # noqa: E402
from trl_ada.rewards import boxed_math_reward, verify_answer  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-completions", type=int, default=500, help="typical completions for the throughput")
    parser.add_argument("--batch-size", type=int, default=200, help="typical completions in the adversarial batch")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions (the median is reported)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=Path(__file__).with_name("reward_throughput.png"))
    return parser.parse_args(argv)


def typical_answer(rng: random.Random) -> tuple[str, str, str]:
    """(gold, right answer as a model might write it, a wrong answer)."""
    kind = rng.choice(["integer", "fraction", "decimal", "root", "tuple"])
    a, b = rng.randint(1, 99), rng.randint(2, 60)
    if kind == "integer":
        return str(a * b), str(a * b), str(a * b + rng.choice([-2, -1, 1, 10]))
    if kind == "fraction":
        return f"\\frac{{{a}}}{{{b}}}", rng.choice([f"\\dfrac{{{a}}}{{{b}}}", f"{a}/{b}"]), f"\\frac{{{a + 1}}}{{{b}}}"
    if kind == "decimal":
        return f"\\frac{{{a}}}{{4}}", str(a / 4), str(a / 4 + 0.5)
    if kind == "root":
        return f"{a}\\sqrt{{2}}", f"\\sqrt{{{2 * a * a}}}", f"{a}\\sqrt{{3}}"
    return f"({a}, {b})", f"({a},{b})", f"({b}, {a})"


def typical_batch(n: int, rng: random.Random) -> tuple[list[str], list[str]]:
    texts, golds = [], []
    for _ in range(n):
        gold, right, wrong = typical_answer(rng)
        answer = right if rng.random() < 0.5 else wrong
        steps = " ".join(f"Step {i}: we simplify and check the result." for i in range(rng.randint(3, 8)))
        texts.append(f"Let's think step by step. {steps} Therefore, the final answer is $\\boxed{{{answer}}}$.")
        golds.append(gold)
    return texts, golds


def adversarial_completions(rng: random.Random) -> list[str]:
    return [
        "So the answer is \\boxed{9^{9^{9^{9}}}}.",
        "So the answer is \\boxed{(10^{10})!}.",
        "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_001,
        "lorem ipsum " * 90_000 + "\\boxed{7}",
        rng.randbytes(100_000).decode("utf-8", errors="replace") + "\0" * 100,
    ]


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> None:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    texts, golds = typical_batch(args.num_completions, rng)
    workers = rewards._pool().size  # (internal) starts the workers, outside the timings
    timeout = rewards._positive_env(rewards.TIMEOUT_ENV, rewards.DEFAULT_TIMEOUT_S, float)
    verify_answer("\\boxed{1}", "1")  # in-process warm-up (lazy imports), like the workers' own

    in_process = [verify_answer(t, g) for t, g in zip(texts, golds)]
    pooled = boxed_math_reward(texts, answer=golds)
    assert in_process == pooled, "the pool and the in-process loop disagree"

    t_in = median_time(lambda: [verify_answer(t, g) for t, g in zip(texts, golds)], args.repeats)
    t_pool = median_time(lambda: boxed_math_reward(texts, answer=golds), args.repeats)

    batch_texts, batch_golds = typical_batch(args.batch_size, rng)
    t_batch = median_time(lambda: boxed_math_reward(batch_texts, answer=batch_golds), args.repeats)
    adversarial = adversarial_completions(rng)
    mixed = list(zip(batch_texts, batch_golds)) + [(t, "7") for t in adversarial]
    random.Random(args.seed).shuffle(mixed)
    metrics = {}
    start = time.perf_counter()
    boxed_math_reward([t for t, _ in mixed], answer=[g for _, g in mixed], log_metric=metrics.__setitem__)
    t_mixed = time.perf_counter() - start

    n = args.num_completions
    print(
        f"{os.cpu_count()} CPU cores, {workers} reward workers, deadline {timeout:g} s, "
        f"{sum(pooled) / n:.0%} of the typical completions right.\n"
    )
    print("| measurement | in-process `verify_answer` loop | pool (`boxed_math_reward`) |")
    print("|---|---|---|")
    print(f"| {n} typical completions, completions/s | {n / t_in:.0f} | {n / t_pool:.0f} |")
    print(f"| {args.batch_size} typical, wall s | {t_in * args.batch_size / n:.2f} (scaled) | {t_batch:.2f} |")
    print(
        f"| {args.batch_size} typical + {len(adversarial)} adversarial, wall s | hangs | {t_mixed:.2f} "
        f"({metrics['rewards/boxed_math/timeouts']:.0f} timeouts) |"
    )

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    left.bar(["in-process", f"pool ({workers} workers)"], [n / t_in, n / t_pool], color=["tab:gray", "tab:blue"])
    left.set_ylabel("completions / s")
    left.set_title(f"{n} typical completions")
    labels = [f"{args.batch_size} typical", f"+ {len(adversarial)} adversarial"]
    right.bar(labels, [t_batch, t_mixed], color=["tab:blue", "tab:red"])
    right.axhline(timeout, color="black", linestyle="--", linewidth=1, label=f"deadline ({timeout:g} s)")
    right.set_ylabel("wall time (s), pool")
    right.set_title("one batch")
    right.legend(loc="upper left")
    save(fig, args.output, dpi=120)
    print(f"\nwrote {args.output}")
    data = {  # the numbers behind the plot, beside it
        "cpu_count": os.cpu_count(),
        "reward_workers": workers,
        "deadline_seconds": timeout,
        "typical_completions": n,
        "in_process_completions_per_second": n / t_in,
        "pool_completions_per_second": n / t_pool,
        "batch_size": args.batch_size,
        "batch_wall_seconds": t_batch,
        "adversarial_completions": len(adversarial),
        "batch_with_adversarial_wall_seconds": t_mixed,
        "timeouts": metrics["rewards/boxed_math/timeouts"],
    }
    args.output.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.output.with_suffix('.json')}")


if __name__ == "__main__":
    main()
