"""The real-model comparison with intervals, and the regime where prompts return (issue 32).

    python benchmarks/real_model_ci.py --jobs 1 --seeds 0 1 2 3 4          # the full run, resumable; not in CI
    python benchmarks/real_model_ci.py --from_json benchmarks/real_model_ci.json   # every table and the plot again

SmolLM2-135M-Instruct learns chat arithmetic with the settings of `recipes/SmolLM2-135M-Instruct/arith_*.yaml`
(the task of the retired benchmarks/real_model.py: fp32 full fine-tuning, lr 3e-5 constant, beta 0, the dapo loss,
4 prompts x n=4 per step, temperature 1.0, `last_number_reward`), except the completion cap: 96 tokens instead of 48
(`--max_completion_length`). Measured on the base model (greedy, cap 200, 16 held-out questions of each trained kind
and 16 three-digit sums): the one-digit products and two-digit sums all ended within 86 and 79 tokens, and of the 15
right answers on the trained kinds that ended, 5 were longer than 48 tokens (51 to 102: prose such as "To calculate 7
x 8, we ...") and 1 longer than 96 (102 tokens); what runs past 96 is mostly a ramble that never ends. Two regimes,
every run paired by seed (the same seed gives every arm the same initial weights and the same prompt order):

- independent draws (`grpo_n4`, `ada_pos`, `ada_balance`, `dapo`, `ada_budget`): the training questions are drawn
  from the whole training split (`trl_ada.data.arithmetic_problems`, 2048 rows), a question rarely comes back; every
  run stops at the first step at which it has generated `--budget` completions;
- prompts return (`grpo_n4_pool`, `ada_budget_pool`, `ada_pos_pool`): a fixed pool of `--pool_size` distinct training
  questions (equal shares of the kinds), walked epoch after epoch, until `--pool_budget` completions (GRPO visits every
  question `pool_budget / (4 * pool_size)` times); the budgeted mode's prompt memory then knows the questions it
  skips, and the run records each skip (the prompt's remembered pass rate and visits at that moment) and the memory
  export at the end.

Held-out set (never trained on; `arithmetic_split_of` keeps the splits disjoint): every held-out one-digit sum and
product, `--two_digit` held-out two-digit sums, and `--three_digit` three-digit sums, a kind no run trains on (the
transfer probe, reported apart). Greedy accuracy on all of them before training and at the stop, and on the core
questions (`--core_per_kind`; 72 by default) at the first step past every `--eval_every` completions (a full
evaluation takes about 6 minutes on one core, a core one about 1), each question's result kept so that arms are
compared question by question; avg@k (k samples at temperature 1.0, seeded noise) on `--avg_per_kind` questions of
each trained kind before training and at the stop. Every completion generated is counted (benchmarks/equal_budget.py's counting trainers). Per step the run
keeps TRL's clipped ratio (completions cut at the cap) and mean completion length.

The report (`report`, recomputed from the JSON) gives per arm and per seed the measures at the stop, and per arm the
mean paired difference to GRPO with a 95% bootstrap interval over seeds and questions (`benchmarks/paired.py`) at
equal generated completions, equal optimizer steps and equal training seconds; an interval containing 0 reads "no
difference measured"; for the prompts-return regime, what the budgeted mode skipped and the trained groups with
signal in each half of a run, and the kinds of the remembered-unsolved prompts it skipped; last, the "Which
sampling should I use?" table of docs/benchmarks.md. Each run writes <output_dir>/results/<arm>-seed<seed>.json when
it ends, and the aggregated `--json` and `--plot` after every run; a rerun skips finished runs, and runs found in `--json` (same
settings) are restored into <output_dir>/results first, so the committed JSON alone is enough to resume. `touch
<output_dir>/STOP` lets every job finish the run in hand and start no other (a session about to end loses no
half-done run); delete it to go on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback  # noqa: E402

import equal_budget  # noqa: E402  (counting trainers, configs, parallel runs)
import learning  # noqa: E402  (recipe split, undisturbed evaluation, rounding, plot band)
from trl_ada import paired  # noqa: E402  (bootstrap paired differences)
from trl_ada.data import ARITHMETIC_KINDS, arithmetic_problems, arithmetic_split_of  # noqa: E402
from trl_ada.evaluate import _generate_transformers, evaluation_noise  # noqa: E402
from trl_ada.models import KNOWN_MODELS, materialize  # noqa: E402
from trl_ada.rewards import last_number_reward  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MAIN = ("grpo_n4", "ada_pos", "ada_balance", "dapo", "ada_budget")
POOL = ("grpo_n4_pool", "ada_budget_pool", "ada_pos_pool")
# Within a seed, the runs that answer most first: GRPO and the two contenders of each regime, then the rest.
ORDER = ("grpo_n4", "ada_pos", "ada_budget", "grpo_n4_pool", "ada_budget_pool", "dapo", "ada_balance", "ada_pos_pool")
BASELINE = {"independent draws": "grpo_n4", "prompts return": "grpo_n4_pool"}
REGIMES = {"independent draws": MAIN, "prompts return": POOL}
DEFAULT_RECIPE = os.path.join(os.path.dirname(HERE), "recipes", "SmolLM2-135M-Instruct", "arith_ada_balance.yaml")
# The arms: those of benchmarks/equal_budget.py (GRPO n=4, the reference rounds, DAPO, the budgeted mode).
ARMS = equal_budget.METHODS
# The arms of the "Which sampling should I use?" table (docs/benchmarks.md; the README shows four), in its order.
README_ARMS = ("ada_pos", "ada_balance", "dapo", "ada_budget", "ada_budget_pool", "ada_pos_pool")
TRAINED_KINDS = tuple(kind for kind, *_ in ARITHMETIC_KINDS)
TRANSFER = "3-digit +"
COLORS = dict(equal_budget.COLORS, grpo_n4_pool="#444444", ada_budget_pool="#1a9641", ada_pos_pool="#d95f02")
# What a resumed run must share with the runs it joins. Not the evaluation grid (--eval_every, --pool_eval_every):
# evaluations leave the training untouched (own seeded noise, the run's random state restored, their time excluded),
# so runs evaluated on different grids still pair; each run records its own.
SETTINGS = ("budget", "pool_budget", "pool_size", "two_digit", "three_digit",
            "avg_per_kind", "core_per_kind", "eval_k", "eval_seed", "task_seed", "max_completion_length", "config")


def base_arm(arm: str) -> str:
    return arm.removesuffix("_pool")


def config_fields(arm: str) -> str:
    """The AdaGRPOConfig fields an arm sets, as a user writes them: `sampling_budget=4.0, prompt_memory=True`."""
    fields = ", ".join(f"{name}={json.dumps(value) if isinstance(value, str) else repr(value)}"
                       for name, value in ARMS[base_arm(arm)][1].items())
    return f"`{fields}`" + (", prompts return" if arm in POOL else "")


# ---------------------------------------------------------------------------------------------------------------
# Questions.


def _questions(operator, low, high, split):
    return [(f"What is {a} {operator} {b}?", str(a + b if operator == "+" else a * b))
            for a in range(low, high + 1) for b in range(low, high + 1)
            if arithmetic_split_of(f"What is {a} {operator} {b}?") == split]


def _dataset(rows) -> Dataset:
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p, _, _ in rows],
                              "answer": [a for _, a, _ in rows], "problem": [p for p, _, _ in rows],
                              "kind": [k for _, _, k in rows]})


def held_out_set(two_digit: int, three_digit: int, avg_per_kind: int, seed: int) -> tuple[Dataset, Dataset]:
    """(greedy set, avg@k subset). Greedy: every held-out one-digit question of both kinds, `two_digit` held-out
    two-digit sums, `three_digit` three-digit sums (no training set holds that kind). The avg@k subset: the first
    `avg_per_kind` questions of each trained kind of the greedy set."""
    rng = random.Random(seed)
    rows = []
    for kind, operator, low, high in ARITHMETIC_KINDS:
        questions = _questions(operator, low, high, "test")
        if kind == "2-digit +":
            questions = rng.sample(questions, min(two_digit, len(questions)))
        else:
            rng.shuffle(questions)
        rows += [(p, a, kind) for p, a in questions]
    seen = set()
    while len(seen) < three_digit:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        if (a, b) not in seen:
            seen.add((a, b))
            rows.append((f"What is {a} + {b}?", str(a + b), TRANSFER))
    subset = [row for kind in TRAINED_KINDS for row in [r for r in rows if r[2] == kind][:avg_per_kind]]
    return _dataset(rows), _dataset(subset)


def core_indices(kinds, per_kind: int) -> list[int]:
    """The questions evaluated between the start and the stop (greedy only, to keep evaluation affordable): the first
    `per_kind` of each one-digit kind, twice that of two-digit sums, half of it of three-digit sums."""
    quota = {"1-digit +": per_kind, "1-digit x": per_kind, "2-digit +": 2 * per_kind, TRANSFER: per_kind // 2}
    taken = {kind: 0 for kind in quota}
    core = []
    for i, kind in enumerate(kinds):
        if taken[kind] < quota[kind]:
            taken[kind] += 1
            core.append(i)
    return core


def training_pool(size: int, seed: int) -> Dataset:
    """`size` distinct training-split questions, the kinds in equal shares (the first kinds take the remainder)."""
    rng = random.Random(seed)
    rows = []
    for i, (kind, operator, low, high) in enumerate(ARITHMETIC_KINDS):
        count = size // len(ARITHMETIC_KINDS) + (i < size % len(ARITHMETIC_KINDS))
        rows += [(p, a, kind) for p, a in rng.sample(_questions(operator, low, high, "train"), count)]
    rng.shuffle(rows)
    return _dataset(rows)


# ---------------------------------------------------------------------------------------------------------------
# Evaluation and training.


class HeldOut:
    """Greedy results on the held-out set (per question, per kind, and the share cut at the cap); with `full`, avg@k
    on the subset too."""

    def __init__(self, tokenizer, greedy_set, avg_set, k, max_new_tokens, seed, core):
        self.tokenizer, self.greedy_set, self.avg_set, self.k = tokenizer, greedy_set, avg_set, k
        self.max_new_tokens, self.seed, self.core = max_new_tokens, seed, core
        self.seconds = 0.0

    def _rewards(self, model, dataset, k, temperature):
        texts = _generate_transformers(model, self.tokenizer, list(dataset["prompt"]), k, self.max_new_tokens,
                                       temperature, 1.0, 32)
        rewards = last_number_reward(texts, answer=[a for a in dataset["answer"] for _ in range(k)])
        lengths = [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        per_question = [statistics.mean(rewards[i * k : (i + 1) * k]) for i in range(len(dataset))]
        return per_question, lengths

    def measure(self, model, full: bool) -> dict:
        """full: greedy on every question and avg@k; otherwise greedy on the core questions only."""
        start = time.time()
        with evaluation_noise(model, self.seed):
            if not full:
                core, _ = self._rewards(model, self.greedy_set.select(self.core), 1, 0.0)
                self.seconds += time.time() - start
                return with_core({"core_items": core}, self.greedy_set["kind"], self.core)
            greedy, lengths = self._rewards(model, self.greedy_set, 1, 0.0)
            kinds = self.greedy_set["kind"]
            result = {"greedy": statistics.mean(g for g, kind in zip(greedy, kinds) if kind != TRANSFER)}
            for kind in (*TRAINED_KINDS, TRANSFER):
                result[f"greedy {kind}"] = statistics.mean(g for g, kd in zip(greedy, kinds) if kd == kind)
            result["greedy clipped"] = statistics.mean(n >= self.max_new_tokens for n in lengths)
            result["greedy_items"] = greedy
            result["core_items"] = [greedy[i] for i in self.core]
            if full:
                sampled, _ = self._rewards(model, self.avg_set, self.k, 1.0)
                result["avg@k"] = statistics.mean(sampled)
                for kind in TRAINED_KINDS:
                    result[f"avg@k {kind}"] = statistics.mean(s for s, kd in zip(sampled, self.avg_set["kind"])
                                                              if kd == kind)
                result["avg_items"] = sampled
        self.seconds += time.time() - start
        return with_core(result, kinds, self.core)


def with_core(result: dict, kinds, core) -> dict:
    """Adds "greedy core": greedy on the core questions of the trained kinds, the measure every point has."""
    trained = [x for x, i in zip(result["core_items"], core) if kinds[i] != TRANSFER]
    return dict(result, **{"greedy core": statistics.mean(trained)})


class StopAtBudget(TrainerCallback):
    """Per step: completions generated and the training clock (evaluation excluded); greedy at the first step past
    every `every` completions; greedy and avg@k at the stop, the first step at which `budget` is reached."""

    def __init__(self, counted, held_out: HeldOut, budget, every, before, label):
        self.counted, self.held_out, self.budget, self.every, self.label = counted, held_out, budget, every, label
        self.next_eval, self.started = every, 0.0
        self.steps: list[dict] = []
        self.curve = [{"step": 0, "samples": 0, "tokens": 0, "seconds": 0.0, **before}]

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.time()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        seconds = time.time() - self.started - self.held_out.seconds
        samples = self.counted.samples
        self.steps.append({"samples": samples, "tokens": self.counted.tokens, "seconds": seconds})
        done = samples >= self.budget
        if samples >= self.next_eval or done:
            point = {"step": state.global_step, "samples": samples, "tokens": self.counted.tokens,
                     "seconds": seconds, **self.held_out.measure(model, full=done)}
            self.curve.append(point)
            print(f"[real_model_ci] {self.label} step {state.global_step:3d}  {samples} completions  {seconds:.0f} s"
                  f"  held-out greedy, core questions {100 * point['greedy core']:.1f}%" +
                  (f"; all: greedy {100 * point['greedy']:.1f}% (3-digit {100 * point[f'greedy {TRANSFER}']:.1f}%, "
                   f"cut at the cap {100 * point['greedy clipped']:.0f}%), avg@{self.held_out.k} "
                   f"{100 * point['avg@k']:.1f}%" if done else ""), flush=True)
            while self.next_eval <= samples:
                self.next_eval += self.every
        if done:
            control.should_training_stop = True


def record_skips(trainer) -> list[dict]:
    """The prompts the budgeted sampler skips, as it skips them: the trainer ages their memory (`forget`) right after
    the screening, so a wrapper around it sees each one with its remembered pass rate and visits at that moment."""
    skipped: list[dict] = []
    memory = getattr(trainer, "prompt_memory", None)
    if memory is None:
        return skipped
    forget = memory.forget

    def recording_forget(keys, factor):
        for key in keys:
            skipped.append({"step": trainer.state.global_step, "prompt_hash": f"{key:016x}",
                            "pass_rate": memory.pass_rate(key), "visits": memory.visits(key)})
        return forget(keys, factor)

    memory.forget = recording_forget
    return skipped


def train_one(arm, seed, model_dir, args, before):
    script, shared, ada = learning.recipe_kwargs(args.config)
    shared["model_init_kwargs"] = {"dtype": "float32"}  # the recipe's dtype line is a ModelConfig field
    shared["max_completion_length"] = args.max_completion_length
    prompts_per_step = shared["per_device_train_batch_size"] // shared["num_generations"]
    pool = arm in POOL
    if pool:
        train = training_pool(args.pool_size, args.task_seed)
    else:
        train = arithmetic_problems(script["synthetic_num_examples"], args.task_seed, split="train")
    budget, every = (args.pool_budget, args.pool_eval_every) if pool else (args.budget, args.eval_every)
    greedy_set, avg_set = held_out_set(args.two_digit, args.three_digit, args.avg_per_kind, args.task_seed)
    output_dir = os.path.join(args.output_dir, f"{arm}-seed{seed}")
    max_steps = math.ceil(budget / (prompts_per_step * 4)) + 5  # every arm makes >= 4 per prompt a step
    config = equal_budget.make_config(base_arm(arm), seed, max_steps, output_dir, shared, ada, prompts_per_step,
                                      methods=ARMS)
    trainer_class = equal_budget._CountingGRPO if base_arm(arm) == "grpo_n4" else equal_budget._CountingAda
    counted = equal_budget._Counted()
    held = HeldOut(AutoTokenizer.from_pretrained(model_dir), greedy_set, avg_set, args.eval_k,
                   args.max_completion_length, args.eval_seed, core_indices(greedy_set["kind"], args.core_per_kind))
    run = StopAtBudget(counted, held, budget, every, before, f"{arm} seed {seed}")
    trainer = trainer_class(model=model_dir, reward_funcs=[last_number_reward], args=config, train_dataset=train,
                            callbacks=[run])
    trainer.counted = counted
    trainer.remove_callback(PrinterCallback)
    skipped = record_skips(trainer)
    print(f"[real_model_ci] {arm} seed {seed}: until {budget} generated completions", flush=True)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "step_time" in h]
    grpo = base_arm(arm) == "grpo_n4"
    export = os.path.join(output_dir, "prompt_memory.parquet")
    memory = Dataset.from_parquet(export).to_list() if os.path.exists(export) else None
    return {"method": arm, "seed": seed, "regime": "prompts return" if pool else "independent draws",
            "held_out_before": measures(before), "held_out_after": measures(run.curve[-1]),
            "steps": len(logs), "generated_samples": counted.samples, "generated_tokens": counted.tokens,
            "train_seconds": run.steps[-1]["seconds"], "curve": run.curve, "per_step": run.steps,
            "round1_reward": [h["reward"] if grpo else h["sampling/iid_reward"] for h in logs],
            "signal": [1.0 - h["frac_reward_zero_std"] if grpo else h["sampling/effective_prompt_ratio"] for h in logs],
            "mean_length": [h.get("completions/mean_length") for h in logs],
            "clipped_ratio": [h.get("completions/clipped_ratio") for h in logs],
            "prompts_drawn": [h.get("sampling/prompts_drawn", float(prompts_per_step)) for h in logs],
            "prompts_skipped": [h.get("sampling/prompts_skipped", 0.0) for h in logs],
            "eval_every": every, "skipped": skipped, "memory_export": memory,
            "train_questions": len(set(train["problem"])) if pool else None}


def measures(point: dict) -> dict:
    """The held-out measures of a curve point, without its position and per-question lists."""
    return {k: v for k, v in point.items()
            if k not in ("step", "samples", "tokens", "seconds", "greedy_items", "avg_items", "core_items")}


# ---------------------------------------------------------------------------------------------------------------
# Report.


def kind_weights(kinds) -> np.ndarray:
    """Per question: 1 / (questions of its kind), 0 for the transfer probe: the three trained kinds count equally in
    the headline measure, as in the retired benchmarks/real_model.py's equal shares, however many questions each has."""
    return np.array([0.0 if kind == TRANSFER else 1.0 / kinds.count(kind) for kind in kinds])


