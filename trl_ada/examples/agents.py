"""The offline tool-use task: multi-digit products, a `multiply` tool, and a warm start that teaches the call format.

A small model cannot multiply 47 x 8 in its head; with the tool it only has to copy the two numbers into a call
and the result into its answer. The tiny tool model (`trl_ada.examples.tiny.build_tiny_model(tools=True)`: TRL's Qwen2.5 chat
template, for which TRL parses tool calls) starts from random weights, so a short supervised warm start on
demonstrations (half of them use the tool, half answer from memory, wrongly) leaves a policy that calls the tool on
some samples, copies the digits right on some of those, and is wrong otherwise: RL then has signal, and Reinforce-Ada
spends its extra rounds on the prompts where the policy is still mostly wrong.

    python -m trl_ada.cli.train --config recipes/tiny/tools_ada_pos.yaml      # tool-using RL, offline, on a CPU

`--tools trl_ada.examples.agents.multiply` hands the tool to the trainer (any importable function with a docstring in the
Google style TRL reads); `last_number_reward` grades the final assistant message.
"""

from __future__ import annotations

import os
import random

from datasets import Dataset


def multiply(a: int, b: int) -> int:
    """
    Multiplies two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product of the two integers.
    """
    return int(a) * int(b)


class CalculatorEnv:
    """An environment whose calculator already knows the question: TRL resets one instance per sample with its row,
    and its public method `calculator` is the tool. The policy only has to call it and copy the result."""

    def reset(self, **row) -> None:
        question = row["prompt"][-1]["content"]
        self.a, self.b = (int(x) for x in question.removeprefix("What is ").removesuffix("?").split(" x "))

    def calculator(self) -> int:
        """
        Computes the answer to the user's question.

        Returns:
            The answer.
        """
        return self.a * self.b


def product_problems(num_examples: int = 1024, seed: int = 0, digits: tuple[int, int] = (2, 1)) -> Dataset:
    """'What is 47 x 8?': a `digits[0]`-digit times a `digits[1]`-digit number (default 2 and 1: beyond the tiny
    model's head, easy to copy into a call), one user message, the integer `answer`."""
    rng = random.Random(seed)
    rows = []
    for _ in range(num_examples):
        a, b = (rng.randint(10 ** (d - 1) if d > 1 else 2, 10**d - 1) for d in digits)
        rows.append({"prompt": [{"role": "user", "content": f"What is {a} x {b}?"}], "answer": str(a * b)})
    return Dataset.from_list(rows)


def demonstration(problem: str, answer: str, use_tool: bool, tool: str = "calculator") -> list[dict]:
    """The assistant turns after the user's question: call the tool and copy its result, or guess (wrongly)."""
    a, b = (int(x) for x in problem.removeprefix("What is ").removesuffix("?").split(" x "))
    if not use_tool:
        return [{"role": "assistant", "content": f"The answer is {a * b + 10}."}]
    arguments = {"a": a, "b": b} if tool == "multiply" else {}
    call = {"type": "function", "function": {"name": tool, "arguments": arguments}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": tool, "content": str(a * b)},
        {"role": "assistant", "content": f"The answer is {answer}."},
    ]


def tool_warm_start(base_model: str, output_dir: str, steps: int = 400, seed: int = 0, tool_share: float = 0.5) -> str:
    """Supervised warm start on tool-use demonstrations; skipped when <output_dir> already holds the result."""
    if os.path.exists(os.path.join(output_dir, "model.safetensors")):
        print(f"[tool warm start] reusing the warm-started model in {output_dir}")
        return output_dir
    from transformers.utils import get_json_schema
    from trl import SFTTrainer

    from trl_ada.examples.warm_start import warm_start_config

    rng = random.Random(seed)
    problems = product_problems(2048, seed=seed + 1000)
    messages = [
        row["prompt"] + demonstration(row["prompt"][0]["content"], row["answer"], rng.random() < tool_share)
        for row in problems
    ]
    schema = get_json_schema(CalculatorEnv.calculator)
    dataset = Dataset.from_dict({"messages": messages, "tools": [[schema]] * len(messages)})
    args = warm_start_config(output_dir, steps, seed, max_length=None)
    trainer = SFTTrainer(model=base_model, args=args, train_dataset=dataset)
    print(f"[tool warm start] {steps} supervised steps on tool-use demonstrations")
    trainer.train()
    trainer.save_model(output_dir)
    return output_dir


__all__ = ["demonstration", "multiply", "product_problems", "tool_warm_start"]
