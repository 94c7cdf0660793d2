"""Equal-budget learning benchmark: every sampler stops at the same number of generated completions (issue 13).

    python benchmarks/equal_budget.py --jobs 2        # ~45 min on 2 shared CPU cores; not run in CI
    python benchmarks/equal_budget.py --from_json benchmarks/budget.json   # tables and plots of a finished run

The task is a fixed set of distinct synthetic sums of mixed difficulty (`budget_task`: one-digit sums and a
two-digit number plus a one-digit number), revisited for many epochs, with a separate held-out set of the same mix (no
problem in both). The warm start (`warm_start`: the demo's supervised warm start stopped early, cached in
<output_dir>/warm-model) leaves a U-shaped pass-rate distribution: the two-digit problems never solved, the one-digit
ones mostly solved, some in between. It is measured with 32 samples per training prompt before any RL and plotted in
the histogram panel.

Arms (same warm start, same prompts per step in the same order for a seed, same optimiser, loss and learning rate;
`recipes/tiny/ada_balance.yaml` for everything that is not the sampler):

- `grpo_n4`, `grpo_n8`: TRL's own `GRPOTrainer`, n = 4 / 8;
- `dapo`: `AdaGRPOTrainer`, adaptive rounds off, `dynamic_sampling=True` (DAPO exactly);
- `ada_pos`, `ada_balance`: Reinforce-Ada positive_focused / balanced, reference settings (M=8, R=4);
- `ada_budget`: `sampling_budget=4.0` with `prompt_memory=True`;
- `ada_grpo_adv`: Reinforce-Ada balanced with `advantage_estimator="grpo"` (control: sampling without the pooled
  advantages);
- `ada_budget_no_memory`: `sampling_budget=4.0` with `prompt_memory=False` (control: the budget without screening).

Every run stops at the first step at which its generated completions reach `--budget`. Generated completions and
tokens are counted where they are made: every call of GRPOTrainer's `_generate_single_turn` that generates (rounds,
refills, top-ups, padding; not the hand-over of already generated completions to TRL), tokens = the completion ids
TRL keeps (up to and including EOS). Held-out avg@k is measured at the first step past every `--eval_every`
completions and at the stop, with the same seeded sampling for every model and the run's random state restored.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import learning  # noqa: E402  (benchmarks/learning.py: recipe split, held-out measure, table helpers)
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer  # noqa: E402
from trl_ada.data import make_prompt  # noqa: E402
from trl_ada.demo import DEFAULT_RECIPE, warm_start  # noqa: E402
from trl_ada.evaluate import _generate_transformers  # noqa: E402
from trl_ada.rewards import boxed_math_reward  # noqa: E402
from trl_ada.tiny import build_tiny_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (trainer, config overrides on top of the recipe)
METHODS = {
    "grpo_n4": ("grpo", {"num_generations": 4}),
    "grpo_n8": ("grpo", {"num_generations": 8}),
    "dapo": ("ada", {"multiround_adaptive_downsampling": False, "dynamic_sampling": True}),
    "ada_pos": ("ada", {"reinforce_ada_choice": "positive_focused"}),
    "ada_balance": ("ada", {"reinforce_ada_choice": "balanced"}),
    "ada_budget": ("ada", {"sampling_budget": 4.0, "prompt_memory": True}),
    "ada_grpo_adv": ("ada", {"reinforce_ada_choice": "balanced", "advantage_estimator": "grpo"}),
    "ada_budget_no_memory": ("ada", {"sampling_budget": 4.0, "prompt_memory": False}),
}
COLORS = {"grpo_n4": "#444444", "grpo_n8": "#999999", "dapo": "#7b3294", "ada_pos": "#d95f02",
          "ada_balance": "#1b63c6", "ada_budget": "#1a9641", "ada_grpo_adv": "#66a3ff",
          "ada_budget_no_memory": "#a6d96a"}

# The task: (name, share, operand ranges). One-digit sums, which the warm start solves often but not always (pass
# rates 0.1 to 1.0, most above 0.5), and a two-digit number plus a one-digit number, either way round, which it never
# solves: the U shape of a real RL prompt set (a spike at 0, a bulk near 1, few in between).
FAMILIES = (
    ("1+1 digits", 0.5, (0, 9), (0, 9)),
    ("2+1 digits", 0.5, (10, 99), (0, 9)),
)


def _problem(rng, family):
    _, _, (a_lo, a_hi), (b_lo, b_hi) = family
    a, b = rng.randint(a_lo, a_hi), rng.randint(b_lo, b_hi)
    if rng.random() < 0.5:
        a, b = b, a
    return f"What is {a} + {b}?", str(a + b)


def family_counts(size: int, families=FAMILIES) -> list[int]:
    """Problems of each family in a set of `size`: its share, rounded; the last family takes the remainder."""
    counts = [round(size * share) for _, share, _, _ in families]
    counts[-1] = size - sum(counts[:-1])
    return counts


def budget_task(num_train: int, num_held_out: int, seed: int = 0, families=FAMILIES) -> tuple[Dataset, Dataset]:
    """Distinct problems of the mixed families (each family its share of both sets); no problem in both sets."""
    rng = random.Random(seed)
    seen: set[str] = set()
    sets = []
    for size in (num_train, num_held_out):
        rows = []
        for family, count in zip(families, family_counts(size, families)):
            made, tries = 0, 0
            while made < count:
                tries += 1
                if tries > 100 * count + 10_000:
                    raise ValueError(f"not enough distinct {family[0]} problems for {num_train} + {num_held_out}")
                problem, answer = _problem(rng, family)
                if problem in seen:
                    continue
                seen.add(problem)
                rows.append((problem, answer, family[0]))
                made += 1
        rng.shuffle(rows)
        sets.append(Dataset.from_dict({"prompt": [make_prompt(p) for p, _, _ in rows],
                                       "answer": [a for _, a, _ in rows], "problem": [p for p, _, _ in rows],
                                       "family": [f for _, _, f in rows]}))
    return sets[0], sets[1]


def pass_rates(model_dir: str, dataset: Dataset, samples: int = 32, seed: int = 0) -> list[float]:
    """Each prompt's pass rate from `samples` samples at temperature 1 (the training sampling)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts = _generate_transformers(model, tokenizer, list(dataset["prompt"]), samples, 24, 1.0, 1.0, 512)
    rewards = boxed_math_reward(texts, answer=[a for a in dataset["answer"] for _ in range(samples)])
    return [sum(rewards[i * samples : (i + 1) * samples]) / samples for i in range(len(dataset))]


