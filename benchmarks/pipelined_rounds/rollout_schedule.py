"""Barrier-free rounds in simulation: generation time of one sampling step, synchronous vs pipelined (issue 23, 5a).

    python benchmarks/pipelined_rounds/rollout_schedule.py                      # default engine curve, lengths and pass rates
    python benchmarks/pipelined_rounds/rollout_schedule.py --step_time_curve curve.json   # a measured curve: [[running, seconds], ...]
    python benchmarks/pipelined_rounds/rollout_schedule.py --step_time_curve benchmarks/pipelined_rounds/rollout_real.json  # the curve rollout_real.py
                                                                         # measured on the engine present

A discrete-event simulation that drives the project's own samplers, not a model of them: the synchronous rounds are
`trl_ada.core.sampling.run_adaptive_sampling` (a round is a batch that ends when its last sample ends) and the pipelined
ones are `trl_ada.core.pipelined.run_pipelined_sampling` (each prompt resamples as soon as its own round is scored), both
against `SimulatedEngine`: every running sequence decodes one token per engine step, a step takes
`step_time(running sequences)` seconds, at most `--max_num_seqs` run at once (first come, first served). Completion
lengths are lognormal (median `--median_tokens`, p99 `--p99_ratio` x the median, capped at `--max_tokens`), pass rates
U-shaped (Beta(0.3, 0.3)), rewards fixed per (prompt, sample slot), so both drivers see the same samples and must
return the same groups (checked on every run). GRPO n=4 is one synchronous round of 4 on the same engine.

Prints a table (generation time per step as a ratio to GRPO n=4; mean over `--seeds`), writes `--json` and `--plot`.
What the ratios mean depends on the engine curve: the deciding unknown is how step time grows with running sequences
(flat on a GPU at these sizes, steep on a throughput-bound CPU); measure it on your engine and pass it in.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository

from trl_ada.cli.plotting import save  # noqa: E402
from trl_ada.core.pipelined import run_pipelined_sampling  # noqa: E402
from trl_ada.core.sampling import EliminationRule, run_adaptive_sampling  # noqa: E402


HERE = os.path.dirname(os.path.abspath(__file__))
SCHEDULES = ("synchronous", "pipelined", "pipelined + certain continuation", "+ speculative round")


def linear_curve(points):
    """Step time against running sequences, linear between the given points and flat beyond them."""
    points = sorted(points)

    def step_time(running: int) -> float:
        if running <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if running <= x1:
                return y0 + (y1 - y0) * (running - x0) / (x1 - x0)
        return points[-1][1]

    return step_time


class SimulatedEngine:
    """The `trl_ada.core.pipelined.Engine` protocol on a simulated clock; `poll` jumps to the next finishing sequence (the
    set of running sequences, hence the step time, is constant in between)."""

    def __init__(self, lengths, step_time, max_num_seqs):
        self.lengths, self.step_time, self.max_num_seqs = lengths, step_time, max_num_seqs
        self.clock, self.tokens, self.steps = 0.0, 0, 0
        self.left: dict[tuple[int, int], int] = {}  # running request -> tokens still to decode

    def submit(self, requests):
        for request in requests:
            self.left[request] = self.lengths(*request)
            self.tokens += self.left[request]

    def abort(self, requests):
        for request in requests:
            self.tokens -= self.left.pop(request)

    def free_slots(self):
        return self.max_num_seqs - len(self.left)

    def poll(self):
        if not self.left:
            return []
        skip = min(self.left.values())
        self.clock += skip * self.step_time(len(self.left))
        self.steps += skip
        self.left = {request: left - skip for request, left in self.left.items()}
        done = sorted(request for request, left in self.left.items() if left == 0)
        for request in done:
            del self.left[request]
        return done


def synchronous_round(engine, active, k, drawn, reward):
    """One synchronous round: every sample of every active prompt, admitted as slots free up; ends with the last."""
    queue = [(p, drawn[p] + j) for p in active for j in range(k)]
    finished = {}
    while queue or engine.left:
        admitted, queue = queue[: engine.free_slots()], queue[engine.free_slots() :]
        engine.submit(admitted)
        for request in engine.poll():
            finished[request] = reward(*request)
    out = [[finished[(p, drawn[p] + j)] for j in range(k)] for p in active]
    for p in active:
        drawn[p] += k
    return out


def one_step(args, seed, step_time):
    rng = random.Random(seed)
    pass_rate = [rng.betavariate(0.3, 0.3) for _ in range(args.prompts)]
    sigma = math.log(args.p99_ratio) / 2.326  # p99 of a lognormal is median * exp(2.326 sigma)
    slots = args.round_repeat * args.max_rounds
    lengths = {
        (p, s): max(1, min(args.max_tokens, round(rng.lognormvariate(math.log(args.median_tokens), sigma))))
        for p in range(args.prompts)
        for s in range(slots)
    }
    rewards = {(p, s): float(rng.random() < pass_rate[p]) for p in range(args.prompts) for s in range(slots)}

    def engine():
        return SimulatedEngine(lambda p, s: lengths[(p, s)], step_time, args.max_num_seqs)

    def run_sync(rule):
        sim, drawn = engine(), [0] * args.prompts
        results = run_adaptive_sampling(
            args.prompts,
            lambda active, k: synchronous_round(sim, active, k, drawn, lambda p, s: rewards[(p, s)]),
            rule,
        )
        return results, sim

    grpo, grpo_engine = run_sync(EliminationRule(num_generations=4, round_repeat=4, max_rounds=1))
    row = {"grpo_n4": {"seconds": grpo_engine.clock, "tokens": grpo_engine.tokens}}
    for choice in ("positive_focused", "balanced"):
        rule = EliminationRule(4, args.round_repeat, args.max_rounds, choice)
        reference, sim = run_sync(rule)
        row[f"{choice} synchronous"] = {"seconds": sim.clock, "tokens": sim.tokens}
        for name, certain, speculative in zip(SCHEDULES[1:], (False, True, True), (False, False, True)):
            sim = engine()
            out = run_pipelined_sampling(
                args.prompts,
                sim,
                lambda done: [rewards[r] for r in done],
                rule,
                max_running=args.max_num_seqs,
                certain_continuation=certain,
                speculative=speculative,
            )
            assert out.results == reference, "the pipelined driver must select exactly what the synchronous one does"
            row[f"{choice} {name}"] = {
                "seconds": sim.clock,
                "tokens": sim.tokens,
                "wasted_samples": out.stats.wasted_samples,
            }
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=64, help="prompts per step (one rank)")
    parser.add_argument("--round_repeat", type=int, default=8)
    parser.add_argument("--max_rounds", type=int, default=4)
    parser.add_argument("--median_tokens", type=float, default=600)
    parser.add_argument("--p99_ratio", type=float, default=4.0, help="p99 completion length / median")
    parser.add_argument("--max_tokens", type=int, default=2048, help="completion cap")
    parser.add_argument("--max_num_seqs", type=int, default=256, help="engine capacity (vLLM max_num_seqs)")
    parser.add_argument(
        "--step_time_curve",
        default=None,
        help="JSON file [[running, seconds], ...] or a rollout_real.py result (its step_time_curve); "
        "default: 20 ms + 0.02 ms per running sequence",
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--json", default=os.path.join(HERE, "rollout_schedule.json"))
    parser.add_argument("--plot", default=os.path.join(HERE, "rollout_schedule.png"))
    args = parser.parse_args(argv)

    if args.step_time_curve:
        with open(args.step_time_curve) as f:
            loaded = json.load(f)
        curve = [tuple(point) for point in (loaded["step_time_curve"] if isinstance(loaded, dict) else loaded)]
    else:
        curve = [(1, 0.02002), (1024, 0.02 + 0.00002 * 1024)]
    step_time = linear_curve(curve)
    rows = [one_step(args, seed, step_time) for seed in range(args.seeds)]
    summary = {}
    for choice in ("positive_focused", "balanced"):
        for schedule in SCHEDULES:
            key = f"{choice} {schedule}"
            summary[key] = {
                "time_ratio_to_grpo": statistics.mean(r[key]["seconds"] / r["grpo_n4"]["seconds"] for r in rows),
                "token_ratio_to_grpo": statistics.mean(r[key]["tokens"] / r["grpo_n4"]["tokens"] for r in rows),
                "vs_synchronous": statistics.mean(
                    r[key]["seconds"] / r[f"{choice} synchronous"]["seconds"] - 1 for r in rows
                ),
            }

    print(
        f"\n### Generation time of one step, ratio to GRPO n=4 ({args.prompts} prompts, M={args.round_repeat}, "
        f"R={args.max_rounds}, lengths median {args.median_tokens:.0f}, p99 {args.p99_ratio:g}x, cap "
        f"{args.max_tokens}, max_num_seqs {args.max_num_seqs}; mean of {args.seeds} seeds; simulation)\n"
    )
    speculative = SCHEDULES[-1]
    print("| choice | " + " | ".join(SCHEDULES) + " | generated tokens vs GRPO | with speculation |")
    print("|---|" + "---:|" * (len(SCHEDULES) + 2))
    for choice in ("positive_focused", "balanced"):
        cells = [
            f"{summary[f'{choice} {s}']['time_ratio_to_grpo']:.2f} ({100 * summary[f'{choice} {s}']['vs_synchronous']:+.0f}%)"
            for s in SCHEDULES
        ]
        tokens = [summary[f"{choice} {s}"]["token_ratio_to_grpo"] for s in ("synchronous", speculative)]
        print(
            f"| {choice} | " + " | ".join(cells) + f" | {tokens[0]:.2f}x | {tokens[1]:.2f}x "
            f"({100 * (tokens[1] / tokens[0] - 1):+.0f}%) |"
        )

    with open(args.json, "w") as f:
        json.dump(
            {
                "settings": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
                "step_time_curve": curve,
                "summary": summary,
                "runs": rows,
            },
            f,
            indent=1,
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=90)
    width = 0.2
    for i, schedule in enumerate(SCHEDULES):
        ys = [summary[f"{c} {schedule}"]["time_ratio_to_grpo"] for c in ("positive_focused", "balanced")]
        ax.bar([x + (i - 1.5) * width for x in range(2)], ys, width, label=schedule)
    ax.set_xticks(range(2), ["positive_focused", "balanced"])
    ax.set_ylabel("generation time / GRPO n=4")
    ax.legend(fontsize=7)
    ax.set_title("One sampling step, simulated engine", fontsize=9)
    save(fig, args.plot)
    print(f"\njson: {args.json}  plot: {args.plot}")
    return summary


if __name__ == "__main__":
    main()
