"""The main job, offline on a CPU: a short Reinforce-Ada training of a tiny model on synthetic arithmetic.

    python -m trl_ada.demo --output_dir runs/demo        (or: make demo)

1. builds a tiny Qwen2 model and tokenizer locally (no hub);
2. warm-starts it with a short supervised run (TRL's SFTTrainer) so that some prompts are solved, some not, and
   some mixed: the regime where adaptive sampling matters. Cached in <output_dir>/warm-model;
3. measures held-out accuracy (avg@k), trains AdaGRPOTrainer with `recipes/tiny/ada_balance.yaml`, measures again;
4. prints a before/after table with the sampling cost and writes the training curve to <output_dir>/demo.png.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, ProgressCallback, TrainerCallback

from .data import synthetic_arithmetic
from .evaluate import avg_at_k
from .tiny import build_tiny_model
from .train import ScriptArguments, load_reward_funcs, load_train_dataset
from .trainer import AdaGRPOTrainer
from .warm_start import warm_start

DEFAULT_RECIPE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "tiny",
                              "ada_balance.yaml")


class SamplingLine(TrainerCallback):
    """One readable line per step with the sampling metrics, under the progress bar."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "sampling/total_samples" in logs:
            tqdm.write(
                f"[demo] step {state.global_step:3d}  round-1 reward {logs['sampling/iid_reward']:.3f}  "
                f"samples {logs['sampling/total_samples']:.0f}  rounds {logs['sampling/rounds_mean']:.2f}  "
                f"prompts with signal {logs['sampling/effective_prompt_ratio']:.2f}  loss {logs['loss']:+.4f}"
            )


class ProgressBarOnly(ProgressCallback):
    """The progress bar without the dump of every logged metric at every step; SamplingLine prints what matters."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        pass


def evaluate(model_dir: str, dataset, k: int, seed: int) -> float:
    torch.manual_seed(seed)  # the same sampling noise before and after training
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return avg_at_k(model, tokenizer, dataset, k=k, max_new_tokens=24, batch_size=256)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def plot(history: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [h for h in history if "sampling/iid_reward" in h]
    steps = [h["step"] for h in rows]
    round_one = [h["sampling/iid_reward"] for h in rows]
    window = 10  # one step is only 16 prompts: the moving mean shows the trend
    moving = [_mean(round_one[max(0, i - window + 1) : i + 1]) for i in range(len(round_one))]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=100)
    left.plot(steps, round_one, lw=0.7, alpha=0.35, color="tab:blue")
    left.plot(steps, moving, lw=2, color="tab:blue", label=f"round-1 (i.i.d.) reward, moving mean of {window}")
    left.plot(steps, [h["reward"] for h in rows], ls="--", color="tab:orange",
              label="kept-group reward (~50% by construction)")
    left.set_xlabel("step")
    left.set_ylabel("reward")
    left.legend(fontsize=7)
    right.plot(steps, [h["sampling/total_samples"] for h in rows], lw=0.8, label="generated")
    right.plot(steps, [h["sampling/kept_samples"] for h in rows], ls="--", label="kept")
    right.set_xlabel("step")
    right.set_ylabel("samples per step")
    right.legend(fontsize=7)
    fig.suptitle("AdaGRPOTrainer (balanced) on the tiny offline model")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="runs/demo")
    parser.add_argument("--config", default=DEFAULT_RECIPE, help="AdaGRPOConfig recipe (YAML)")
    parser.add_argument("--max_steps", type=int, default=None, help="override the recipe's max_steps")
    parser.add_argument("--warm_start_steps", type=int, default=300)
    parser.add_argument("--eval_examples", type=int, default=256)
    parser.add_argument("--eval_k", type=int, default=4)
    args = parser.parse_args(argv)
    os.environ.setdefault("WANDB_MODE", "disabled")
    started = time.time()

    from trl import TrlParser

    from .config import AdaGRPOConfig

    overrides = ["--output_dir", os.path.join(args.output_dir, "ada")]
    if args.max_steps is not None:
        overrides += ["--max_steps", str(args.max_steps)]
    script_args, training_args = TrlParser((ScriptArguments, AdaGRPOConfig)).parse_args_and_config(
        args=["--config", args.config, *overrides], fail_with_unknown_args=False
    )[:2]

    base = build_tiny_model(os.path.join(args.output_dir, "tiny-model"))
    warm = warm_start(base, os.path.join(args.output_dir, "warm-model"), args.warm_start_steps, training_args.seed)
    held_out = synthetic_arithmetic(args.eval_examples, script_args.synthetic_difficulty, seed=training_args.seed + 1)
    before = evaluate(warm, held_out, args.eval_k, training_args.seed)
    print(f"[demo] held-out avg@{args.eval_k} before RL: {100 * before:.1f}%")

    trainer = AdaGRPOTrainer(
        model=warm, reward_funcs=load_reward_funcs(script_args.reward_funcs), args=training_args,
        train_dataset=load_train_dataset(script_args, training_args.seed), callbacks=[SamplingLine()],
    )
    if not training_args.disable_tqdm:
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(ProgressBarOnly)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    after = evaluate(training_args.output_dir, held_out, args.eval_k, training_args.seed)

    history = trainer.state.log_history
    rows = [h for h in history if "sampling/total_samples" in h]
    generated = sum(h["sampling/total_samples"] for h in rows)
    kept = sum(h["sampling/kept_samples"] for h in rows)
    summary = {
        f"held_out_avg@{args.eval_k}_before": before, f"held_out_avg@{args.eval_k}_after": after,
        "steps": len(rows), "generated_samples": generated, "kept_samples": kept,
        # Single steps are noisy (16 prompts): average the first and the last ten.
        "first_steps_round1_reward": _mean(h["sampling/iid_reward"] for h in rows[:10]),
        "last_steps_round1_reward": _mean(h["sampling/iid_reward"] for h in rows[-10:]), "mean_rounds": sum(h["sampling/rounds_mean"] for h in rows) / len(rows),
        "unfinished_prompts": sum(h["sampling/unfinished"] for h in rows) / len(rows),
        "wall_seconds": time.time() - started,
    }
    plot(history, os.path.join(args.output_dir, "demo.png"))
    with open(os.path.join(args.output_dir, "demo_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print("\n| | before RL | after RL |\n|---|---|---|")
    print(f"| held-out accuracy (avg@{args.eval_k}, {len(held_out)} problems) | {100 * before:.1f}% | {100 * after:.1f}% |")
    print(f"| round-1 training reward (mean of the first / last 10 steps) | "
          f"{100 * summary['first_steps_round1_reward']:.1f}% | {100 * summary['last_steps_round1_reward']:.1f}% |")
    print(f"\nsampling cost: {generated:.0f} completions generated for {kept:.0f} kept "
          f"({generated / kept:.2f}x), {summary['mean_rounds']:.2f} rounds per prompt on average, "
          f"{100 * summary['unfinished_prompts']:.0f}% of prompts never met the exit rule")
    print(f"plot: {os.path.join(args.output_dir, 'demo.png')}  summary: {os.path.join(args.output_dir, 'demo_summary.json')}"
          f"  ({summary['wall_seconds']:.0f} s)")


if __name__ == "__main__":
    main()
