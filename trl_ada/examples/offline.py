"""The offline tasks and models a recipe can name, so that every recipe runs on a CPU without a hub.

`trl-ada-train` (and the tools that read its recipes: `trl-ada-compare`, the demo) asks this module first, through
one hook each: `offline_task(script_args, seed)` for `dataset_name`, `offline_model(name, training_args, ...)` for
`model_name_or_path`. Each returns None for a name it does not know, which is then a Hub id, a local file or folder.

Tasks (`dataset_name`):
- `synthetic`: "What is a + b?" with \\boxed{} answers, `synthetic_difficulty` digits per operand;
- `word_problems`: easy arithmetic word problems (\\boxed{} answers);
- `arithmetic`: chat arithmetic graded by `last_number_reward` (the SmolLM2 recipes);
- `hard_arithmetic`: the questions of harder kinds SmolLM2 answers right 1 or 2 times in 16 (its `dataset_split`:
  train, test_hard, test_easy);
- `products`: the tool-use task ("What is 47 x 8?" with a `multiply` tool, `trl_ada.examples.agents`).

Models (`model_name_or_path`): `tiny` (built here, untrained), `tiny-warm` (after the demo's supervised warm start of
`warm_start_steps`, built once and cached in <output_dir>/warm-model), `tiny-tools` and `tiny-tools-warm` (the tiny
tool-calling model, warm-started on tool-use demonstrations). A missing model is built from these.
"""

from __future__ import annotations

import os

from trl_ada.examples.agents import product_problems, tool_warm_start
from trl_ada.examples.arithmetic import arithmetic_problems, hard_arithmetic, synthetic_arithmetic, word_problems
from trl_ada.examples.tiny import build_tiny_model
from trl_ada.examples.warm_start import warm_start


TASKS = {
    "synthetic": lambda a, seed: synthetic_arithmetic(a.synthetic_num_examples, a.synthetic_difficulty, seed),
    "word_problems": lambda a, seed: word_problems(a.synthetic_num_examples, a.synthetic_difficulty, seed),
    "arithmetic": lambda a, seed: arithmetic_problems(a.synthetic_num_examples, seed, split="train"),
    "hard_arithmetic": lambda a, seed: hard_arithmetic(a.dataset_split, num_examples=a.dataset_num_examples),
    "products": lambda a, seed: product_problems(a.synthetic_num_examples, seed),
}
MODELS = ("tiny", "tiny-warm", "tiny-tools", "tiny-tools-warm")


def offline_task(script_args, seed: int):
    """The training set of the offline task `script_args.dataset_name` names, or None for any other name."""
    build = TASKS.get(script_args.dataset_name)
    return None if build is None else build(script_args, seed)


def offline_model(name: str | None, training_args, warm_start_steps: int = 300) -> str | None:
    """The folder of the offline model `name` names (None: `tiny`), built under `training_args.output_dir` by the
    main process first; None for any other name."""
    name = name or "tiny"
    if name not in MODELS:
        return None
    output_dir = training_args.output_dir
    with training_args.main_process_first(desc="building the tiny model"):
        if name.startswith("tiny-tools"):
            model = build_tiny_model(os.path.join(output_dir, "tiny-tool-model"), tools=True)
            if name == "tiny-tools-warm":
                model = tool_warm_start(
                    model, os.path.join(output_dir, "tool-warm-model"), warm_start_steps, training_args.seed
                )
            return model
        model = build_tiny_model(os.path.join(output_dir, "tiny-model"))
    if name == "tiny":
        return model
    from accelerate import PartialState

    # Every process runs the warm start together (a data-parallel SFT run when launched on several processes); the
    # main process saves it, the others wait for the files.
    model = warm_start(model, os.path.join(output_dir, "warm-model"), warm_start_steps, training_args.seed)
    PartialState().wait_for_everyone()
    return model


__all__ = ["MODELS", "TASKS", "offline_model", "offline_task"]