def headline(items, kinds) -> float:
    """Greedy accuracy, the mean of the trained kinds' accuracies (each kind counts equally)."""
    weights = kind_weights(list(kinds))
    return float(np.dot(weights, items) / weights.sum())


def _pct(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{100 * statistics.mean(values):.1f}%" + (f" ± {100 * statistics.stdev(values):.1f}"
                                                       if len(values) > 1 else "")


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def comparison(runs, arm, baseline, axis, key, mask, x=None, weights=None):
    """The paired difference arm - baseline on the `key` items selected by `mask` at `x` on `axis` (default: the
    furthest point both arms' paired runs reach; axis "stop": each run's last point, where it reached its budget),
    over the seeds both hold; (None, x) if they share none."""
    mine = {r["seed"]: r for r in runs if r["method"] == arm}
    base = {r["seed"]: r for r in runs if r["method"] == baseline}
    seeds = sorted(set(mine) & set(base))
    if not seeds:
        return None, None
    if x is None and axis != "stop":
        x = min(min(r["curve"][-1][axis] for r in (mine[s], base[s])) for s in seeds)
    rows = []
    for s in seeds:
        if axis == "stop":
            a, b = (np.asarray(r["curve"][-1][key], dtype=float) for r in (mine[s], base[s]))
        else:
            a = paired.interpolate_items(mine[s]["curve"], axis, key, x)
            b = paired.interpolate_items(base[s]["curve"], axis, key, x)
        if a is None or b is None:
            return None, x
        d = a - b
        rows.append(d[mask] if mask is not None else d)
    return paired.paired_difference(np.stack(rows), None if weights is None else weights[mask]), x


