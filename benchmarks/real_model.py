"""A real pretrained model on a CPU, every arm at the same number of generated completions (issue 21, item 2).

    python benchmarks/real_model.py --jobs 2 --seeds 0 1 2 --budget 640     # the full run; not in CI
    python benchmarks/real_model.py --methods grpo_n4 ada_balance --seeds 0 --budget 96 --eval_every 48   # a short one
    python benchmarks/real_model.py --from_json benchmarks/real_model.json  # tables and plot of a finished run

SmolLM2-135M-Instruct (the plain fp32 folder `python -m trl_ada.models smollm2` writes; created when missing) learns
chat arithmetic (`trl_ada.data.arithmetic_problems`: "What is 7 + 5?", "What is 3 x 8?", "What is 47 + 38?" in equal
shares) graded by `last_number_reward`, with the settings of `recipes/SmolLM2-135M-Instruct/arith_*.yaml`: full
fine-tuning in fp32, learning rate 3e-5 constant, beta 0, the dapo loss, 4 prompts x n=4 per step, 48 completion
tokens, temperature 1.0. Arms (the same training questions in the same order for a seed, the same optimiser, loss and
learning rate; only the sampler differs; the overrides of benchmarks/equal_budget.py on the recipe):

- `grpo_n4`: TRL's own `GRPOTrainer`, n = 4;
- `ada_balance`, `ada_pos`: Reinforce-Ada balanced / positive_focused, reference settings (M=8, R=4);
- `dapo`: `AdaGRPOTrainer`, adaptive rounds off, `dynamic_sampling=True` (DAPO's filter and refill);
- `ada_budget`: `sampling_budget=4.0` (GRPO parity) with `prompt_memory=True`;
- `ada_budget_kind`: the same with `prompt_memory_group_column="kind"`: an unseen question starts from the pass-rate
  distribution of its kind (`trl_ada.memory.GroupPrior`), so the screening works before any question comes back.

Every generated completion is counted where it is made (benchmarks/equal_budget.py's counting trainers: rounds,
refills, padding), and every run stops at the first step at which its count reaches `--budget`. Held-out accuracy on
`--eval_examples` questions of the disjoint test split (the same for every arm and seed): greedy accuracy and avg@k
(k samples at temperature 1.0, the same seeded noise for every model), per problem kind, before training, at the first
step past every `--eval_every` generated completions and at the stop; evaluation time is not counted in the training
wall time. Results: one JSON per (arm, seed) under <output_dir>/results (a rerun resumes), all of them in `--json`,
curves against steps, generated completions and training seconds in `--plot`.
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
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback  # noqa: E402

import equal_budget  # noqa: E402  (arms, counting trainers, resumable parallel runs)
import learning  # noqa: E402  (recipe split, undisturbed evaluation, table and plot helpers)
from trl_ada.data import arithmetic_problems  # noqa: E402
from trl_ada.evaluate import evaluation_noise, held_out_accuracy  # noqa: E402
from trl_ada.models import KNOWN_MODELS, materialize  # noqa: E402
from trl_ada.rewards import last_number_reward  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_RECIPE = os.path.join(os.path.dirname(HERE), "recipes", "SmolLM2-135M-Instruct", "arith_ada_balance.yaml")
METHODS = ("grpo_n4", "ada_balance", "ada_pos", "dapo", "ada_budget", "ada_budget_kind", "ada_budget_x2")
# The arms of benchmarks/equal_budget.py, and two for issue 21, item 3 (a run this short rarely meets a prompt twice,
# so the per-prompt memory screens nothing): the budgeted mode whose prompts start from their kind's pass-rate
# distribution, and the budgeted mode at twice GRPO's samples per prompt, whose surplus tops up the uniform groups
# (leaning toward hard prompts), as positive_focused's extra rounds do.
ARMS = dict(equal_budget.METHODS,
            ada_budget_kind=("ada", {"sampling_budget": 4.0, "prompt_memory": True, "prompt_memory_group_column": "kind"}),
            ada_budget_x2=("ada", {"sampling_budget": 8.0, "prompt_memory": True}))
MEASURES = ("greedy", "avg@k")


class HeldOutArithmetic:
    """Greedy accuracy and avg@k of a model on the held-out questions, overall and per problem kind."""

    def __init__(self, tokenizer, dataset, k, max_new_tokens, seed):
        self.tokenizer, self.dataset, self.k = tokenizer, dataset, k
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.seconds = 0.0

    def measure(self, model) -> dict:
        start = time.time()
        with evaluation_noise(model, self.seed):
            result = held_out_accuracy(model, self.tokenizer, self.dataset, k=self.k,
                                       max_new_tokens=self.max_new_tokens, reward_func=last_number_reward)
        self.seconds += time.time() - start
        return result


class EqualSamplesRun(TrainerCallback):
    """Per step: the completions generated and the training clock (evaluation excluded); the held-out measures at the
    first step past every `every` generated completions; the stop once `budget` is reached."""

    def __init__(self, counted, held_out: HeldOutArithmetic, budget, every, before, label):
        self.counted, self.held_out, self.budget, self.every, self.label = counted, held_out, budget, every, label
        self.next_eval = every
        self.started = 0.0
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
            point = {"step": state.global_step, "samples": samples, "tokens": self.counted.tokens, "seconds": seconds,
                     **self.held_out.measure(model)}
            self.curve.append(point)
            print(f"[real_model] {self.label} step {state.global_step:3d}  {samples} completions  {seconds:.0f} s  "
                  f"held-out greedy {100 * point['greedy']:.1f}%  avg@{self.held_out.k} {100 * point['avg@k']:.1f}%",
                  flush=True)
            while self.next_eval <= samples:
                self.next_eval += self.every
        if done:
            control.should_training_stop = True


def train_one(method, seed, model_dir, args, before):
    script, shared, ada = learning.recipe_kwargs(args.config)
    shared["model_init_kwargs"] = {"dtype": "float32"}  # the recipe's dtype line is a ModelConfig field
    shared["max_completion_length"] = args.max_completion_length
    prompts_per_step = shared["per_device_train_batch_size"] // shared["num_generations"]
    train = arithmetic_problems(script["synthetic_num_examples"], args.task_seed, split="train")
    held_out = arithmetic_problems(args.eval_examples, args.task_seed, split="test")
    output_dir = os.path.join(args.output_dir, f"{method}-seed{seed}")
    max_steps = math.ceil(args.budget / (prompts_per_step * 4)) + 5  # every arm makes >= 4 per prompt a step
    config = equal_budget.make_config(method, seed, max_steps, output_dir, shared, ada, prompts_per_step,
                                      methods=ARMS)
    trainer_class = equal_budget._CountingGRPO if method == "grpo_n4" else equal_budget._CountingAda
    counted = equal_budget._Counted()
    held = HeldOutArithmetic(AutoTokenizer.from_pretrained(model_dir), held_out, args.eval_k,
                             shared["max_completion_length"], args.eval_seed)
    run = EqualSamplesRun(counted, held, args.budget, args.eval_every, before, f"{method} seed {seed}")
    trainer = trainer_class(model=model_dir, reward_funcs=[last_number_reward], args=config, train_dataset=train,
                            callbacks=[run])
    trainer.counted = counted
    trainer.remove_callback(PrinterCallback)
    print(f"[real_model] {method} seed {seed}: until {args.budget} generated completions", flush=True)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "step_time" in h]
    if method == "grpo_n4":
        round1_reward = [h["reward"] for h in logs]
        signal = [1.0 - h["frac_reward_zero_std"] for h in logs]
    else:
        round1_reward = [h["sampling/iid_reward"] for h in logs]
        signal = [h["sampling/effective_prompt_ratio"] for h in logs]
    return {"method": method, "seed": seed, "held_out_before": before, "held_out_after": measures(run.curve[-1]),
            "steps": len(logs), "generated_samples": counted.samples, "generated_tokens": counted.tokens,
            "train_seconds": run.steps[-1]["seconds"], "curve": run.curve, "per_step": run.steps,
            "round1_reward": round1_reward, "signal": signal,
            "mean_length": [h.get("completions/mean_length") for h in logs]}


def measures(point: dict) -> dict:
    """The held-out measures of a curve point (without its position)."""
    return {k: v for k, v in point.items() if k not in ("step", "samples", "tokens", "seconds")}


# ---------------------------------------------------------------------------------------------------------------
# Report.


def report(saved):
    runs, k = saved["runs"], saved["eval_k"]
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    kinds = sorted(key.removeprefix("greedy ") for key in saved["held_out_before"] if key.startswith("greedy "))
    before = saved["held_out_before"]
    print(f"\n### At the budget ({saved['budget']} generated completions; {saved['eval_examples']} held-out questions; "
          f"mean ± std over seeds)\n")
    print(f"| method | seeds | held-out greedy | held-out avg@{k} | " +
          " | ".join(f"greedy {kind}" for kind in kinds) + " | steps | generated completions | samples per step | "
          "groups with signal | training time (s) | s per step | s per completion |")
    print("|---|---:|---:|---:|" + "---:|" * len(kinds) + "---:|---:|---:|---:|---:|---:|---:|")
    print(f"| before training | | {100 * before['greedy']:.1f}% | {100 * before['avg@k']:.1f}% | " +
          " | ".join(f"{100 * before[f'greedy {kind}']:.1f}%" for kind in kinds) + " | | | | | | | |")
    for m in methods:
        rs = [r for r in runs if r["method"] == m]
        after = [r["held_out_after"] for r in rs]
        steps = statistics.mean(r["steps"] for r in rs)
        samples = statistics.mean(r["generated_samples"] for r in rs)
        seconds = statistics.mean(r["train_seconds"] for r in rs)
        signal = statistics.mean(statistics.mean(r["signal"]) for r in rs)  # trained groups with signal, per step
        print(f"| {m} | {len(rs)} | {learning.mean_spread([a['greedy'] for a in after])} | "
              f"{learning.mean_spread([a['avg@k'] for a in after])} | " +
              " | ".join(learning.mean_spread([a[f'greedy {kind}'] for a in after]) for kind in kinds) +
              f" | {steps:.1f} | {samples:.0f} | {samples / steps:.1f} | {100 * signal:.0f}% | {seconds:.0f} | "
              f"{seconds / steps:.0f} | {seconds / samples:.2f} |")
    seeds = sorted({r["seed"] for r in runs})
    print(f"\n### Per seed (held-out greedy / avg@{k} at the budget)\n")
    print("| method | " + " | ".join(f"seed {s}" for s in seeds) + " |")
    print("|---|" + "---|" * len(seeds))
    for m in methods:
        by_seed = {r["seed"]: r for r in runs if r["method"] == m}
        cells = []
        for s in seeds:
            r = by_seed.get(s)
            cells.append("-" if r is None else f"{100 * r['held_out_after']['greedy']:.1f}% / "
                         f"{100 * r['held_out_after']['avg@k']:.1f}% ({r['steps']} steps, {r['train_seconds']:.0f} s)")
        print(f"| {m} | " + " | ".join(cells) + " |")
    # Arms can hold different seeds (a seed added later for some arms only): every arm on the seeds all of them hold,
    # then, if that left seeds out, the arms that hold every seed on all of them; never a mean of 2 against one of 3.
    held = {m: {r["seed"] for r in runs if r["method"] == m} for m in methods}
    common = [s for s in seeds if all(s in held[m] for m in methods)]
    win_table(runs, methods, common, k, saved["budget"])
    complete = [m for m in methods if held[m] == set(seeds)]
    if common != seeds and len(complete) > 1:
        win_table(runs, complete, seeds, k, saved["budget"])


def win_table(runs, methods, seeds, k, budget):
    """Held-out greedy / avg@k of each arm at equal steps, generated completions and training seconds, mean over
    `seeds`."""
    print(f"\n### Which arm wins, seeds {', '.join(map(str, seeds))} (greedy / avg@{k}, each seed's curve "
          "interpolated linearly between its evaluations, mean over seeds; - where a seed stopped short)\n")
    # Steps 4 and 7: where the Ada arms stand when they stop (4-7 steps); seconds: the shortest run's end, so that
    # every arm has a value there.
    shown = [r for r in runs if r["method"] in methods and r["seed"] in seeds]
    seconds = 10 * math.floor(min(r["curve"][-1]["seconds"] for r in shown) / 10)
    points = [("steps", "step", 4), ("steps", "step", 7), ("generated completions", "samples", budget),
              ("training seconds", "seconds", seconds)]
    print("| comparison | " + " | ".join(methods) + " |")
    print("|---|" + "---:|" * len(methods))
    for label, axis, x in points:
        cells = []
        for m in methods:
            values = [[learning.interpolate([p[axis] for p in r["curve"]], [p[measure] for p in r["curve"]], x)
                       for measure in MEASURES] for r in runs if r["method"] == m and r["seed"] in seeds]
            if any(v is None for pair in values for v in pair):
                cells.append("-")
            else:
                cells.append(" / ".join(f"{100 * statistics.mean(pair[i] for pair in values):.1f}%" for i in range(2)))
        print(f"| equal {label} ({x}) | " + " | ".join(cells) + " |")


def plot(saved, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes_x = (("step", "step"), ("samples", "generated completions"), ("seconds", "training wall time (s)"))
    fig, axes = plt.subplots(len(MEASURES), len(axes_x), figsize=(14, 7), dpi=80, squeeze=False)
    for m in METHODS:
        rs = [r for r in saved["runs"] if r["method"] == m]
        if not rs:
            continue
        for row, measure in enumerate(MEASURES):
            for column, (axis, _) in enumerate(axes_x):
                # seeds are evaluated at slightly different positions: put each seed on a common grid
                top = min(r["curve"][-1][axis] for r in rs)
                grid = [top * i / 40 for i in range(40)] + [top]  # top * 40 / 40 can exceed top by an ulp
                ys = [[learning.interpolate([p[axis] for p in r["curve"]], [p[measure] for p in r["curve"]], x)
                       for x in grid] for r in rs]
                learning.band(axes[row][column], [grid] * len(rs), ys, equal_budget.COLORS[m], m)
    k = saved["eval_k"]
    for row, measure in enumerate(MEASURES):
        for column, (_, label) in enumerate(axes_x):
            ax = axes[row][column]
            ax.set_xlabel(label)
            ax.set_ylabel(f"held-out {'greedy accuracy' if measure == 'greedy' else f'avg@{k} (T=1.0)'}")
            ax.axhline(saved["held_out_before"][measure], color="k", lw=0.6, ls=":")  # before training
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{saved['model']} on chat arithmetic, every arm stopped at {saved['budget']} generated "
                 f"completions ({saved['eval_examples']} held-out questions; mean and min-max over seeds)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="runs/bench-real-model")
    parser.add_argument("--model", default=KNOWN_MODELS["smollm2"].default_dir,
                        help="the materialised model folder (created when missing)")
    parser.add_argument("--config", default=DEFAULT_RECIPE, help="the shared recipe (YAML); arms override the sampler")
    parser.add_argument("--budget", type=int, default=640, help="generated completions per run")
    parser.add_argument("--eval_every", type=int, default=128, help="held-out evaluation every this many completions")
    parser.add_argument("--eval_examples", type=int, default=48, help="held-out questions (equal shares of the kinds)")
    parser.add_argument("--eval_k", type=int, default=4, help="samples per question of avg@k")
    parser.add_argument("--max_completion_length", type=int, default=48,
                        help="48, the cap of the recipes when this comparison ran (they use 96 since issue 32)")
    parser.add_argument("--eval_seed", type=int, default=1234)
    parser.add_argument("--task_seed", type=int, default=0, help="seed of the training and held-out question sets")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    equal_budget.add_parallel_run_arguments(parser)
    parser.add_argument("--json", default=os.path.join(HERE, "real_model.json"))
    parser.add_argument("--plot", default=os.path.join(HERE, "real_model.png"))
    parser.add_argument("--from_json", default=None, help="re-print the tables and redraw the plot, without training")
    args = parser.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        report(saved)
        plot(saved, args.plot)
        print(f"\nplot: {args.plot}")
        return 0
    torch.set_num_threads(args.threads)

    started = time.time()
    os.makedirs(os.path.join(args.output_dir, "results"), exist_ok=True)
    before_path = os.path.join(args.output_dir, "before.json")
    todo = [(m, s) for s in args.seeds for m in args.methods]  # seed-major: an interrupted run has whole seeds

    def result_path(method, seed):
        return os.path.join(args.output_dir, "results", f"{method}-seed{seed}.json")

    if args.worker is None:
        model_dir = materialize("smollm2", args.model)
        if not os.path.exists(before_path):  # the same model and held-out questions for every arm and seed: once
            script, shared, _ = learning.recipe_kwargs(args.config)
            shared["max_completion_length"] = args.max_completion_length
            held_out = arithmetic_problems(args.eval_examples, args.task_seed, split="test")
            held = HeldOutArithmetic(AutoTokenizer.from_pretrained(model_dir), held_out, args.eval_k,
                                     shared["max_completion_length"], args.eval_seed)
            before = held.measure(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))
            with open(before_path, "w") as f:
                json.dump({"model_dir": model_dir, "held_out_before": before, "seconds": held.seconds}, f)
        with open(before_path) as f:
            meta = json.load(f)
        print(f"[real_model] before training: held-out greedy {100 * meta['held_out_before']['greedy']:.1f}%, "
              f"avg@{args.eval_k} {100 * meta['held_out_before']['avg@k']:.1f}% ({meta['seconds']:.0f} s)", flush=True)
    else:
        with open(before_path) as f:
            meta = json.load(f)
    equal_budget.run_pending(
        todo, result_path, lambda method, seed: train_one(method, seed, meta["model_dir"], args,
                                                          meta["held_out_before"]),
        args.jobs, args.worker, os.path.abspath(__file__), argv)
    if args.worker is not None:
        return 0

    runs = equal_budget.finished_runs(todo, result_path)
    saved = {"model": os.path.basename(os.path.normpath(meta["model_dir"])), "recipe": os.path.relpath(args.config),
             "budget": args.budget, "eval_every": args.eval_every, "eval_examples": args.eval_examples,
             "eval_k": args.eval_k, "task_seed": args.task_seed, "threads": args.threads, "jobs": args.jobs,
             "complete": len(runs) == len(todo), "wall_seconds": time.time() - started,
             "held_out_before": meta["held_out_before"], "runs": runs}
    with open(args.json, "w") as f:
        json.dump(learning.rounded(saved), f)
    if runs:
        report(saved)
        plot(saved, args.plot)
    print(f"\nresults: {args.json}  plot: {args.plot}  total wall time {time.time() - started:.0f} s "
          f"({len(runs)} of {len(todo)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
