"""Equal-budget learning benchmark: every sampler stops at the same number of generated completions (issue 13).

    python benchmarks/equal_budget.py --jobs 2 --seeds 0 1 2 3 4 --budget 4096   # 26 min on 2 CPU cores; not in CI
    python benchmarks/equal_budget.py --from_json benchmarks/budget.json   # tables and plots of a finished run

The task is a fixed set of distinct sums of mixed difficulty (`budget_task`: the one-digit sums a + b with a != b,
and a two-digit number plus a one-digit number), revisited for many epochs. The held-out set is the training sums
asked the other way round (`--held_out twins`; `--held_out disjoint` for other sums, the first version's task). The
warm start (`warm_start`: the demo's supervised warm start stopped early, cached in <output_dir>/warm-model) leaves a
U-shaped pass-rate distribution: the two-digit problems never solved, the one-digit ones mostly solved. It is
measured with 32 samples per training prompt before any RL and plotted in the histogram panel.

Arms (same warm start, same prompts per step in the same order for a seed, same optimiser, loss and learning rate;
`recipes/tiny/ada_balance.yaml` for everything that is not the sampler):

- `grpo_n4`, `grpo_n8`: TRL's own `GRPOTrainer`, n = 4 / 8;
- `dapo`: `AdaGRPOTrainer`, adaptive rounds off, `dynamic_sampling=True` (DAPO exactly);
- `ada_pos`, `ada_balance`: Reinforce-Ada positive_focused / balanced, reference settings (M=8, R=4);
- `ada_budget`: `sampling_budget=4.0` with `prompt_memory=True`;
- `ada_grpo_adv`: Reinforce-Ada balanced with `advantage_estimator="grpo"` (control: sampling without the pooled
  advantages);
- `ada_budget_no_memory`: `sampling_budget=4.0` with `prompt_memory=False` (control: the budget without screening);
- `oracle_n4` (a bound, not a method): `GRPOTrainer` n = 4 on only the prompts whose warm-start pass rate is strictly
  between 0 and 1, the most that choosing prompts can buy at 4 samples per prompt.

Every run stops at the first step at which its generated completions reach `--budget`. Generated completions and
tokens are counted where they are made: every call of GRPOTrainer's `_generate_single_turn` that generates (rounds,
refills, top-ups, padding; not the hand-over of already generated completions to TRL), tokens = the completion ids
TRL keeps (up to and including EOS). Held-out avg@k is measured at the first step past every `--eval_every`
completions and at the stop, with the same seeded sampling for every model and the run's random state restored;
the training prompts' avg@k at the same points. Finals are the mean of the last 3 evaluations.
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
from trl_ada.cli.demo import DEFAULT_RECIPE  # noqa: E402
from trl_ada.examples.warm_start import warm_start  # noqa: E402
from trl_ada.cli.evaluate import _generate_transformers  # noqa: E402
from trl_ada.rewards import boxed_math_reward  # noqa: E402
from trl_ada.examples.tiny import build_tiny_model  # noqa: E402

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
    # not a method: GRPO n=4 on the training prompts the warm start solves sometimes but not always (an oracle that
    # knows the pass rates measured before training); the most any screening can buy at 4 samples per prompt
    "oracle_n4": ("grpo", {"num_generations": 4}),
}
COLORS = {"grpo_n4": "#444444", "grpo_n8": "#999999", "dapo": "#7b3294", "ada_pos": "#d95f02",
          "ada_balance": "#1b63c6", "ada_budget": "#1a9641", "ada_grpo_adv": "#66a3ff",
          "ada_budget_no_memory": "#a6d96a", "oracle_n4": "#e7298a", "ada_budget_kind": "#00a0a0", "ada_budget_x2": "#b8860b"}

# The task: (name, share, operand ranges). One-digit sums, which the warm start solves often but not always (pass
# rates 0.1 to 1.0, most above 0.5), and a two-digit number plus a one-digit number, either way round, which it never
# solves: the U shape of a real RL prompt set (a spike at 0, a bulk near 1, few in between).
FAMILIES = (
    ("1+1 digits", 0.5, (0, 9), (0, 9)),
    ("2+1 digits", 0.5, (10, 99), (0, 9)),
)


def _operands(rng, family):
    _, _, (a_lo, a_hi), (b_lo, b_hi) = family
    a, b = rng.randint(a_lo, a_hi), rng.randint(b_lo, b_hi)
    return (b, a) if rng.random() < 0.5 else (a, b)


def family_counts(size: int, families=FAMILIES) -> list[int]:
    """Problems of each family in a set of `size`: its share, rounded; the last family takes the remainder."""
    counts = [round(size * share) for _, share, _, _ in families]
    counts[-1] = size - sum(counts[:-1])
    return counts


def budget_task(num_train: int, num_held_out: int, seed: int = 0, families=FAMILIES,
                held_out: str = "twins") -> tuple[Dataset, Dataset]:
    """Distinct problems of the mixed families (each family its share of both sets); no problem in both sets.

    held_out="twins": each held-out problem is a training problem asked the other way round (`8 + 43` for `43 + 8`):
    the same sum, a different prompt. It measures whether what RL teaches about a sum carries over to a prompt it
    never trained on; it does not measure transfer to sums never trained on (a tiny model learns sums one by one).
    held_out="disjoint": held-out problems are other sums, none in the training set, either way round.
    """
    if held_out not in ("twins", "disjoint"):
        raise ValueError(f"held_out must be 'twins' or 'disjoint', got {held_out!r}")
    if held_out == "twins" and num_held_out > num_train:
        raise ValueError(f"held_out='twins' needs num_held_out <= num_train, got {num_held_out} > {num_train}")
    rng = random.Random(seed)
    seen: set[frozenset] = set()  # a sum, either way round
    sets = []
    sizes = (num_train,) if held_out == "twins" else (num_train, num_held_out)
    for size in sizes:
        rows = []
        for family, count in zip(families, family_counts(size, families)):
            made, tries = 0, 0
            while made < count:
                tries += 1
                if tries > 100 * count + 10_000:
                    raise ValueError(f"not enough distinct {family[0]} problems for {num_train} + {num_held_out}")
                a, b = _operands(rng, family)
                if a == b or frozenset((a, b)) in seen:  # a + a has no twin
                    continue
                seen.add(frozenset((a, b)))
                rows.append((a, b, family[0]))
                made += 1
        sets.append(rows)
    if held_out == "twins":
        twins = []
        for family, count in zip(families, family_counts(num_held_out, families)):
            twins += [(b, a, f) for a, b, f in sets[0] if f == family[0]][:count]
        sets.append(twins)
    out = []
    for rows in sets:
        rows = list(rows)
        rng.shuffle(rows)
        problems = [f"What is {a} + {b}?" for a, b, _ in rows]
        out.append(Dataset.from_dict({"prompt": [make_prompt(p) for p in problems],
                                      "answer": [str(a + b) for a, b, _ in rows], "problem": problems,
                                      "family": [f for _, _, f in rows]}))
    return out[0], out[1]


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

    def __init__(self, counted, held_out: learning.HeldOut, on_train: learning.HeldOut, budget, every, baseline,
                 train_baseline):
        self.counted, self.held, self.on_train, self.budget, self.every = counted, held_out, on_train, budget, every
        self.next_eval = every
        self.curve = [{"samples": 0, "tokens": 0, "step": 0, "held_out": baseline, "train": train_baseline}]

    def on_step_end(self, args, state, control, model=None, **kwargs):
        samples = self.counted.samples
        done = samples >= self.budget
        if samples >= self.next_eval or done:
            self.held.measure(model, state.global_step)
            self.on_train.measure(model, state.global_step)
            self.curve.append({"samples": samples, "tokens": self.counted.tokens, "step": state.global_step,
                               "held_out": self.held.points[-1][1], "train": self.on_train.points[-1][1]})
            while self.next_eval <= samples:
                self.next_eval += self.every
        if done:
            control.should_training_stop = True


def make_config(method, seed, max_steps, output_dir, shared, ada, prompts_per_step, learning_rate=None, methods=None):
    kind, overrides = (methods or METHODS)[method]
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


def train_one(method, seed, paths, args, meta):
    script, shared, ada = learning.recipe_kwargs(args.config)
    train, held_out = budget_task(args.train_prompts, args.eval_examples, args.task_seed, held_out=args.held_out)
    trained_on = train
    if method == "oracle_n4":
        trained_on = train.select([i for i, p in enumerate(meta["warm_pass_rates"]) if 0 < p < 1])
        if len(trained_on) == 0:
            raise ValueError("oracle_n4: no training prompt has a warm-start pass rate strictly between 0 and 1; "
                             "use more --warm_start_steps or leave oracle_n4 out of --methods")
    output_dir = os.path.join(args.output_dir, f"{method}-seed{seed}")
    max_steps = math.ceil(args.budget / (args.prompts_per_step * 4)) + 5  # every arm makes >= 4 per prompt a step
    config = make_config(method, seed, max_steps, output_dir, shared, ada, args.prompts_per_step, args.learning_rate)
    trainer_class = _CountingGRPO if METHODS[method][0] == "grpo" else _CountingAda
    counted = _Counted()
    tokenizer = AutoTokenizer.from_pretrained(paths["warm"])
    held = learning.HeldOut(tokenizer, held_out, args.eval_k, 0, args.eval_seed)
    on_train = learning.HeldOut(tokenizer, train, args.eval_k, 0, args.eval_seed)  # the training prompts' avg@k
    run = BudgetRun(counted, held, on_train, args.budget, args.eval_every, meta["warm_accuracy"],
                    meta["warm_train_accuracy"])
    trainer = trainer_class(model=paths["warm"], reward_funcs=[boxed_math_reward], args=config, train_dataset=trained_on,
                            callbacks=[run])
    trainer.counted = counted
    trainer.remove_callback(PrinterCallback)
    print(f"[budget] {method} seed {seed}: until {args.budget} generated completions", flush=True)
    started = time.time()
    trainer.train()
    seconds = time.time() - started - held.seconds - on_train.seconds
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


SMOOTH = 3  # evaluations in the running mean: one evaluation of 720 samples is noisy (about +-1.7 points)


def smoothed(run, key="held_out", width=SMOOTH):
    """The run's curve of `key` as (samples, running mean of the last `width` evaluations, the warm start included)."""
    curve = run["curve"]
    values = [p.get(key) for p in curve]
    if any(v is None for v in values):  # runs of the first version of the benchmark have no training-set curve
        return None
    return [(p["samples"], statistics.mean(values[max(0, i - width + 1) : i + 1])) for i, p in enumerate(curve)]