def signal_share(rates: list[float], n: int = 4) -> float:
    """Expected share of i.i.d. groups of n with at least one right and one wrong answer."""
    return statistics.mean(1 - p**n - (1 - p) ** n for p in rates)


# ---------------------------------------------------------------------------------------------------------------
# Counting what is generated.


class _Counted:
    samples = 0
    tokens = 0


class _CountingGRPO(GRPOTrainer):
    """GRPOTrainer's generation, counted: every completion it returns was generated by this call."""

    counted: _Counted

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
        self.counted.samples += len(completion_ids)
        self.counted.tokens += sum(len(ids) for ids in completion_ids)
        return completion_ids, logprobs


class _CountingAda(AdaGRPOTrainer, _CountingGRPO):
    """AdaGRPOTrainer with the counter between it and GRPOTrainer: its rounds call `super()._generate_single_turn`,
    which lands in the counter; handing the kept completions to TRL does not call it, so it is not counted twice."""


class BudgetRun(TrainerCallback):
    """Held-out avg@k at every `every` generated completions, and the stop once `budget` is reached."""

    def __init__(self, counted, held_out: learning.HeldOut, budget, every, baseline):
        self.counted, self.held, self.budget, self.every = counted, held_out, budget, every
        self.next_eval = every
        self.curve = [{"samples": 0, "tokens": 0, "step": 0, "held_out": baseline}]

    def on_step_end(self, args, state, control, model=None, **kwargs):
        samples = self.counted.samples
        done = samples >= self.budget
        if samples >= self.next_eval or done:
            self.held.measure(model, state.global_step)
            self.curve.append({"samples": samples, "tokens": self.counted.tokens, "step": state.global_step,
                               "held_out": self.held.points[-1][1]})
            while self.next_eval <= samples:
                self.next_eval += self.every
        if done:
            control.should_training_stop = True


