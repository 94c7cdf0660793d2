"""Learning on the synthetic task: GRPOTrainer (n=4) against AdaGRPOTrainer pos and balance, 3 seeds each.

    python benchmarks/learning.py                  # 17 min on 2 CPU cores; not run in CI
    python benchmarks/learning.py --from_json benchmarks/learning.json   # tables and plot of a finished run

Every run starts from the demo's warm-started tiny model (`trl_ada.examples.warm_start.warm_start`, same steps and seed, cached
in <output_dir>/warm-model) and uses the demo's recipe (`recipes/tiny/ada_balance.yaml`): the same prompts per
step for a given seed (16 prompts of 64 kept completions), the same optimiser, loss and learning rate. The method
differs: the sampling and its advantage estimator.

- `grpo`: plain TRL `GRPOTrainer`, n=4 i.i.d. samples per prompt, group mean/std advantages;
- `ada_pos` / `ada_balance`: `AdaGRPOTrainer` with `reinforce_ada_choice` positive_focused / balanced (M=8, R=4)
  and pooled advantages.

The Ada runs go first; GRPO then trains on past the common step count until it has generated as many samples as
the most expensive Ada run, so the two can be compared at equal steps (GRPO at `--steps`), and at equal generated
samples or equal training wall time (GRPO later). Held-out accuracy (avg@k on fresh problems, the same seeded
sampling for every model) is measured every `--eval_every` steps inside the run; its time is not counted in the
wall time.

Reports, per method (mean and spread over seeds): the round-1 i.i.d. training reward (the mean reward of the first
round's samples, i.e. of the current policy before any selection: `reward` for GRPO, `sampling/iid_reward` for
Ada), the held-out accuracy, generated samples and wall time. Prints markdown tables and writes a plot with seed
bands (min-max over seeds) against steps and against generated samples.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

os.environ.setdefault("WANDB_MODE", "disabled")

import yaml  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_ada import AdaGRPOConfig, AdaGRPOTrainer  # noqa: E402
from trl_ada.examples.arithmetic import synthetic_arithmetic  # noqa: E402
from trl_ada.cli.demo import DEFAULT_RECIPE  # noqa: E402
from trl_ada.examples.warm_start import warm_start  # noqa: E402
from trl_ada.cli.evaluate import avg_at_k, evaluation_noise  # noqa: E402
from trl_ada.rewards import boxed_math_reward  # noqa: E402
from trl_ada.examples.tiny import build_tiny_model  # noqa: E402
from trl_ada.cli.train import ScriptArguments  # noqa: E402

METHODS = {"grpo": None, "ada_pos": "positive_focused", "ada_balance": "balanced"}
COLORS = {"grpo": "#777777", "ada_pos": "#d95f02", "ada_balance": "#1b63c6"}
SMOOTH = 10  # steps in the moving average of the (16-prompt, hence noisy) per-step training reward


def recipe_kwargs(path: str) -> tuple[dict, dict, dict]:
    """Split the recipe into script arguments, GRPOConfig fields and the fields only AdaGRPOConfig has (the model
    line, `tiny`, is ignored: every run starts from the warm-started model)."""
    with open(path) as f:
        recipe = yaml.safe_load(f)
    script_fields = set(ScriptArguments.__dataclass_fields__)
    grpo_fields = set(GRPOConfig.__dataclass_fields__)
    script = {k: v for k, v in recipe.items() if k in script_fields}
    shared = {k: v for k, v in recipe.items() if k in grpo_fields}
    ada = {k: v for k, v in recipe.items() if k in AdaGRPOConfig.__dataclass_fields__ and k not in grpo_fields}
    return script, shared, ada


class HeldOut(TrainerCallback):
    """avg@k on the held-out problems every `every` steps, without disturbing the run's random state; also the
    training wall clock at each step, evaluation time excluded."""

    def __init__(self, tokenizer, dataset, k, every, seed):
        self.tokenizer, self.dataset = tokenizer, dataset
        self.k, self.every, self.seed = k, every, seed
        self.points: list[tuple[int, float]] = []
        self.seconds = 0.0
        self.started = 0.0
        self.clock: list[float] = []

    def measure(self, model, step):
        start = time.time()
        with evaluation_noise(model, self.seed):
            accuracy = avg_at_k(model, self.tokenizer, self.dataset, k=self.k, max_new_tokens=24, batch_size=256)
        self.points.append((step, accuracy))
        self.seconds += time.time() - start
        print(f"[learning] step {step:4d}  held-out avg@{self.k} {100 * accuracy:.1f}%", flush=True)

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.time()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.clock.append(time.time() - self.started - self.seconds)
        if state.global_step % self.every == 0:
            self.measure(model, state.global_step)


def make_config(method, seed, steps, output_dir, shared, ada, learning_rate=None):
    """The run's config: the recipe's shared fields for every method, the Ada fields only for the Ada methods."""
    common = dict(shared, output_dir=output_dir, max_steps=steps, seed=seed, save_strategy="no",
                  logging_steps=1, report_to="none", disable_tqdm=True)
    if learning_rate is not None:
        common["learning_rate"] = learning_rate
    if METHODS[method] is None:
        return GRPOConfig(**common)
    return AdaGRPOConfig(**common, **dict(ada, reinforce_ada_choice=METHODS[method]))


def grpo_samples_per_step(shared):
    """Completions GRPOTrainer generates per optimiser step, in one process."""
    return shared["per_device_train_batch_size"] * shared.get("gradient_accumulation_steps", 1)


def train_one(method, seed, steps, warm, held_out, script, shared, ada, args):
    output_dir = os.path.join(args.output_dir, f"{method}-seed{seed}")
    config = make_config(method, seed, steps, output_dir, shared, ada, args.learning_rate)
    trainer_class = GRPOTrainer if METHODS[method] is None else AdaGRPOTrainer
    dataset = synthetic_arithmetic(script["synthetic_num_examples"], script["synthetic_difficulty"], seed)
    held = HeldOut(AutoTokenizer.from_pretrained(warm), held_out, args.eval_k, args.eval_every,
                   args.eval_seed)
    trainer = trainer_class(model=warm, reward_funcs=[boxed_math_reward], args=config, train_dataset=dataset,
                            callbacks=[held])
    trainer.remove_callback(PrinterCallback)  # one line per evaluation instead of every step's full log dict
    print(f"[learning] {method} seed {seed}: {steps} steps", flush=True)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "step_time" in h]
    if METHODS[method] is None:
        reward = [h["reward"] for h in logs]
        generated = [float(grpo_samples_per_step(shared))] * len(logs)
        signal = [1.0 - h["frac_reward_zero_std"] for h in logs]
    else:
        reward = [h["sampling/iid_reward"] for h in logs]
        generated = [h["sampling/total_samples"] for h in logs]
        signal = [h["sampling/effective_prompt_ratio"] for h in logs]
    return {"method": method, "seed": seed, "round1_reward": reward, "generated": generated, "signal": signal,
            "held_out": held.points, "wall_clock": held.clock}


def rounded(value, digits=5):
    """The results file stays small enough to commit: 5 decimals are finer than the noise."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def cumulative(values):
    total, out = 0.0, []
    for v in values:
        total += v
        out.append(total)
    return out