def report(saved):
    runs, k = saved["runs"], saved["eval_k"]
    kinds = saved["question_kinds"]
    trained = np.array([kind != TRANSFER for kind in kinds])
    transfer = ~trained
    core = saved["core_questions"]
    core_trained = trained[core]
    core_kinds = [kinds[i] for i in core]
    weights, core_weights = kind_weights(kinds), kind_weights(core_kinds)
    macro = {"greedy": lambda a: statistics.mean(a[f"greedy {kind}"] for kind in TRAINED_KINDS)}
    before = saved["held_out_before"]
    readme = {}  # arm -> (seeds, equal-completions cell, equal-steps cell), for the README's table
    print(f"\nHeld-out: {int(trained.sum())} questions of the trained kinds (" +
          ", ".join(f"{kinds.count(kind)} {kind}" for kind in TRAINED_KINDS) +
          f"), {int(transfer.sum())} {TRANSFER} (transfer, never trained); avg@{k} on "
          f"{saved['avg_per_kind']} per trained kind; between start and stop, greedy on {int(core_trained.sum())} core "
          f"questions of the trained kinds (and {len(core) - int(core_trained.sum())} {TRANSFER}). Completion cap "
          f"{saved['max_completion_length']} tokens. "
          "The greedy column is the mean of the three trained kinds' accuracies (each kind counts equally; so do the "
          "paired differences of greedy). "
          f"Before training: greedy {100 * macro['greedy'](before):.1f}%, "
          f"{TRANSFER} {100 * before[f'greedy {TRANSFER}']:.1f}%, avg@{k} {100 * before['avg@k']:.1f}%, greedy answers cut at the cap {100 * before['greedy clipped']:.1f}%.")
    for regime, arms in REGIMES.items():
        rs_all = [r for r in runs if r.get("regime") == regime]
        arms = [a for a in arms if any(r["method"] == a for r in rs_all)]
        if not arms:
            continue
        budget = saved["pool_budget"] if regime == "prompts return" else saved["budget"]
        print(f"\n## {regime}: every run stopped at {budget} generated completions\n")
        print(f"| arm | seeds | greedy | " + " | ".join(f"greedy {kind}" for kind in TRAINED_KINDS) +
              f" | greedy {TRANSFER} (transfer) | avg@{k} | steps | completions | training s | clipped ratio "
              "(training) | mean length (training) | groups with signal | greedy cut at cap (held-out) |")
        print("|---|---:|" + "---:|" * (len(TRAINED_KINDS) + 10))
        for arm in arms:
            rs = [r for r in rs_all if r["method"] == arm]
            after = [r["held_out_after"] for r in rs]
            print(f"| {arm} | {len(rs)} | {_pct([macro['greedy'](a) for a in after])} | " +
                  " | ".join(_pct([a[f'greedy {kind}'] for a in after]) for kind in TRAINED_KINDS) +
                  f" | {_pct([a[f'greedy {TRANSFER}'] for a in after])} | {_pct([a['avg@k'] for a in after])} | "
                  f"{statistics.mean(r['steps'] for r in rs):.1f} | "
                  f"{statistics.mean(r['generated_samples'] for r in rs):.0f} | "
                  f"{statistics.mean(r['train_seconds'] for r in rs):.0f} | "
                  f"{_pct([_mean(r['clipped_ratio']) for r in rs])} | "
                  f"{statistics.mean(_mean(r['mean_length']) for r in rs):.1f} | "
                  f"{_pct([_mean(r['signal']) for r in rs])} | {_pct([a['greedy clipped'] for a in after])} |")
        seeds = sorted({r["seed"] for r in rs_all})
        print(f"\nPer seed (greedy / {TRANSFER} / avg@{k} at the stop; steps, training seconds):\n")
        print("| arm | " + " | ".join(f"seed {s}" for s in seeds) + " |")
        print("|---|" + "---|" * len(seeds))
        for arm in arms:
            by_seed = {r["seed"]: r for r in rs_all if r["method"] == arm}
            cells = []
            for s in seeds:
                r = by_seed.get(s)
                cells.append("-" if r is None else
                             f"{100 * macro['greedy'](r['held_out_after']):.1f}% / "
                             f"{100 * r['held_out_after'][f'greedy {TRANSFER}']:.1f}% / "
                             f"{100 * r['held_out_after']['avg@k']:.1f}% ({r['steps']}, {r['train_seconds']:.0f} s)")
            print(f"| {arm} | " + " | ".join(cells) + " |")
        baseline = BASELINE[regime]
        others = [a for a in arms if a != baseline]
        if baseline not in arms or not others:
            continue
        print(f"\nPaired difference to {baseline} (points; mean over the seeds both hold, 95% bootstrap interval over "
              "seeds and questions; an interval containing 0 reads \"no difference measured\"). Equal completions: "
              f"at the stop, the first step past {budget} generated completions (all {int(trained.sum())} questions of "
              f"the trained kinds); equal steps and equal training seconds: at the furthest point both runs of a pair "
              f"reach, on the {int(core_trained.sum())} core questions, each interpolated linearly between "
              "evaluations:\n")
        print(f"| arm | seeds | greedy, equal completions ({budget}) | greedy, equal steps | greedy, equal training "
              f"seconds | avg@{k}, equal completions | {TRANSFER} (transfer), equal completions |")
        print("|---|---:|---|---|---|---|---|")
        step_of = {}  # arm -> the step of its equal-steps comparison, for the per-seed table
        for arm in others:
            at_samples, _ = comparison(rs_all, arm, baseline, "stop", "greedy_items", trained, weights=weights)
            at_steps, steps = comparison(rs_all, arm, baseline, "step", "core_items", core_trained,
                                         weights=core_weights)
            at_seconds, seconds = comparison(rs_all, arm, baseline, "seconds", "core_items", core_trained,
                                             weights=core_weights)
            avg, _ = comparison(rs_all, arm, baseline, "stop", "avg_items", None)
            probe, _ = comparison(rs_all, arm, baseline, "stop", "greedy_items", transfer)
            if at_samples is None:
                continue

            def cell(result, where=""):
                return "-" if result is None else paired.describe(result) + where

            print(f"| {arm} | {at_samples['seeds']} | {cell(at_samples)} | {cell(at_steps, f' (step {steps})')} | "
                  f"{cell(at_seconds, f' ({seconds:.0f} s)')} | {cell(avg)} | {cell(probe)} |")
            readme[arm] = (at_samples["seeds"], cell(at_samples), cell(at_steps, f", at step {steps}"))
            step_of[arm] = steps
        # A mean over five seeds can rest on one: each seed's own difference, at the same two points as above.
        print(f"\nPer seed, paired difference to {baseline} (greedy, points): at equal completions (at the stop, all "
              f"{int(trained.sum())}) / at equal steps (the step above, {int(core_trained.sum())} core questions):\n")
        print("| arm | " + " | ".join(f"seed {s}" for s in seeds) + " |")
        print("|---|" + "---|" * len(seeds))
        for arm, steps in step_of.items():
            cells = []
            for s in seeds:
                pair = [r for r in rs_all if r["seed"] == s]
                at_stop, _ = comparison(pair, arm, baseline, "stop", "greedy_items", trained, weights=weights)
                at_step, _ = comparison(pair, arm, baseline, "step", "core_items", core_trained, x=steps,
                                        weights=core_weights)
                cells.append("-" if at_stop is None else f"{100 * at_stop['mean']:+.1f} / " +
                             ("-" if at_step is None else f"{100 * at_step['mean']:+.1f}"))
            print(f"| {arm} | " + " | ".join(cells) + " |")
        print(f"\nPer kind, at the stop (paired difference to {baseline}, greedy, points, 95% interval):\n")
        print("| arm | " + " | ".join(TRAINED_KINDS) + " |")
        print("|---|" + "---|" * len(TRAINED_KINDS))
        for arm in others:
            masks = [np.array([k == kind for k in kinds]) for kind in TRAINED_KINDS]
            cells = [comparison(rs_all, arm, baseline, "stop", "greedy_items", mask)[0] if mask.any() else None
                     for mask in masks]
            if any(cells):
                print(f"| {arm} | " + " | ".join("-" if c is None else paired.describe(c) for c in cells) + " |")
        if regime == "prompts return":
            memory_table(rs_all, arms, saved)
    rows = [arm for arm in README_ARMS if arm in readme]
    if rows:
        print(f"\nThe README's table (\"Which sampling should I use?\"): paired difference to GRPO n=4, greedy, "
              "points, 95% interval:\n")
        print(f"| sampler (`AdaGRPOConfig`) | seeds | equal generated completions (all {int(trained.sum())}) | equal "
              f"optimizer steps ({int(core_trained.sum())} core questions, the last step both reach) |")
        print("|---|---:|---|---|")
        for arm in rows:
            seeds, at_samples, at_steps = readme[arm]
            print(f"| {config_fields(arm)} | {seeds} | {at_samples} | {at_steps} |")