def make_config(method, seed, max_steps, output_dir, shared, ada, prompts_per_step, learning_rate=None):
    kind, overrides = METHODS[method]
    n = overrides.get("num_generations", shared["num_generations"])
    common = dict(shared, output_dir=output_dir, max_steps=max_steps, seed=seed, save_strategy="no",
                  logging_steps=1, report_to="none", disable_tqdm=True, num_generations=n,
                  per_device_train_batch_size=prompts_per_step * n, gradient_accumulation_steps=1)
    if learning_rate is not None:
        common["learning_rate"] = learning_rate
    if kind == "grpo":
        return GRPOConfig(**common)
    fields = dict(ada, **{k: v for k, v in overrides.items() if k != "num_generations"})
    return AdaGRPOConfig(**common, **fields)


def train_one(method, seed, paths, args, baseline):
    script, shared, ada = learning.recipe_kwargs(args.config)
    train, held_out = budget_task(args.train_prompts, args.eval_examples, args.task_seed)
    output_dir = os.path.join(args.output_dir, f"{method}-seed{seed}")
    max_steps = math.ceil(args.budget / (args.prompts_per_step * 4)) + 5  # every arm makes >= 4 per prompt a step
    config = make_config(method, seed, max_steps, output_dir, shared, ada, args.prompts_per_step, args.learning_rate)
    trainer_class = _CountingGRPO if METHODS[method][0] == "grpo" else _CountingAda
    counted = _Counted()
    held = learning.HeldOut(AutoTokenizer.from_pretrained(paths["warm"]), held_out, args.eval_k, 0, args.eval_seed)
    run = BudgetRun(counted, held, args.budget, args.eval_every, baseline)
    trainer = trainer_class(model=paths["warm"], reward_funcs=[boxed_math_reward], args=config, train_dataset=train,
                            callbacks=[run])
    trainer.counted = counted
    trainer.remove_callback(PrinterCallback)
    print(f"[budget] {method} seed {seed}: until {args.budget} generated completions", flush=True)
    started = time.time()
    trainer.train()
    seconds = time.time() - started - held.seconds
    logs = [h for h in trainer.state.log_history if "step_time" in h]
    logged = sum(h.get("sampling/total_samples", 0.0) + h.get("sampling/padding_samples", 0.0) for h in logs)
    if METHODS[method][0] == "grpo":
        logged = float(len(logs) * config.per_device_train_batch_size)
        reward = [h["reward"] for h in logs]
        signal = [1.0 - h["frac_reward_zero_std"] for h in logs]
    else:
        reward = [h["sampling/iid_reward"] for h in logs]
        signal = [h["sampling/effective_prompt_ratio"] for h in logs]
    # prompts sampled (TRL's and refills; skipped ones not counted) per training prompt: the epochs of rollouts
    drawn = sum(h.get("sampling/prompts_drawn", args.prompts_per_step) - h.get("sampling/prompts_skipped", 0.0)
                for h in logs)
    return {"method": method, "seed": seed, "curve": run.curve, "steps": len(logs),
            "logged_samples": logged, "train_seconds": seconds, "round1_reward": reward, "signal": signal,
            "epochs_sampled": drawn / args.train_prompts}


# ---------------------------------------------------------------------------------------------------------------
# Reading the curves.


def held_out_at(run, samples):
    xs = [p["samples"] for p in run["curve"]]
    ys = [p["held_out"] for p in run["curve"]]
    return learning.interpolate(xs, ys, samples)


