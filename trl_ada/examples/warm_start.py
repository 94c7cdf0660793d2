"""Supervised warm start of the tiny offline model: a short SFT run on worked solutions of the synthetic task.

The tiny model built by `trl_ada.examples.tiny` starts from random weights and scores 0 on every sample, so RL has nothing to
work with. A few hundred steps of TRL's SFTTrainer on worked solutions leave it solving some prompts, failing
others, and mixed on the rest: the regime where adaptive sampling matters. Used by `trl_ada.cli.train`
(`--model_name_or_path tiny-warm`), the demo and the benchmarks; it imports neither of them.
"""

from __future__ import annotations

import os

from transformers import TrainerCallback
from trl import SFTConfig, SFTTrainer

from trl_ada.examples.arithmetic import synthetic_arithmetic, synthetic_solution


def warm_start(base_model: str, output_dir: str, steps: int, seed: int, schedule_steps: int | None = None) -> str:
    """Supervised warm start on worked solutions; skipped when <output_dir> already holds the result.

    `schedule_steps` (> steps) lays the cosine learning-rate schedule out over that many steps and stops after `steps`:
    a model left part-way, e.g. for a U-shaped pass-rate distribution (some prompts solved, some never).
    """
    if os.path.exists(os.path.join(output_dir, "model.safetensors")):
        print(f"[warm start] reusing the warm-started model in {output_dir}")
        return output_dir
    dataset = synthetic_arithmetic(4096, difficulty=1, seed=seed + 1000)
    dataset = dataset.map(
        lambda row: {
            "completion": [{"role": "assistant", "content": synthetic_solution(row["problem"], row["answer"])}]
        }
    )
    trainer = SFTTrainer(
        model=base_model,
        args=warm_start_config(output_dir, max(steps, schedule_steps or steps), seed),
        train_dataset=dataset.select_columns(["prompt", "completion"]),
        callbacks=[StopAtStep(steps)],
    )
    print(f"[warm start] {steps} supervised steps on worked solutions")
    trainer.train()
    trainer.save_model(output_dir)
    return output_dir


def warm_start_config(output_dir: str, steps: int, seed: int, **overrides) -> SFTConfig:
    """The warm starts' SFT run on a CPU: batches of 32 at a learning rate of 3e-3 on a cosine schedule, a log line
    every 25 steps, the model saved by the caller once it is done."""
    return SFTConfig(
        output_dir=output_dir,
        max_steps=steps,
        per_device_train_batch_size=32,
        learning_rate=3e-3,
        lr_scheduler_type="cosine",
        warmup_steps=10,
        logging_steps=25,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=seed,
        disable_tqdm=False,
        **overrides,
    )


class StopAtStep(TrainerCallback):
    """Stops training after `steps` optimiser steps, whatever max_steps the schedule was laid out over."""

    def __init__(self, steps: int):
        self.steps = steps

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.steps:
            control.should_training_stop = True