def smooth(values, window=SMOOTH):
    return [statistics.mean(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]


def interpolate(xs, ys, x):
    """Linear interpolation of y at x on an increasing xs; None outside the measured range."""
    if x < xs[0] or x > xs[-1]:
        return None
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


def progress(run, axis):
    """Where a run stood after each step: cumulative generated samples, or training seconds."""
    return cumulative(run["generated"]) if axis == "samples" else run["wall_clock"]


def held_out_at(run, axis, value):
    """Held-out accuracy of a run once it had reached `value` on the axis (interpolated between evaluations)."""
    position = progress(run, axis)
    xs = [0.0] + [position[step - 1] for step, _ in run["held_out"]]
    ys = [run["baseline"]] + [accuracy for _, accuracy in run["held_out"]]
    return interpolate(xs, ys, value)


def reward_at(run, axis, value, window=10):
    """Mean round-1 reward of the `window` steps ending where the run reached `value` on the axis."""
    position = progress(run, axis)
    end = next((i for i, x in enumerate(position) if x >= value), None)
    if end is None or end < window - 1:
        return None
    return statistics.mean(run["round1_reward"][end - window + 1 : end + 1])


def mean_spread(values):
    """Mean ± std over seeds, in percent; says how many seeds when some had no value."""
    given = len(values)
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    text = f"{100 * values[0]:.1f}%" if len(values) == 1 else (
        f"{100 * statistics.mean(values):.1f}% ± {100 * statistics.stdev(values):.1f}")
    return text if len(values) == given else f"{text} (n={len(values)})"


def per_seed(differences):
    """Seed-by-seed differences in points, and their mean."""
    shown = " / ".join("-" if d is None else f"{100 * d:+.1f}" for d in differences)
    known = [d for d in differences if d is not None]
    return f"{shown} (mean {100 * statistics.mean(known):+.1f})" if known else shown


def last_reward(run, steps, window=10):
    return statistics.mean(run["round1_reward"][max(0, steps - window) : steps])


def held_out_last(run, steps, count=1):
    """Mean held-out accuracy of the last `count` evaluations up to `steps` (one evaluation is noisy)."""
    points = [accuracy for step, accuracy in run["held_out"] if step <= steps][-count:]
    return statistics.mean(points) if len(points) == count else None


LAST_EVALS = 3


def report(runs, steps, warm_accuracy, k):
    by_method = {m: [r for r in runs if r["method"] == m] for m in METHODS}
    grpo_of = {r["seed"]: r for r in by_method["grpo"]}
    print(f"\n### Equal steps ({steps} steps, mean ± std over {len(by_method['grpo'])} seeds)\n")
    print(f"| method | round-1 reward, first 10 steps | round-1 reward, last 10 steps | held-out avg@{k} at step "
          f"{steps} | held-out, mean of the last {LAST_EVALS} evaluations | prompts with signal | generated samples | "
          "wall time (s) | s / step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| warm start (before RL) | | | {100 * warm_accuracy:.1f}% | | | | | |")
    for method, rs in by_method.items():
        first = [statistics.mean(r["round1_reward"][:10]) for r in rs]
        last = [last_reward(r, steps) for r in rs]
        held = [held_out_last(r, steps) for r in rs]
        held_last = [held_out_last(r, steps, LAST_EVALS) for r in rs]
        signal = [statistics.mean(r["signal"][:steps]) for r in rs]
        generated = [sum(r["generated"][:steps]) for r in rs]
        seconds = [r["wall_clock"][steps - 1] for r in rs]
        print(f"| {method} | {mean_spread(first)} | {mean_spread(last)} | {mean_spread(held)} | "
              f"{mean_spread(held_last)} | {mean_spread(signal)} | {statistics.mean(generated):.0f} | "
              f"{statistics.mean(seconds):.0f} | {statistics.mean(seconds) / steps:.2f} |")

    print(f"\n### Ada minus GRPO at equal steps, seed by seed (points; seeds {', '.join(str(seed) for seed in grpo_of)})\n")
    print(f"| method | round-1 reward, last 10 steps | held-out at step {steps} | held-out, mean of the last "
          f"{LAST_EVALS} evaluations |")
    print("|---|---|---|---|")
    for method in ("ada_pos", "ada_balance"):
        rs = by_method[method]

        def diff(metric):
            values = [(metric(r), metric(grpo_of[r["seed"]])) for r in rs]
            return per_seed([None if a is None or b is None else a - b for a, b in values])

        print(f"| {method} | {diff(lambda r: last_reward(r, steps))} | {diff(lambda r: held_out_last(r, steps))} | "
              f"{diff(lambda r: held_out_last(r, steps, LAST_EVALS))} |")

    print("\n### GRPO at the same cost (GRPO trained on past the common steps; compared with each Ada run's total at "
          f"step {steps}, seed by seed)\n")
    print(f"| method | matched on | Ada's total | Ada held-out avg@{k} | GRPO held-out at that total | Ada - GRPO, "
          "per seed | Ada round-1 reward, last 10 steps | GRPO round-1 reward, 10 steps up to that total | Ada - GRPO, "
          "per seed |")
    print("|---|---|---:|---:|---:|---|---:|---:|---|")
    for axis, unit in (("samples", "generated samples"), ("seconds", "training wall time (s)")):
        for method in ("ada_pos", "ada_balance"):
            own, grpo_held, own_reward, grpo_reward, totals = [], [], [], [], []
            for r in by_method[method]:
                grpo = grpo_of[r["seed"]]
                total = progress(r, axis)[steps - 1]
                totals.append(total)
                own.append(held_out_last(r, steps))
                grpo_held.append(held_out_at(grpo, axis, total))
                own_reward.append(last_reward(r, steps))
                grpo_reward.append(reward_at(grpo, axis, total))
            held_diff = [None if None in (a, b) else a - b for a, b in zip(own, grpo_held)]
            reward_diff = [None if None in (a, b) else a - b for a, b in zip(own_reward, grpo_reward)]
            print(f"| {method} | {unit} | {statistics.mean(totals):.0f} | {mean_spread(own)} | "
                  f"{mean_spread(grpo_held)} | {per_seed(held_diff)} | {mean_spread(own_reward)} | "
                  f"{mean_spread(grpo_reward)} | {per_seed(reward_diff)} |")


def band(ax, xs_per_seed, ys_per_seed, color, label):
    n = min(len(y) for y in ys_per_seed)
    xs = [statistics.mean(x[i] for x in xs_per_seed) for i in range(n)]
    ys = [[y[i] for y in ys_per_seed] for i in range(n)]
    ax.plot(xs, [statistics.mean(v) for v in ys], color=color, label=label)
    ax.fill_between(xs, [min(v) for v in ys], [max(v) for v in ys], color=color, alpha=0.2, lw=0)


def plot(runs, steps, warm_accuracy, k, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4), dpi=80)
    for method in METHODS:
        rs = [r for r in runs if r["method"] == method]
        rewards = [smooth(r["round1_reward"]) for r in rs]
        step_axis = [list(range(1, len(r["round1_reward"]) + 1)) for r in rs]
        sample_axis = [cumulative(r["generated"]) for r in rs]
        band(axes[0][0], step_axis, rewards, COLORS[method], method)
        band(axes[0][1], sample_axis, rewards, COLORS[method], method)
        held_steps = [[0] + [s for s, _ in r["held_out"]] for r in rs]
        held = [[warm_accuracy] + [a for _, a in r["held_out"]] for r in rs]
        held_samples = [[0.0] + [cumulative(r["generated"])[s - 1] for s, _ in r["held_out"]] for r in rs]
        band(axes[1][0], held_steps, held, COLORS[method], method)
        band(axes[1][1], held_samples, held, COLORS[method], method)
    for ax in axes[0]:
        ax.set_ylabel(f"round-1 training reward\n(moving mean of {SMOOTH} steps)")
    for ax in axes[1]:
        ax.set_ylabel(f"held-out avg@{k}")
    for ax in (axes[0][0], axes[1][0]):
        ax.set_xlabel("step")
        ax.axvline(steps, color="k", lw=0.6, ls=":")
    for ax in (axes[0][1], axes[1][1]):
        ax.set_xlabel("generated samples")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Tiny model on synthetic arithmetic: mean and min-max over seeds")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="runs/bench-learning")
    parser.add_argument("--config", default=DEFAULT_RECIPE, help="the shared recipe (YAML)")
    parser.add_argument("--steps", type=int, default=200, help="steps of every method (equal-steps comparison)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--learning_rate", type=float, default=None, help="override the recipe's learning rate")
    parser.add_argument("--warm_start_steps", type=int, default=300, help="as the demo")
    parser.add_argument("--eval_examples", type=int, default=512)
    parser.add_argument("--eval_k", type=int, default=4)
    parser.add_argument("--eval_every", type=int, default=20)
    parser.add_argument("--eval_seed", type=int, default=1234)
    parser.add_argument("--from_json", default=None, help="re-print the tables and redraw the plot of an earlier run's "
                        "learning.json, without training")
    parser.add_argument("--plot", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "learning.png"))
    args = parser.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        report(saved["runs"], saved["steps"], saved["warm_accuracy"], saved["eval_k"])
        plot(saved["runs"], saved["steps"], saved["warm_accuracy"], saved["eval_k"], args.plot)
        print(f"\nplot: {args.plot}")
        return 0
    if args.steps % args.eval_every:
        parser.error("--steps must be a multiple of --eval_every, so every method is evaluated at the same step")
    started = time.time()

    script, shared, ada = recipe_kwargs(args.config)
    base = build_tiny_model(os.path.join(args.output_dir, "tiny-model"))
    warm = warm_start(base, os.path.join(args.output_dir, "warm-model"), args.warm_start_steps, shared["seed"])
    held_out = synthetic_arithmetic(args.eval_examples, script["synthetic_difficulty"], seed=shared["seed"] + 1)
    baseline = HeldOut(AutoTokenizer.from_pretrained(warm), held_out, args.eval_k, 0, args.eval_seed)
    baseline.measure(AutoModelForCausalLM.from_pretrained(warm), 0)
    warm_accuracy = baseline.points[0][1]

    runs = []
    for method in [m for m in args.methods if m != "grpo"]:
        for seed in args.seeds:
            runs.append(train_one(method, seed, args.steps, warm, held_out, script, shared, ada, args))
    if "grpo" in args.methods:
        most = max([sum(r["generated"]) for r in runs], default=0.0)
        per_step = grpo_samples_per_step(shared)
        grpo_steps = max(args.steps, math.ceil(most / per_step / args.eval_every) * args.eval_every)
        for seed in args.seeds:
            runs.append(train_one("grpo", seed, grpo_steps, warm, held_out, script, shared, ada, args))
    for r in runs:
        r["baseline"] = warm_accuracy

    with open(os.path.join(args.output_dir, "learning.json"), "w") as f:
        saved = {"warm_accuracy": warm_accuracy, "steps": args.steps, "eval_k": args.eval_k, "runs": runs}
        json.dump(rounded(saved), f)
    if set(args.methods) == set(METHODS):
        report(runs, args.steps, warm_accuracy, args.eval_k)
        plot(runs, args.steps, warm_accuracy, args.eval_k, args.plot)
        print(f"\nplot: {args.plot}")
    print(f"results: {os.path.join(args.output_dir, 'learning.json')}  total wall time {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