def samples_to_reach(run, target):
    """Generated completions at which the run's held-out curve (linear between evaluations) first reaches target."""
    curve = run["curve"]
    if curve[0]["held_out"] >= target:
        return 0.0
    for a, b in zip(curve, curve[1:]):
        if b["held_out"] >= target:
            return a["samples"] + (b["samples"] - a["samples"]) * (target - a["held_out"]) / (
                b["held_out"] - a["held_out"])
    return None


def final(run):
    return run["curve"][-1]


def report(saved):
    runs, budget = saved["runs"], saved["budget"]
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    by = {m: {r["seed"]: r for r in runs if r["method"] == m} for m in methods}
    seeds = sorted(by["grpo_n4"]) if "grpo_n4" in by else []
    rates = saved["warm_pass_rates"]
    hist = [0] * 10
    for p in rates:
        hist[min(int(p * 10), 9)] += 1
    print(f"\n### Task at the warm start ({len(rates)} training prompts, 32 samples each)\n")
    print("| pass rate | " + " | ".join(f"{i / 10:.1f}-{(i + 1) / 10:.1f}" for i in range(10)) + " | exactly 0 | "
          "exactly 1 | groups of 4 with signal (expected) |")
    print("|---" * 13 + "|---:|")
    print("| prompts | " + " | ".join(str(h) for h in hist) + f" | {sum(p == 0 for p in rates)} | "
          f"{sum(p == 1 for p in rates)} | {100 * signal_share(rates):.1f}% |")
    print(f"\nHeld-out avg@{saved['eval_k']} at the warm start: {100 * saved['warm_accuracy']:.1f}%.")

    print(f"\n### At the budget ({budget} generated completions; mean ± std over seeds {seeds})\n")
    print(f"| method | final held-out avg@{saved['eval_k']} | generated at the stop | generated tokens | steps | "
          "epochs of the prompt set sampled | groups with signal | samples to reach GRPO n=4's final, / GRPO n=4's "
          "samples (per seed) | mean | final held-out minus grpo_n4, per seed (points) | training time (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|")
    for m in methods:
        rs = [by[m][s] for s in seeds if s in by[m]]
        ratios = []
        for r in rs:
            grpo = by["grpo_n4"][r["seed"]]
            reach = samples_to_reach(r, final(grpo)["held_out"])
            ratios.append(None if reach is None else reach / final(grpo)["samples"])
        shown = " / ".join("not reached" if x is None else f"{x:.2f}" for x in ratios)
        known = [x for x in ratios if x is not None]
        mean_ratio = (f"{statistics.mean(known):.2f}" + ("" if len(known) == len(ratios) else
                      f" ({len(known)} of {len(ratios)} reached)")) if known else "not reached"
        diffs = learning.per_seed([final(r)["held_out"] - final(by["grpo_n4"][r["seed"]])["held_out"] for r in rs])
        print(f"| {m} | {learning.mean_spread([final(r)['held_out'] for r in rs])} | "
              f"{statistics.mean(final(r)['samples'] for r in rs):.0f} | "
              f"{statistics.mean(final(r)['tokens'] for r in rs):.0f} | "
              f"{statistics.mean(r['steps'] for r in rs):.0f} | "
              f"{statistics.mean(r['epochs_sampled'] for r in rs):.1f} | "
              f"{learning.mean_spread([statistics.mean(r['signal']) for r in rs])} | {shown} | {mean_ratio} | "
              f"{diffs} | {statistics.mean(r['train_seconds'] for r in rs):.0f} |")
    if "grpo_n4" in by:
        flat = [s for s in seeds if final(by["grpo_n4"][s])["held_out"] <= saved["warm_accuracy"]]
        if flat:
            print(f"\nIn seed(s) {flat} grpo_n4 ended at or below the warm start "
                  f"({100 * saved['warm_accuracy']:.1f}%): there its final held-out is reached at 0 samples by "
                  "every method, and the ratio says nothing.")
    if "ada_budget" in by and "grpo_n4" in by:
        ratios = []
        for s in seeds:
            reach = samples_to_reach(by["ada_budget"][s], final(by["grpo_n4"][s])["held_out"]) if s in by[
                "ada_budget"] else None
            ratios.append(None if reach is None else reach / final(by["grpo_n4"][s])["samples"])
        met = bool(ratios) and all(x is not None and x <= 0.7 for x in ratios)
        flat = [s for s in seeds if final(by["grpo_n4"][s])["held_out"] <= saved["warm_accuracy"]]
        verdict = "NOT MET" if not met else (
            f"met only trivially (grpo_n4 ended at or below the warm start in seed(s) {flat}): no evidence either way"
            if flat else "MET")
        shown = " / ".join("not reached" if x is None else f"{x:.2f}" for x in ratios)
        print(f"\nTarget (ada_budget reaches grpo_n4's final held-out with <= 0.7x its samples in every seed; "
              f"per seed {shown}): {verdict}")

    mid = budget // 2
    print(f"\n### Half-way ({mid} generated completions; held-out interpolated between evaluations)\n")
    print("| method | held-out | minus grpo_n4, per seed (points) |\n|---|---:|---|")
    for m in methods:
        rs = [by[m][s] for s in seeds if s in by[m]]
        values = [held_out_at(r, mid) for r in rs]
        diffs = [None if v is None else v - held_out_at(by["grpo_n4"][r["seed"]], mid) for v, r in zip(values, rs)]
        print(f"| {m} | {learning.mean_spread(values)} | {learning.per_seed(diffs)} |")