def memory_table(rs_all, arms, saved):
    print(f"\nHow often the prompts returned and what the budgeted mode skipped (pool of {saved['pool_size']} "
          "questions; visits = prompts drawn / pool size; pass rates are the memory's posterior means; the trained "
          "groups with signal and their round-1 reward (the pass rate of what was sampled) in the first and the "
          "second half of the run's steps):\n")
    print("| arm | seed | visits per question | prompts skipped | skipped / drawn | skipped prompts' remembered pass "
          "rate (mean; < 0.2 / 0.2-0.8 / > 0.8) | remembered prompts at the end: pass rate < 0.2 / 0.2-0.8 / > 0.8 | "
          "groups with signal, first / second half | round-1 reward, first / second half | skipped with pass rate "
          "< 0.2, by kind (" + " / ".join(TRAINED_KINDS) + ") |")
    print("|---|---:|---:|---:|---:|---|---|---|---|---|")
    pool = training_pool(saved["pool_size"], saved.get("task_seed", 0))
    kind_of = dict(zip(pool["problem"], pool["kind"]))
    for arm in arms:
        for r in sorted((r for r in rs_all if r["method"] == arm), key=lambda r: r["seed"]):
            drawn = sum(r["prompts_drawn"])
            skipped = sum(r["prompts_skipped"])
            rates = [s["pass_rate"] for s in r.get("skipped") or []]
            bands = (lambda xs: f"{sum(x < 0.2 for x in xs)} / {sum(0.2 <= x <= 0.8 for x in xs)} / "
                                f"{sum(x > 0.8 for x in xs)}")
            skip_cell = "-" if not rates else f"{statistics.mean(rates):.2f} ({bands(rates)})"
            export = r.get("memory_export")
            end_cell = "-" if not export else bands([row["pass_rate"] for row in export])
            half = len(r["signal"]) // 2
            halves = (lambda xs: "-" if half == 0 else f"{100 * _mean(xs[:half]):.0f}% / {100 * _mean(xs[half:]):.0f}%")
            # the memory export names each remembered prompt; a skip record carries only its hash
            text_of = {row.get("prompt_hash"): row.get("prompt") for row in export or []}
            low = [kind_of.get(text_of.get(skip["prompt_hash"])) for skip in r.get("skipped") or []
                   if skip["pass_rate"] < 0.2]
            low_cell = "-" if not low else " / ".join(str(low.count(kind)) for kind in TRAINED_KINDS)
            print(f"| {arm} | {r['seed']} | {drawn / saved['pool_size']:.1f} | {skipped:.0f} | "
                  f"{100 * skipped / drawn:.0f}% | {skip_cell} | {end_cell} | {halves(r['signal'])} | "
                  f"{halves(r['round1_reward'])} | {low_cell} |")