def held_out_at(run, samples, key="held_out"):
    points = smoothed(run, key)
    return None if points is None else learning.interpolate([x for x, _ in points], [y for _, y in points], samples)


def samples_to_reach(run, target, key="held_out"):
    """Generated completions at which the run's smoothed curve (linear between evaluations) first reaches target."""
    points = smoothed(run, key)
    if points[0][1] >= target:
        return 0.0
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if y1 >= target:
            return x0 + (x1 - x0) * (target - y0) / (y1 - y0)
    return None


def final(run):
    return run["curve"][-1]


def final_value(run, key="held_out"):
    """The mean of the run's last `SMOOTH` evaluations."""
    points = smoothed(run, key)
    return None if points is None else points[-1][1]


def reach_ratios(rs, by, key="held_out"):
    """Per run: samples to reach grpo_n4's smoothed final of the same seed, over grpo_n4's samples at its stop."""
    ratios = []
    for r in rs:
        grpo = by["grpo_n4"][r["seed"]]
        reach = samples_to_reach(r, final_value(grpo, key), key)
        ratios.append(None if reach is None else reach / final(grpo)["samples"])
    return ratios


def _ratio_text(ratios):
    shown = " / ".join("not reached" if x is None else f"{x:.2f}" for x in ratios)
    known = [x for x in ratios if x is not None]
    mean_ratio = (f"{statistics.mean(known):.2f}" + ("" if len(known) == len(ratios) else
                  f" ({len(known)} of {len(ratios)} reached)")) if known else "not reached"
    return shown, mean_ratio


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
    train_warm = saved.get("warm_train_accuracy")
    print(f"\nHeld-out ({saved.get('held_out_kind', 'disjoint')}) avg@{saved['eval_k']} at the warm start: "
          f"{100 * saved['warm_accuracy']:.1f}%" + ("" if train_warm is None else
                                                    f"; training prompts avg@{saved['eval_k']}: {100 * train_warm:.1f}%")
          + ".")

    k = saved["eval_k"]
    print(f"\n### At the budget ({budget} generated completions; mean ± std over seeds {seeds}; 'final' = mean of the "
          f"last {SMOOTH} evaluations)\n")
    print(f"| method | final held-out avg@{k} | final training-prompt avg@{k} | generated at the stop | generated "
          "tokens | steps | epochs of the prompt set sampled | groups with signal | held-out: samples to reach "
          "grpo_n4's final / grpo_n4's samples, per seed | mean | final held-out minus grpo_n4, per seed (points) | "
          "training prompts: samples to reach grpo_n4's final, ratio per seed | training time (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|---:|")
    for m in methods:
        rs = [by[m][s] for s in seeds if s in by[m]]
        shown, mean_ratio = _ratio_text(reach_ratios(rs, by))
        has_train = all(smoothed(r, "train") for r in rs)
        train_shown = _ratio_text(reach_ratios(rs, by, "train"))[0] if has_train else "-"
        diffs = learning.per_seed([final_value(r) - final_value(by["grpo_n4"][r["seed"]]) for r in rs])
        print(f"| {m} | {learning.mean_spread([final_value(r) for r in rs])} | "
              f"{learning.mean_spread([final_value(r, 'train') for r in rs]) if has_train else '-'} | "
              f"{statistics.mean(final(r)['samples'] for r in rs):.0f} | "
              f"{statistics.mean(final(r)['tokens'] for r in rs):.0f} | "
              f"{statistics.mean(r['steps'] for r in rs):.0f} | "
              f"{statistics.mean(r['epochs_sampled'] for r in rs):.1f} | "
              f"{learning.mean_spread([statistics.mean(r['signal']) for r in rs])} | {shown} | {mean_ratio} | "
              f"{diffs} | {train_shown} | {statistics.mean(r['train_seconds'] for r in rs):.0f} |")
    # seeds where grpo_n4 ended at or below the warm start: there any curve "reaches" it at 0 samples
    flat = [s for s in seeds if final_value(by["grpo_n4"][s]) <= saved["warm_accuracy"]]
    if flat:
        print(f"\nIn seed(s) {flat} grpo_n4 ended at or below the warm start "
              f"({100 * saved['warm_accuracy']:.1f}%): there its final held-out is reached at 0 samples by "
              "every method, and the ratio says nothing.")
    if "ada_budget" in by and "grpo_n4" in by:
        ratios = reach_ratios([by["ada_budget"][s] for s in seeds if s in by["ada_budget"]], by)
        met = len(ratios) == len(seeds) and all(x is not None and x <= 0.7 for x in ratios)
        verdict = "NOT MET" if not met else (
            f"met only trivially (grpo_n4 ended at or below the warm start in seed(s) {flat}): no evidence either way"
            if flat else "MET")
        print(f"\nTarget (ada_budget reaches grpo_n4's final held-out with <= 0.7x its samples in every seed; "
              f"per seed {_ratio_text(ratios)[0]}): {verdict}")

    for label, key in (("held-out", "held_out"), ("training prompts", "train")):
        if not all(smoothed(r, key) for r in runs):
            continue
        marks = [budget // 4, budget // 2, 3 * budget // 4]
        print(f"\n### {label.capitalize()} on the way (smoothed; minus grpo_n4 per seed, points)\n")
        print("| method | " + " | ".join(f"at {x}" for x in marks) + " | " +
              " | ".join(f"minus grpo_n4 at {x}" for x in marks) + " |")
        print("|---" + "|---:" * len(marks) + "|---" * len(marks) + "|")
        for m in methods:
            rs = [by[m][s] for s in seeds if s in by[m]]
            cells, diffs = [], []
            for x in marks:
                values = [held_out_at(r, x, key) for r in rs]
                cells.append(learning.mean_spread(values))
                diffs.append(learning.per_seed([None if v is None else v - held_out_at(by["grpo_n4"][r["seed"]], x, key)
                                                for v, r in zip(values, rs)]))
            print(f"| {m} | " + " | ".join(cells) + " | " + " | ".join(diffs) + " |")


def plot(saved, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = saved["runs"]
    with_train = all(smoothed(r, "train") for r in runs)
    panels = [("samples", "held_out", "generated completions", f"held-out avg@{saved['eval_k']}"),
              ("tokens", "held_out", "generated tokens", f"held-out avg@{saved['eval_k']}")]
    if with_train:
        panels.append(("samples", "train", "generated completions", f"training prompts avg@{saved['eval_k']}"))
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(5 * (len(panels) + 1), 4.4), dpi=80)
    for m in METHODS:
        rs = [r for r in runs if r["method"] == m]
        if not rs:
            continue
        for ax, (axis, key, _, _) in zip(axes, panels):
            # seeds are evaluated at slightly different totals: put each seed on a common grid
            top = min(final(r)[axis] for r in rs)
            grid = [top * i / 40 for i in range(41)]
            ys = []
            for r in rs:
                xs = [p[axis] for p in r["curve"]]
                values = [y for _, y in smoothed(r, key)]
                ys.append([learning.interpolate(xs, values, x) for x in grid])
            learning.band(ax, [grid] * len(rs), ys, COLORS[m], m)
    for ax, (_, key, xlabel, ylabel) in zip(axes, panels):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel + f" (mean of {SMOOTH} evaluations)")
        ax.axhline(saved["warm_accuracy"] if key == "held_out" else saved["warm_train_accuracy"], color="k", lw=0.6,
                   ls=":")  # the warm start
    axes[0].legend(fontsize=7)
    rates = saved["warm_pass_rates"]
    axes[-1].hist(rates, bins=[i / 16 for i in range(17)], color="#555555")
    axes[-1].set_xlabel("pass rate at the warm start (32 samples per prompt)")
    axes[-1].set_ylabel("training prompts")
    axes[-1].set_title(f"{100 * signal_share(rates):.0f}% of i.i.d. groups of 4 carry signal", fontsize=9)
    fig.suptitle(f"Equal budget ({saved['budget']} generated completions, held-out: "
                 f"{saved.get('held_out_kind', 'disjoint')}): mean and min-max over seeds")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------