def plot(saved, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = saved["runs"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), dpi=80)
    for m in METHODS:
        rs = [r for r in runs if r["method"] == m]
        if not rs:
            continue
        for ax, axis in ((axes[0], "samples"), (axes[1], "tokens")):
            # seeds are evaluated at slightly different totals: put each seed on a common grid
            top = min(final(r)[axis] for r in rs)
            grid = [top * i / 40 for i in range(41)]
            ys = []
            for r in rs:
                xs = [p[axis] for p in r["curve"]]
                ys.append([learning.interpolate(xs, [p["held_out"] for p in r["curve"]], x) for x in grid])
            learning.band(ax, [grid] * len(rs), ys, COLORS[m], m)
    for ax, label in ((axes[0], "generated completions"), (axes[1], "generated tokens")):
        ax.set_xlabel(label)
        ax.set_ylabel(f"held-out avg@{saved['eval_k']}")
        ax.axhline(saved["warm_accuracy"], color="k", lw=0.6, ls=":")  # the warm start
    axes[0].legend(fontsize=7)
    rates = saved["warm_pass_rates"]
    axes[2].hist(rates, bins=[i / 16 for i in range(17)], color="#555555")
    axes[2].set_xlabel("pass rate at the warm start (32 samples per prompt)")
    axes[2].set_ylabel("training prompts")
    axes[2].set_title(f"{100 * signal_share(rates):.0f}% of i.i.d. groups of 4 carry signal", fontsize=9)
    fig.suptitle(f"Equal budget ({saved['budget']} generated completions): mean and min-max over seeds")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="runs/bench-budget")
    parser.add_argument("--config", default=DEFAULT_RECIPE, help="the shared recipe (YAML)")
    parser.add_argument("--budget", type=int, default=2048, help="generated completions per run")
    parser.add_argument("--eval_every", type=int, default=512, help="held-out evaluation every this many completions")
    parser.add_argument("--prompts_per_step", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=None,
                        help="override the recipe's learning rate (2e-4) in every arm")
    parser.add_argument("--train_prompts", type=int, default=64)
    parser.add_argument("--eval_examples", type=int, default=128)
    parser.add_argument("--eval_k", type=int, default=8)
    parser.add_argument("--eval_seed", type=int, default=1234)
    parser.add_argument("--task_seed", type=int, default=0)
    parser.add_argument("--warm_start_steps", type=int, default=300, help="supervised steps of the warm start")
    parser.add_argument("--warm_start_schedule", type=int, default=750, help="steps the warm start's cosine spans")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes of 1 torch thread each)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # "i/N": this process's share of runs
    parser.add_argument("--json", default=os.path.join(HERE, "budget.json"))
    parser.add_argument("--plot", default=os.path.join(HERE, "budget.png"))
    parser.add_argument("--from_json", default=None, help="re-print the tables and redraw the plot, without training")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        report(saved)
        plot(saved, args.plot)
        print(f"\nplot: {args.plot}")
        return 0

    started = time.time()
    os.makedirs(os.path.join(args.output_dir, "results"), exist_ok=True)
    meta_path = os.path.join(args.output_dir, "warm.json")
    paths = {"warm": os.path.join(args.output_dir, "warm-model")}
    todo = [(m, s) for s in args.seeds for m in args.methods]  # seed-major: an interrupted run has whole seeds

    def result_path(method, seed):
        return os.path.join(args.output_dir, "results", f"{method}-seed{seed}.json")

    if args.worker is None:
        base = build_tiny_model(os.path.join(args.output_dir, "tiny-model"))
        warm_start(base, paths["warm"], args.warm_start_steps, seed=0, schedule_steps=args.warm_start_schedule)
        if not os.path.exists(meta_path):
            train, held_out = budget_task(args.train_prompts, args.eval_examples, args.task_seed)
            rates = pass_rates(paths["warm"], train)
            baseline = learning.HeldOut(AutoTokenizer.from_pretrained(paths["warm"]), held_out, args.eval_k, 0,
                                        args.eval_seed)
            baseline.measure(AutoModelForCausalLM.from_pretrained(paths["warm"]), 0)
            with open(meta_path, "w") as f:
                json.dump({"warm_pass_rates": rates, "warm_accuracy": baseline.points[0][1],
                           "families": [f for f in train["family"]]}, f)
        with open(meta_path) as f:
            meta = json.load(f)
        rates = meta["warm_pass_rates"]
        print(f"[budget] warm start: {sum(p == 0 for p in rates)} prompts never solved, {sum(p == 1 for p in rates)} "
              f"always, {100 * signal_share(rates):.1f}% of groups of 4 with signal; held-out "
              f"{100 * meta['warm_accuracy']:.1f}%", flush=True)
        if args.jobs > 1:
            passed = [a for a in (argv if argv is not None else sys.argv[1:])]
            workers = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *passed,
                                         "--worker", f"{i}/{args.jobs}"]) for i in range(args.jobs)]
            codes = [w.wait() for w in workers]
            if any(codes):
                print(f"[budget] a worker failed: exit codes {codes}", flush=True)
        mine = [] if args.jobs > 1 else todo
    else:
        with open(meta_path) as f:
            meta = json.load(f)
        index, count = (int(x) for x in args.worker.split("/"))
        mine = todo[index::count]

    for method, seed in mine:
        if os.path.exists(result_path(method, seed)):  # finished earlier: a rerun resumes
            continue
        run = train_one(method, seed, paths, args, meta["warm_accuracy"])
        with open(result_path(method, seed), "w") as f:
            json.dump(learning.rounded(run), f)
    if args.worker is not None:
        return 0

    runs = []
    for method, seed in todo:
        if os.path.exists(result_path(method, seed)):
            with open(result_path(method, seed)) as f:
                runs.append(json.load(f))
    saved = {"budget": args.budget, "eval_every": args.eval_every, "eval_k": args.eval_k,
             "prompts_per_step": args.prompts_per_step, "learning_rate": args.learning_rate,
             "train_prompts": args.train_prompts,
             "eval_examples": args.eval_examples, "warm_start_steps": args.warm_start_steps,
             "warm_start_schedule": args.warm_start_schedule,
             "complete": len(runs) == len(todo), "wall_seconds": time.time() - started,
             "warm_accuracy": meta["warm_accuracy"], "warm_pass_rates": meta["warm_pass_rates"],
             "warm_families": meta["families"], "runs": runs}
    with open(args.json, "w") as f:
        json.dump(learning.rounded(saved), f)
    if any(r["method"] == "grpo_n4" for r in runs):
        report(saved)
        plot(saved, args.plot)
    print(f"\nresults: {args.json}  plot: {args.plot}  total wall time {time.time() - started:.0f} s "
          f"({len(runs)} of {len(todo)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