def plot(saved, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes_x = (("step", "optimizer step"), ("samples", "generated completions"), ("seconds", "training seconds"))
    core_kinds = [saved["question_kinds"][i] for i in saved["core_questions"]]
    fig, axes = plt.subplots(len(REGIMES), len(axes_x), figsize=(14, 7), dpi=80, squeeze=False)
    for row, (regime, arms) in enumerate(REGIMES.items()):
        for arm in arms:
            rs = [r for r in saved["runs"] if r["method"] == arm]
            if not rs:
                continue
            for column, (axis, label) in enumerate(axes_x):
                top = min(r["curve"][-1][axis] for r in rs)
                grid = [top * i / 40 for i in range(40)] + [top]
                ys = [[learning.interpolate([p[axis] for p in r["curve"]],
                                            [headline(p["core_items"], core_kinds) for p in r["curve"]], x)
                       for x in grid] for r in rs]
                learning.band(axes[row][column], [grid] * len(rs), ys, COLORS[arm],
                              f"{arm} ({len(rs)} seed{'s' if len(rs) > 1 else ''})")
        for column, (_, label) in enumerate(axes_x):
            ax = axes[row][column]
            ax.set_xlabel(label)
            ax.set_ylabel(f"held-out greedy, core ({regime})")
            ax.axhline(headline(saved["runs"][0]["curve"][0]["core_items"], core_kinds), color="k", lw=0.6, ls=":")
        if axes[row][0].get_legend_handles_labels()[0]:  # a regime with no run yet has nothing to name
            axes[row][0].legend(fontsize=8)
    fig.suptitle(f"{saved['model']} on chat arithmetic: held-out greedy on the core questions, kinds weighted "
                 "equally (mean and min-max over seeds)\ntop: questions drawn from the whole split; bottom: a fixed "
                 "pool that returns")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------


def settings_of(args) -> dict:
    return {name: (os.path.relpath(args.config) if name == "config" else getattr(args, name)) for name in SETTINGS}


def restore(json_path, settings, result_path, before_path):
    """Write back the per-run results (and the measures before training) of a previous aggregated JSON with the same
    settings, so that a fresh checkout resumes from the committed JSON; returns how many runs it restored."""
    if not os.path.exists(json_path):
        return 0
    with open(json_path) as f:
        saved = json.load(f)
    if {name: saved.get("settings", {}).get(name) for name in settings} != settings:
        print(f"[real_model_ci] {json_path} has other settings: nothing restored from it", flush=True)
        return 0
    if "before" in saved and not os.path.exists(before_path):
        with open(before_path, "w") as f:
            json.dump(saved["before"], f)
    restored = 0
    for run in saved["runs"]:
        path = result_path(run["method"], run["seed"])
        if not os.path.exists(path):
            with open(path, "w") as f:
                json.dump(run, f)
            restored += 1
    return restored


def evaluate_saved(args):
    """The before/after table of a model trained elsewhere (the demo), on this benchmark's held-out set."""
    greedy_set, avg_set = held_out_set(args.two_digit, args.three_digit, args.avg_per_kind, args.task_seed)
    with open(args.json) as f:
        saved = json.load(f)
    held_out_settings = ("two_digit", "three_digit", "avg_per_kind", "task_seed", "eval_k", "eval_seed",
                         "max_completion_length")
    if any(saved["settings"].get(name) != getattr(args, name) for name in held_out_settings):
        raise SystemExit(f"--evaluate: {args.json} measured the base model with other held-out settings")
    before = saved["held_out_before"]
    held = HeldOut(AutoTokenizer.from_pretrained(args.evaluate), greedy_set, avg_set, args.eval_k,
                   args.max_completion_length, args.eval_seed, core_indices(greedy_set["kind"], args.core_per_kind))
    after = measures(held.measure(AutoModelForCausalLM.from_pretrained(args.evaluate, dtype=torch.float32), True))
    with open(os.path.join(args.evaluate, "held_out_ci.json"), "w") as f:
        json.dump({"before": before, "after": after, "seconds": held.seconds}, f, indent=1)
    counts = {kind: list(greedy_set["kind"]).count(kind) for kind in (*TRAINED_KINDS, TRANSFER)}
    print(f"\n| held-out ({len(greedy_set)} questions never trained on; greedy on all, avg@{args.eval_k} at T=1.0 on "
          f"{len(avg_set)}) | before RL | after RL |\n|---|---:|---:|")
    for key in ("greedy", *(f"greedy {kind}" for kind in counts), "greedy clipped", "avg@k",
                *(f"avg@k {kind}" for kind in TRAINED_KINDS)):
        measure, _, kind = key.partition(" ")
        label = {"greedy": "**greedy, trained kinds**", "avg@k": f"**avg@{args.eval_k}, trained kinds**",
                 "greedy clipped": "greedy answers cut at the cap"}.get(key)
        label = label or f"{measure if measure == 'greedy' else f'avg@{args.eval_k}'}, {kind}" + (
            f" ({counts[kind]})" if measure == "greedy" else "") + (" (transfer)" if kind == TRANSFER else "")
        print(f"| {label} | {100 * before[key]:.1f}% | {100 * after[key]:.1f}% |")
    print(f"\n({held.seconds:.0f} s to evaluate; {os.path.join(args.evaluate, 'held_out_ci.json')})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="runs/bench-real-model-ci")
    parser.add_argument("--model", default=KNOWN_MODELS["smollm2"].default_dir,
                        help="the materialised model folder (created when missing)")
    parser.add_argument("--config", default=DEFAULT_RECIPE, help="the shared recipe (YAML)")
    parser.add_argument("--budget", type=int, default=320, help="generated completions per run (independent draws)")
    parser.add_argument("--eval_every", type=int, default=64,
                        help="greedy on the core questions every this many completions (GRPO: every 4 steps), so "
                             "that equal steps and equal seconds compare measured points, not a line from the start")
    parser.add_argument("--pool_budget", type=int, default=640, help="generated completions per run (prompts return)")
    parser.add_argument("--pool_eval_every", type=int, default=128)
    parser.add_argument("--pool_size", type=int, default=32, help="distinct training questions (prompts return)")
    parser.add_argument("--two_digit", type=int, default=200, help="held-out two-digit sums")
    parser.add_argument("--three_digit", type=int, default=40, help="three-digit sums (transfer probe)")
    parser.add_argument("--avg_per_kind", type=int, default=8, help="avg@k questions per trained kind")
    parser.add_argument("--core_per_kind", type=int, default=16,
                        help="core questions (greedy between start and stop): this many of each one-digit kind, "
                             "twice as many two-digit sums, half as many three-digit sums")
    parser.add_argument("--eval_k", type=int, default=4, help="samples per question of avg@k")
    parser.add_argument("--eval_seed", type=int, default=1234)
    parser.add_argument("--task_seed", type=int, default=0, help="seed of the training, pool and held-out questions")
    parser.add_argument("--max_completion_length", type=int, default=96)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--arms", nargs="+", default=list(ORDER), choices=list(ORDER))
    equal_budget.add_parallel_run_arguments(parser)
    parser.add_argument("--json", default=os.path.join(HERE, "real_model_ci.json"))
    parser.add_argument("--plot", default=os.path.join(HERE, "real_model_ci.png"))
    parser.add_argument("--from_json", default=None, help="re-print the tables and redraw the plot, without training")
    parser.add_argument("--evaluate", default=None, metavar="MODEL_DIR",
                        help="measure a trained model folder (e.g. make demo's runs/demo/ada) on this held-out set "
                             "beside the base model's measures in --json; writes MODEL_DIR/held_out_ci.json")
    args = parser.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        report(saved)
        plot(saved, args.plot)
        print(f"\nplot: {args.plot}")
        return 0
    torch.set_num_threads(args.threads)
    if args.evaluate:
        evaluate_saved(args)
        return 0
    started = time.time()
    os.makedirs(os.path.join(args.output_dir, "results"), exist_ok=True)
    before_path = os.path.join(args.output_dir, "before.json")
    # seed-major, the arms in ORDER within a seed: an interrupted run holds whole seeds of the first arms
    todo = [(arm, s) for s in args.seeds for arm in ORDER if arm in args.arms]
    settings = settings_of(args)

    def result_path(arm, seed):
        return os.path.join(args.output_dir, "results", f"{arm}-seed{seed}.json")

    greedy_set, avg_set = held_out_set(args.two_digit, args.three_digit, args.avg_per_kind, args.task_seed)
    core = core_indices(greedy_set["kind"], args.core_per_kind)
    if args.worker is None:
        model_dir = materialize("smollm2", args.model)
        restored = restore(args.json, settings, result_path, before_path)
        if restored:
            print(f"[real_model_ci] {restored} finished runs restored from {args.json}", flush=True)
        if not os.path.exists(before_path):  # the same model and questions for every arm and seed: once
            held = HeldOut(AutoTokenizer.from_pretrained(model_dir), greedy_set, avg_set, args.eval_k,
                           args.max_completion_length, args.eval_seed, core)
            before = held.measure(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), full=True)
            with open(before_path, "w") as f:
                json.dump({"model_dir": model_dir, "held_out_before": before, "seconds": held.seconds}, f)
    with open(before_path) as f:
        meta = json.load(f)
    if "core_items" not in meta["held_out_before"]:  # measured before the core questions existed: the same items
        items = meta["held_out_before"]["greedy_items"]
        meta["held_out_before"] = with_core(dict(meta["held_out_before"], core_items=[items[i] for i in core]),
                                            greedy_set["kind"], core)
    if args.worker is None:
        print(f"[real_model_ci] before training: held-out greedy {100 * meta['held_out_before']['greedy']:.1f}% "
              f"({meta['seconds']:.0f} s to evaluate)", flush=True)

    def finished():
        # every run in the results folder, not only this invocation's seeds and arms: a partial rerun (--seeds 1,
        # --arms dapo) must not drop the others from the JSON that the report and the next checkout read
        names = os.listdir(os.path.join(args.output_dir, "results"))
        seeds = sorted(set(args.seeds) | {int(name.rsplit("-seed", 1)[1][:-len(".json")])
                                          for name in names if "-seed" in name and name.endswith(".json")})
        return equal_budget.finished_runs([(arm, s) for s in seeds for arm in ORDER], result_path)

    def aggregate():
        runs = finished()
        saved = {"model": os.path.basename(os.path.normpath(meta["model_dir"])), "settings": settings,
                 **{name: value for name, value in settings.items() if name != "config"},
                 "eval_every": args.eval_every, "pool_eval_every": args.pool_eval_every,
                 "recipe": settings["config"], "threads": args.threads, "jobs": args.jobs,
                 "question_kinds": list(greedy_set["kind"]), "questions": list(greedy_set["problem"]),
                 "core_questions": core,
                 "avg_questions": list(avg_set["problem"]),
                 "complete": all(os.path.exists(result_path(arm, s)) for arm, s in todo),
                 "held_out_before": measures(meta["held_out_before"]), "before": meta, "runs": runs}
        # written whole, then renamed: with --jobs > 1 every worker rewrites both after each of its runs
        partial = f"{args.json}.{os.getpid()}.tmp"
        with open(partial, "w") as f:
            json.dump(learning.rounded(saved), f)
        os.replace(partial, args.json)
        if runs:
            root, extension = os.path.splitext(args.plot)  # matplotlib reads the format from the extension
            partial = f"{root}.{os.getpid()}.tmp{extension}"
            plot(saved, partial)
            os.replace(partial, args.plot)
        return saved

    def train(arm, seed):
        return train_one(arm, seed, meta["model_dir"], args, meta["held_out_before"])

    if args.jobs > 1 and args.worker is None:  # start the workers (this script with --worker i/jobs) and wait
        equal_budget.run_pending(todo, result_path, train, args.jobs, None, os.path.abspath(__file__), argv)
    else:  # one process, or worker i of N (every N-th run): the aggregated JSON and plot rewritten after every run
        index, count = (0, 1) if args.worker is None else (int(x) for x in args.worker.split("/"))
        stop = os.path.join(args.output_dir, "STOP")
        for arm, seed in todo[index::count]:
            if os.path.exists(result_path(arm, seed)):
                continue
            if os.path.exists(stop):  # a session about to end: the run in hand finished, none started to be lost
                print(f"[real_model_ci] {stop} exists: no new run started (delete it to go on)", flush=True)
                break
            run = train(arm, seed)
            with open(result_path(arm, seed), "w") as f:
                json.dump(learning.rounded(run), f)
            aggregate()
            print(f"[real_model_ci] {arm} seed {seed} done; {time.time() - started:.0f} s since start", flush=True)
        if args.worker is not None:
            return 0
    saved = aggregate()
    if saved["runs"]:
        report(saved)
    print(f"\nresults: {args.json}  plot: {args.plot}  wall time {time.time() - started:.0f} s "
          f"({len(saved['runs'])} runs in the JSON; of the {len(todo)} asked for, "
          f"{sum(os.path.exists(result_path(arm, s)) for arm, s in todo)} finished)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