# Running many (method, seed) runs: resumable, optionally in parallel processes (also used by the retired real_model_ci.py).


def add_parallel_run_arguments(parser):
    """The options `run_pending` reads: --jobs, --threads, and the internal --worker."""
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes of --threads each)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per process (1: with another process busy, more threads can be far slower)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # "i/N": this process's share of runs


def run_pending(todo, result_path, train, jobs, worker, script, argv):
    """Run the (method, seed) pairs of `todo` whose result file (`result_path(method, seed)`) does not exist yet,
    writing each result as it ends, so that a rerun resumes. With jobs > 1 and no `worker`, start `jobs` processes of
    `script` with the same arguments plus `--worker i/jobs` and wait for them; a worker runs every jobs-th pair."""
    if worker is None and jobs > 1:
        passed = list(argv if argv is not None else sys.argv[1:])
        workers = [subprocess.Popen([sys.executable, script, *passed, "--worker", f"{i}/{jobs}"]) for i in range(jobs)]
        codes = [w.wait() for w in workers]
        if any(codes):
            print(f"[{os.path.basename(script)}] a worker failed: exit codes {codes}", flush=True)
        return
    mine = todo
    if worker is not None:
        index, count = (int(x) for x in worker.split("/"))
        mine = todo[index::count]
    for method, seed in mine:
        if os.path.exists(result_path(method, seed)):  # finished earlier: a rerun resumes
            continue
        run = train(method, seed)
        with open(result_path(method, seed), "w") as f:
            json.dump(learning.rounded(run), f)


