"""A calculator task and a scripted stand-in policy, so TRL's tool-calling loop runs inside adaptive rounds offline.

A random tiny model never writes a valid tool call, so (as TRL's own tool tests do) the model's `generate` is replaced
by a policy that writes text through the real tokenizer: for "What is A x B?" it calls `multiply` with probability
`skill(A)` (0, 1/4, ..., 1: all-wrong, mixed and all-right prompts), sometimes malformed (an unknown argument name,
which TRL counts as a tool failure); after a tool response it copies the result (or, 1 time in 8, miscopies it);
answering without the tool it guesses. Everything after `generate` (parsing, the tool loop, masks, rewards, the loss,
the optimizer) is the real TRL and the real tiny model.

`ReplayPolicy` answers from recorded completions instead, so GRPOTrainer can be made to produce exactly the
completions AdaGRPOTrainer kept, through its own tool loop.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

import torch
from datasets import Dataset

from trl_ada.examples import agents
from trl_ada.examples.agents import multiply  # noqa: F401 (the tool the tests hand to the trainer)


QUESTION = re.compile(r"What is (\d+) x (\d+)\?")
RESPONSE = re.compile(r"<tool_response>(.*?)</tool_response>", re.S)


def skill(a: int) -> float:
    return (a % 5) / 4


def calculator_dataset(count: int = 16) -> Dataset:
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {10 + 3 * i} x {21 + i}?"}],
            "answer": str((10 + 3 * i) * (21 + i)),
        }
        for i in range(count)
    ]
    return Dataset.from_list(rows)


def product_reward(completions, answer, **kwargs):
    """1 when the last number of the final assistant message is the product."""
    rewards = []
    for completion, gold in zip(completions, answer):
        numbers = re.findall(r"-?\d+", completion[-1].get("content") or "")
        rewards.append(1.0 if numbers and numbers[-1] == gold else 0.0)
    return rewards


class MultiplyingEnv:
    """An environment (TRL's `environment_factory`: one instance per rollout) whose tool is `multiply`; it keeps the
    numbers of the last call (`called_with`) for the environment's own reward."""

    called_with = None

    def multiply(self, a: int, b: int) -> int:
        self.called_with = (a, b)
        return a * b

    multiply.__doc__ = agents.multiply.__doc__  # the tool's schema, which TRL reads from the docstring


def _call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class ScriptedPolicy:
    """Replaces `model.generate` (see the module docstring); counts the calls and rows it served."""

    def __init__(self, tokenizer, malformed_rate: float = 0.25):
        self.tokenizer, self.malformed_rate = tokenizer, malformed_rate
        self.calls, self.rows = 0, 0

    def respond(self, text: str) -> str:
        a, b = (int(x) for x in QUESTION.findall(text)[-1])
        draw = torch.rand(3).tolist()
        responses = RESPONSE.findall(text)
        if responses:
            result = responses[-1].strip()
            if not result.lstrip("-").isdigit():  # the tool failed: guess
                return f"The answer is {a * b - 1}."
            return f"The answer is {int(result) if draw[0] < 7 / 8 else int(result) + 1}."
        if draw[0] < skill(a):
            return _call("multiply", a=a, c=b) if draw[1] < self.malformed_rate else _call("multiply", a=a, b=b)
        return f"The answer is {a * b if draw[2] < 0.1 else a * b - 1}."

    def generate(self, input_ids, attention_mask=None, generation_config=None, **kwargs):
        self.calls += 1
        self.rows += input_ids.shape[0]
        tok = self.tokenizer
        max_new = getattr(generation_config, "max_new_tokens", None) or 64
        completions = []
        for row, mask in zip(input_ids, attention_mask if attention_mask is not None else torch.ones_like(input_ids)):
            text = tok.decode(row[mask.bool()])
            ids = tok.encode(self.respond(text), add_special_tokens=False) + [tok.eos_token_id]
            completions.append(ids[:max_new])
        return _append(input_ids, completions, tok.pad_token_id)


def model_turns(completion_ids: list[int], tool_mask: list[int] | None) -> list[list[int]]:
    """A completion's model-written turns: the maximal runs of tool_mask == 1 (tool results between them)."""
    mask = tool_mask if tool_mask is not None else [1] * len(completion_ids)
    turns, current = [], []
    for token, keep in zip(completion_ids, mask):
        if keep:
            current.append(token)
        elif current:
            turns.append(current)
            current = []
    return turns + ([current] if current else [])


class ReplayPolicy(ScriptedPolicy):
    """Writes recorded turns: for a question's k-th turn (k tool responses so far), the next recorded token ids."""

    def __init__(self, tokenizer, samples):
        super().__init__(tokenizer)
        self.queues = defaultdict(list)
        for prompt_text, completion_ids, tool_mask in samples:
            question = QUESTION.findall(prompt_text)[-1]
            for k, turn in enumerate(model_turns(completion_ids, tool_mask)):
                self.queues[(question, k)].append(turn)

    def generate(self, input_ids, attention_mask=None, generation_config=None, **kwargs):
        self.calls += 1
        tok = self.tokenizer
        completions = []
        for row, mask in zip(input_ids, attention_mask if attention_mask is not None else torch.ones_like(input_ids)):
            text = tok.decode(row[mask.bool()])
            key = (QUESTION.findall(text)[-1], len(RESPONSE.findall(text)))
            if not self.queues[key]:
                raise AssertionError(f"ReplayPolicy: nothing recorded for turn {key}")
            completions.append(self.queues[key].pop(0))
        return _append(input_ids, completions, tok.pad_token_id)


def _append(input_ids, completions: list[list[int]], pad_token_id: int):
    """What `generate` returns: the prompts, then the completions right-padded to one width."""
    width = max(len(ids) for ids in completions)
    padded = torch.full((len(completions), width), pad_token_id, dtype=input_ids.dtype)
    for i, ids in enumerate(completions):
        padded[i, : len(ids)] = torch.tensor(ids)
    return torch.cat([input_ids, padded.to(input_ids.device)], dim=1)


def install(trainer, policy) -> None:
    """The policy answers for the trainer's model (generation only: the loss still runs the real model)."""
    trainer.model.generate = policy.generate
