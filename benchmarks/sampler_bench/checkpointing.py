"""Does the bench need TRL's default gradient checkpointing? One bench step's forward and backward pass (32
sequences of 110 tokens, SmolLM2-135M-Instruct in fp32, one thread), with and without it, alternating, and the
gradients of both compared. Prints the table, writes checkpointing.json and checkpointing.png beside this file.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sampler_bench/checkpointing.py
"""

from __future__ import annotations

import json
import os
import time

import torch
from transformers import AutoModelForCausalLM


HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(os.path.dirname(os.path.dirname(HERE)), "runs", "models", "SmolLM2-135M-Instruct")


def main(repeats: int = 2) -> None:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    model.train()
    batch = torch.randint(0, model.config.vocab_size, (32, 110))  # 8 prompts x 4 completions, prompt + answer
    seconds, grads = {True: [], False: []}, {}
    for checkpointing in [True, False] * repeats:
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_disable()
        model.zero_grad()
        start = time.perf_counter()
        model(input_ids=batch, labels=batch).loss.backward()
        seconds[checkpointing].append(round(time.perf_counter() - start, 2))
        grads[checkpointing] = [p.grad.clone() for p in model.parameters()]
    difference = max((a - b).abs().max().item() for a, b in zip(grads[True], grads[False]))
    out = {
        "threads": torch.get_num_threads(),
        "seconds_with_checkpointing": seconds[True],
        "seconds_without": seconds[False],
        "max_abs_gradient_difference": difference,
    }
    print("| gradient checkpointing | seconds per forward + backward |\n|---|---|")
    print(f"| on (TRL's default) | {seconds[True]} |\n| off | {seconds[False]} |")
    print(f"largest difference between the two runs' gradients: {difference}")
    with open(os.path.join(HERE, "checkpointing.json"), "w") as f:
        json.dump(out, f, indent=1)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(["on (TRL's default)", "off"], [min(seconds[True]), min(seconds[False])])
    ax.set_ylabel("seconds (fastest of the repeats)")
    ax.set_title("One bench step's forward + backward, one thread", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "checkpointing.png"), dpi=100)


if __name__ == "__main__":
    main()
