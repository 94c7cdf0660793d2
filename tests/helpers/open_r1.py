"""open-r1's GRPO reward setup, written from its documented behaviour: three reward functions summed (accuracy,
format, tag count), conversational prompts with a `solution` column, some golds that do not parse; and a scripted
policy that writes every kind of answer they tell apart.

- `accuracy_reward`: math-verify's verdict on the completion against the parsed gold, 1.0 or 0.0; None (the sample
  is skipped) where the gold does not parse.
- `format_reward`: 1.0 when the completion is `<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>`, else 0.0.
- `tag_count_reward`: 0.25 for each of the four tags present exactly once.

So a wrong answer in the right format scores 2.0 of 3, above `positive_threshold=0.7`: the sum alone would count it
as solved.
"""

from __future__ import annotations

import re

import torch
from datasets import Dataset

from tests.helpers.tool_policy import ScriptedPolicy


QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")
FORMAT = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", re.DOTALL | re.MULTILINE)
UNPARSEABLE = "a number"  # a gold math-verify cannot parse: accuracy_reward returns None for it


def dataset(count: int = 4, repeat: int = 4) -> Dataset:
    """`count` questions, each `repeat` times (a prompt comes back: the memory's samplers allocate by it)."""
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {i} + {i + 3}?"}],
            "solution": UNPARSEABLE if i % 4 == 3 else f"${2 * i + 3}$",
        }
        for i in range(count)
    ]
    return Dataset.from_list(rows * repeat)


def accuracy_reward(completions, solution, **kwargs):
    from math_verify import LatexExtractionConfig, parse, verify

    rewards = []
    for completion, gold in zip(completions, solution):
        gold_parsed = parse(gold, extraction_mode="first_match")
        if not gold_parsed:
            rewards.append(None)
            continue
        answer = parse(completion[0]["content"], extraction_config=[LatexExtractionConfig()])
        rewards.append(float(verify(gold_parsed, answer)))
    return rewards


def format_reward(completions, **kwargs):
    return [1.0 if FORMAT.match(completion[0]["content"]) else 0.0 for completion in completions]


def tag_count_reward(completions, **kwargs):
    def count(text: str) -> float:
        return sum(
            0.25 for tag in ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>") if text.count(tag) == 1
        )

    return [count(completion[0]["content"]) for completion in completions]


REWARDS = [accuracy_reward, format_reward, tag_count_reward]


def formatted(answer: int) -> str:
    return f"<think>\nadd\n</think>\n<answer>\n\\boxed{{{answer}}}\n</answer>"


class OpenR1Policy(ScriptedPolicy):
    """For "What is A + B?": right in open-r1's format with probability (A % 4) / 4, else mostly wrong in the format
    (sum 2.0: the trap), sometimes right without it (accuracy alone) or unformatted and wrong."""

    def respond(self, text: str) -> str:
        a, b = (int(x) for x in QUESTION.findall(text)[-1])
        draw, kind = torch.rand(2).tolist()
        if draw < (a % 4) / 4:
            return formatted(a + b)
        if kind < 0.6:
            return formatted(a + b + 1)
        return f"\\boxed{{{a + b}}}" if kind < 0.8 else "no idea"