def finished_runs(todo, result_path):
    """The results of the pairs of `todo` that have finished, in `todo`'s order."""
    runs = []
    for method, seed in todo:
        if os.path.exists(result_path(method, seed)):
            with open(result_path(method, seed)) as f:
                runs.append(json.load(f))
    return runs


# ---------------------------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="runs/bench-budget")
    parser.add_argument("--config", default=DEFAULT_RECIPE, help="the shared recipe (YAML)")
    parser.add_argument("--budget", type=int, default=4096, help="generated completions per run")
    parser.add_argument("--eval_every", type=int, default=512, help="held-out evaluation every this many completions")
    parser.add_argument("--prompts_per_step", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=None,
                        help="override the recipe's learning rate (2e-4) in every arm")
    parser.add_argument("--train_prompts", type=int, default=90)
    parser.add_argument("--eval_examples", type=int, default=90)
    parser.add_argument("--held_out", default="twins", choices=["twins", "disjoint"],
                        help="twins: the training sums asked the other way round; disjoint: other sums")
    parser.add_argument("--eval_k", type=int, default=8)
    parser.add_argument("--eval_seed", type=int, default=1234)
    parser.add_argument("--task_seed", type=int, default=0)
    parser.add_argument("--warm_start_steps", type=int, default=300, help="supervised steps of the warm start")
    parser.add_argument("--warm_start_schedule", type=int, default=750, help="steps the warm start's cosine spans")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    add_parallel_run_arguments(parser)
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
            train, held_out = budget_task(args.train_prompts, args.eval_examples, args.task_seed,
                                          held_out=args.held_out)
            rates = pass_rates(paths["warm"], train)
            tokenizer = AutoTokenizer.from_pretrained(paths["warm"])
            warm = AutoModelForCausalLM.from_pretrained(paths["warm"])
            baseline = learning.HeldOut(tokenizer, held_out, args.eval_k, 0, args.eval_seed)
            baseline.measure(warm, 0)
            on_train = learning.HeldOut(tokenizer, train, args.eval_k, 0, args.eval_seed)
            on_train.measure(warm, 0)
            with open(meta_path, "w") as f:
                json.dump({"warm_pass_rates": rates, "warm_accuracy": baseline.points[0][1],
                           "warm_train_accuracy": on_train.points[0][1], "held_out_kind": args.held_out,
                           "families": [f for f in train["family"]]}, f)
        with open(meta_path) as f:
            meta = json.load(f)
        rates = meta["warm_pass_rates"]
        print(f"[budget] warm start: {sum(p == 0 for p in rates)} prompts never solved, {sum(p == 1 for p in rates)} "
              f"always, {100 * signal_share(rates):.1f}% of groups of 4 with signal; held-out "
              f"{100 * meta['warm_accuracy']:.1f}%", flush=True)
    else:
        with open(meta_path) as f:
            meta = json.load(f)
    run_pending(todo, result_path, lambda method, seed: train_one(method, seed, paths, args, meta), args.jobs,
                args.worker, os.path.abspath(__file__), argv)
    if args.worker is not None:
        return 0

    runs = finished_runs(todo, result_path)
    saved = {"budget": args.budget, "eval_every": args.eval_every, "eval_k": args.eval_k,
             "prompts_per_step": args.prompts_per_step, "learning_rate": args.learning_rate,
             "train_prompts": args.train_prompts,
             "eval_examples": args.eval_examples, "warm_start_steps": args.warm_start_steps,
             "warm_start_schedule": args.warm_start_schedule,
             "complete": len(runs) == len(todo), "wall_seconds": time.time() - started,
             "warm_accuracy": meta["warm_accuracy"], "warm_train_accuracy": meta["warm_train_accuracy"],
             "held_out_kind": meta["held_out_kind"], "warm_pass_rates": meta["warm_pass_rates"],
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
