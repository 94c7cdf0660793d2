"""A real pretrained model on a CPU: GRPOTrainer (n=4) against AdaGRPOTrainer (balanced) from SmolLM2-135M-Instruct.

    python benchmarks/smollm2.py                     # the defaults: 4 steps, recipe lengths; not run in CI
    python benchmarks/smollm2.py --steps 4 --match_samples 1 --max_completion_length 192 --eval_examples 16 --eval_k 2
        # the run in benchmarks/README.md section 4: 78 min on the (shared) 2-core dev machine
    python benchmarks/smollm2.py --from_json benchmarks/smollm2.json     # tables and plot of a finished run

Both arms start from the same checkpoint (the plain folder `python -m trl_ada.models smollm2` writes; created here
when missing) and use the same recipe (`recipes/SmolLM2-135M-Instruct/ada_balance.yaml`: LoRA over a bf16 base,
easy arithmetic word problems with the reference prompt, temperature 0.7, 192 completion tokens, 4 prompts per
step; this script runs 2 by default, to fit its budget), the same prompts in the same order, the same optimiser
and learning rate. Only the sampling and its advantages differ:

- `ada_balance`: `AdaGRPOTrainer`, balanced exit rule (M=8 samples per round, at most R=4 rounds), pooled
  advantages; it runs `--steps` steps;
- `grpo`: plain TRL `GRPOTrainer`, n=4 i.i.d. samples per prompt, the same steps (the equal-steps point); with
  `--match_samples 1` it then trains on until it has generated as many completions as the Ada run (the
  equal-samples point; about twice the time).

Held-out reward: the mean reward of `--eval_k` samples (the training temperature, seeded identically for every
model) on `--eval_examples` fresh problems, before training, for each arm at the equal-steps point and for GRPO
again at the equal-samples point; its time is not counted in the training wall time. The training reward is the
round-1 i.i.d. reward (`sampling/iid_reward` for Ada, TRL's `reward` for GRPO: the mean reward of the current
policy's samples before any selection). Prints markdown tables, writes a JSON and a PNG.
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

import torch  # noqa: E402
import yaml  # noqa: E402
from peft import LoraConfig  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_ada import AdaGRPOConfig, AdaGRPOTrainer  # noqa: E402
from trl_ada.data import word_problems  # noqa: E402
from trl_ada.evaluate import avg_at_k  # noqa: E402
from trl_ada.models import KNOWN_MODELS, materialize  # noqa: E402
from trl_ada.rewards import boxed_math_reward  # noqa: E402
from trl_ada.train import ScriptArguments  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_RECIPE = os.path.join(ROOT, "recipes", "SmolLM2-135M-Instruct", "ada_balance.yaml")
METHODS = ("ada_balance", "grpo")
COLORS = {"grpo": "#777777", "ada_balance": "#1b63c6"}
LORA_KEYS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")


def read_recipe(path):
    """(script arguments, GRPOConfig fields, Ada-only fields, LoRA config or None, model dtype) of a recipe."""
    with open(path) as f:
        recipe = yaml.safe_load(f)
    grpo_fields = set(GRPOConfig.__dataclass_fields__)
    script = {k: v for k, v in recipe.items() if k in ScriptArguments.__dataclass_fields__}
    shared = {k: v for k, v in recipe.items() if k in grpo_fields}
    ada = {k: v for k, v in recipe.items() if k in AdaGRPOConfig.__dataclass_fields__ and k not in grpo_fields}
    lora = None
    if recipe.get("use_peft"):
        lora = LoraConfig(r=recipe["lora_r"], lora_alpha=recipe["lora_alpha"], lora_dropout=recipe["lora_dropout"],
                          target_modules=recipe["lora_target_modules"], task_type="CAUSAL_LM")
    return script, shared, ada, lora, recipe.get("dtype")


def make_config(method, steps, output_dir, shared, ada, dtype, overrides):
    common = dict(shared, **overrides, output_dir=output_dir, max_steps=steps, save_strategy="no", logging_steps=1,
                  report_to="none", disable_tqdm=True)
    if dtype not in (None, "auto"):
        common["model_init_kwargs"] = {"dtype": dtype}
    if method == "grpo":
        return GRPOConfig(**common)
    return AdaGRPOConfig(**common, **dict(ada, reinforce_ada_choice="balanced"))


class HeldOut(TrainerCallback):
    """Held-out reward at chosen steps, without disturbing the run's random state; the training wall clock at every
    step with evaluation time excluded."""

    def __init__(self, tokenizer, dataset, k, max_new_tokens, temperature, seed, at_steps):
        self.tokenizer, self.dataset, self.k = tokenizer, dataset, k
        self.max_new_tokens, self.temperature, self.seed = max_new_tokens, temperature, seed
        self.at_steps = set(at_steps)
        self.points: list[tuple[int, float]] = []
        self.seconds, self.started, self.clock = 0.0, 0.0, []

    def measure(self, model, step):
        start = time.time()
        cpu_state = torch.get_rng_state()
        torch.manual_seed(self.seed)  # the same sampling noise for every model
        was_training = model.training
        reward = avg_at_k(model, self.tokenizer, self.dataset, k=self.k, max_new_tokens=self.max_new_tokens,
                          temperature=self.temperature, batch_size=128)
        model.train(was_training)
        torch.set_rng_state(cpu_state)
        self.points.append((step, reward))
        self.seconds += time.time() - start
        print(f"[smollm2] step {step:4d}  held-out reward {100 * reward:.1f}%  ({time.time() - start:.0f} s)",
              flush=True)

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.time()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.clock.append(time.time() - self.started - self.seconds)
        if state.global_step in self.at_steps:
            self.measure(model, state.global_step)


class StepLine(TrainerCallback):
    def __init__(self, method):
        self.method = method

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            reward = logs.get("sampling/iid_reward", logs.get("reward"))
            samples = logs.get("sampling/total_samples", args.per_device_train_batch_size)
            print(f"[smollm2] {self.method} step {state.global_step:3d}  round-1 reward {reward:.3f}  samples "
                  f"{samples:.0f}  mean length {logs.get('completions/mean_length', float('nan')):.0f}  "
                  f"step time {logs.get('step_time', float('nan')):.0f} s", flush=True)


def train_one(method, steps, eval_steps, model_dir, dataset, held_out, shared, ada, lora, dtype, args):
    output_dir = os.path.join(args.output_dir, method)
    config = make_config(method, steps, output_dir, shared, ada, dtype, {"seed": args.seed})
    held = HeldOut(AutoTokenizer.from_pretrained(model_dir), held_out, args.eval_k, shared["max_completion_length"],
                   shared["temperature"], args.eval_seed, eval_steps)
    trainer_class = GRPOTrainer if method == "grpo" else AdaGRPOTrainer
    trainer = trainer_class(model=model_dir, reward_funcs=[boxed_math_reward], args=config, train_dataset=dataset,
                            peft_config=lora, callbacks=[held, StepLine(method)])
    trainer.remove_callback(PrinterCallback)
    print(f"[smollm2] {method}: {steps} steps", flush=True)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "step_time" in h]
    if method == "grpo":
        reward = [h["reward"] for h in logs]
        generated = [float(shared["per_device_train_batch_size"])] * len(logs)
        signal = [1.0 - h["frac_reward_zero_std"] for h in logs]
    else:
        reward = [h["sampling/iid_reward"] for h in logs]
        generated = [h["sampling/total_samples"] for h in logs]
        signal = [h["sampling/effective_prompt_ratio"] for h in logs]
    return {"method": method, "round1_reward": reward, "generated": generated, "signal": signal,
            "mean_length": [h.get("completions/mean_length") for h in logs],
            "clipped_ratio": [h.get("completions/clipped_ratio") for h in logs],
            "held_out": held.points, "wall_clock": held.clock}


def cumulative(values):
    total, out = 0.0, []
    for v in values:
        total += v
        out.append(total)
    return out


def mean(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else float("nan")


def held_out_at(run, step):
    return next((r for s, r in run["held_out"] if s == step), None)


def pct(value):
    return "-" if value is None or value != value else f"{100 * value:.1f}%"


def report(saved):
    runs = {r["method"]: r for r in saved["runs"]}
    ada, grpo = runs["ada_balance"], runs["grpo"]
    steps, before, window = saved["steps"], saved["held_out_before"], saved["window"]
    print(f"\n### Equal steps ({steps} steps of {saved['prompts_per_step']} prompts, one seed)\n")
    print(f"| method | round-1 reward, first {window} steps | round-1 reward, last {window} steps | held-out reward "
          f"(before: {pct(before)}) | prompts with signal | generated samples | mean completion length | truncated "
          f"at {saved['max_completion_length']} tokens | training wall time (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, run in (("GRPO n=4", grpo), ("Reinforce-Ada balanced", ada)):
        print(f"| {name} | {pct(mean(run['round1_reward'][:window]))} | "
              f"{pct(mean(run['round1_reward'][steps - window:steps]))} | {pct(held_out_at(run, steps))} | "
              f"{pct(mean(run['signal'][:steps]))} | {sum(run['generated'][:steps]):.0f} | "
              f"{mean(run['mean_length'][:steps]):.0f} | {pct(mean(run['clipped_ratio'][:steps]))} | "
              f"{run['wall_clock'][steps - 1]:.0f} |")
    grpo_steps = len(grpo["generated"])
    if grpo_steps > steps:
        print(f"\n### Equal generated samples (GRPO trained on to {grpo_steps} steps)\n")
        print(f"| method | steps | generated samples | round-1 reward, last {window} steps | held-out reward | "
              "training wall time (s) |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, run, n in (("GRPO n=4", grpo, grpo_steps), ("Reinforce-Ada balanced", ada, steps)):
            print(f"| {name} | {n} | {sum(run['generated'][:n]):.0f} | {pct(mean(run['round1_reward'][n - window:n]))} "
                  f"| {pct(held_out_at(run, n))} | {run['wall_clock'][n - 1]:.0f} |")


def plot(saved, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = saved["window"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), dpi=80)
    for run in saved["runs"]:
        color, label = COLORS[run["method"]], run["method"]
        reward = run["round1_reward"]
        moving = [mean(reward[max(0, i - window + 1) : i + 1]) for i in range(len(reward))]
        steps = list(range(1, len(reward) + 1))
        samples = cumulative(run["generated"])
        axes[0].plot(steps, reward, color=color, lw=0.6, alpha=0.35)
        axes[0].plot(steps, moving, color=color, lw=2, label=label)
        axes[1].plot(samples, moving, color=color, lw=2, label=label)
        held_x = [0.0] + [samples[s - 1] for s, _ in run["held_out"]]
        held_y = [saved["held_out_before"]] + [r for _, r in run["held_out"]]
        axes[2].plot(held_x, held_y, color=color, marker="o", label=label)
    axes[0].axvline(saved["steps"], color="k", lw=0.6, ls=":")
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("generated samples")
    axes[2].set_xlabel("generated samples")
    for ax in axes[:2]:
        ax.set_ylabel(f"round-1 training reward\n(moving mean of {window} steps)")
    axes[2].set_ylabel(f"held-out reward ({saved['eval_examples']} problems x {saved['eval_k']})")
    axes[0].legend(fontsize=8)
    fig.suptitle("SmolLM2-135M-Instruct (LoRA, CPU) on easy word problems: GRPO n=4 vs Reinforce-Ada balanced, one seed")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="runs/bench-smollm2")
    parser.add_argument("--model", default=KNOWN_MODELS["smollm2"].default_dir,
                        help="the materialised model folder (created when missing)")
    parser.add_argument("--config", default=DEFAULT_RECIPE, help="the shared recipe (YAML)")
    parser.add_argument("--steps", type=int, default=4, help="steps of the Ada run (the equal-steps point)")
    parser.add_argument("--match_samples", type=int, default=0,
                        help="1: GRPO trains on until it has generated as many samples as Ada (longer)")
    parser.add_argument("--prompts_per_step", type=int, default=2,
                        help="prompts per step (the recipe has 4); 0 keeps the recipe's")
    parser.add_argument("--max_completion_length", type=int, default=None, help="override the recipe")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval_examples", type=int, default=32)
    parser.add_argument("--eval_k", type=int, default=2)
    parser.add_argument("--eval_seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the dev machine's 2 cores are shared)")
    parser.add_argument("--window", type=int, default=2, help="steps in the moving mean of the training reward")
    parser.add_argument("--from_json", default=None, help="re-print the tables and redraw the plot of a saved run")
    parser.add_argument("--plot", default=os.path.join(ROOT, "benchmarks", "smollm2.png"))
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

    script, shared, ada, lora, dtype = read_recipe(args.config)
    if args.prompts_per_step:
        shared["per_device_train_batch_size"] = args.prompts_per_step * shared["num_generations"]
    if args.max_completion_length:
        shared["max_completion_length"] = args.max_completion_length
    shared["gradient_accumulation_steps"] = 1
    load_started = time.time()
    model_dir = materialize("smollm2", args.model)
    materialize_seconds = time.time() - load_started
    dataset = word_problems(script["synthetic_num_examples"], script["synthetic_difficulty"], args.seed)
    held_out = word_problems(args.eval_examples, script["synthetic_difficulty"], seed=args.seed + 1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype if dtype not in (None, "auto") else None)
    baseline = HeldOut(tokenizer, held_out, args.eval_k, shared["max_completion_length"], shared["temperature"],
                       args.eval_seed, [])
    baseline.measure(base, 0)
    del base

    runs = [train_one("ada_balance", args.steps, [args.steps], model_dir, dataset, held_out, shared, ada, lora,
                      dtype, args)]
    per_step = shared["per_device_train_batch_size"]
    grpo_steps = args.steps
    if args.match_samples:
        grpo_steps = max(args.steps, math.ceil(sum(runs[0]["generated"]) / per_step))
    runs.append(train_one("grpo", grpo_steps, sorted({args.steps, grpo_steps}), model_dir, dataset, held_out,
                          shared, ada, lora, dtype, args))

    saved = {"model": os.path.basename(os.path.normpath(model_dir)), "steps": args.steps, "seed": args.seed,
             "prompts_per_step": per_step // shared["num_generations"],
             "max_completion_length": shared["max_completion_length"], "temperature": shared["temperature"],
             "eval_examples": args.eval_examples, "eval_k": args.eval_k, "held_out_before": baseline.points[0][1],
             "window": args.window, "threads": args.threads, "materialize_seconds": round(materialize_seconds, 1),
             "total_wall_seconds": round(time.time() - started, 1), "runs": runs}
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "smollm2.json"), "w") as f:
        json.dump(saved, f, indent=1)
    report(saved)
    plot(saved, args.plot)
    print(f"\nplot: {args.plot}  results: {os.path.join(args.output_dir, 'smollm2.json')}  total wall time "
          f"{saved['total_wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
