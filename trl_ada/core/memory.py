"""Prompt memory: each prompt's pass rate, remembered across steps as a decayed Beta posterior ("Ada-EMA").

Within one step no sampling rule can avoid paying for a prompt that is always right or always wrong; across steps
it can, if it remembers. Every time a prompt is sampled, its counts decay and take in the new samples:

    samples   <- decay * samples   + (completions scored this step)
    positives <- decay * positives + (completions with reward > positive_threshold)
    pass_rate  = (positives + prior_alpha) / (samples + prior_alpha + prior_beta)

`decay` < 1 forgets old visits geometrically, so the estimate follows a policy that improves; with the default 0.5,
the last visit carries about half of the weight. An unscorable completion (NaN reward: every reward function returned
None) is no trial: it counts in neither `samples` nor `positives`, as it counts in neither the exit rules nor the
pooled baseline; a visit whose completions were all unscorable still counts as a visit (its counts decay). A prompt
is keyed by a stable content hash of its token ids (blake2b, 8 bytes), never by Python's salted `hash()`, so every
process and every resumed run computes the same key.

Cost: the counts live in flat numpy arrays (8-byte key, two float64 counts, int32 visits, int32 last step: 32 bytes
per prompt, doubled capacity at worst) plus a dict from key to slot; measured with a million prompts: 104 bytes per
prompt, plus 36 for each key's int object, so about 140 MB per million remembered prompts per process. Only prompts
that were actually sampled are stored.

    >>> memory = PromptMemory(decay=0.5)
    >>> key = prompt_key([1, 2, 3])
    >>> memory.pass_rate(key)                   # never seen: the prior mean
    0.5
    >>> memory.update([key], [8], [6], step=0)  # 6 of 8 right
    >>> round(memory.pass_rate(key), 3)         # (6 + 1) / (8 + 2)
    0.7
    >>> memory.update([key], [8], [8], step=1)  # old counts decay to 3 of 4, then 8 of 8 join
    >>> round(memory.pass_rate(key), 3)         # (3 + 8 + 1) / (4 + 8 + 2)
    0.857

A run that trains on a few prompts out of many rarely meets a prompt twice, so the per-prompt memory alone predicts
little. What such a run does learn early is how each *kind* of prompt fares (one-digit sums are mostly right,
two-digit sums never are). `GroupPrior` remembers that per group (the value of a dataset column): the distribution of
pass rates across the group's prompts, fitted by moments from the first samples of every visit, so that a prompt
never seen before starts from its group's Beta instead of the flat prior.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np


__all__ = ["GroupPrior", "PromptMemory", "image_slots", "observe_step", "prompt_key", "prompt_text", "text_only"]


def prompt_key(prompt_ids: Sequence[int], images: Sequence | None = None, context: dict | None = None) -> int:
    """Stable 64-bit content hash of a prompt (the same on every process, platform and run).

    The prompt is its token ids, plus, where given, its images (their pixels: two rows asking the same question about
    different images are two prompts) and the row an environment is reset with (`context`: the task is the row, not
    only its text). Without images or context the key is the hash of the token ids alone.
    """
    digest = hashlib.blake2b(np.asarray(prompt_ids, dtype="<i8").tobytes(), digest_size=8)
    for image in images or ():
        digest.update(_image_bytes(image))
    if context:
        digest.update(json.dumps(context, sort_keys=True, default=repr).encode())
    return int.from_bytes(digest.digest(), "little")


# What a conversational prompt is without its images (the trainer keys image prompts by their text and pixels).


def text_only(prompt: Any) -> Any:
    """A conversational prompt without its image placeholders (text blocks kept, in order); anything else as is."""
    if not isinstance(prompt, list):
        return prompt
    return [
        {**message, "content": [part for part in message["content"] if part.get("type") != "image"]}
        if isinstance(message.get("content"), list)
        else message
        for message in prompt
    ]


def image_slots(prompt: Any) -> list[list[int]]:
    """(message, block) positions of the image placeholders in a conversational prompt's messages."""
    if not isinstance(prompt, list):
        return []
    return [
        [m, b]
        for m, message in enumerate(prompt)
        if isinstance(message.get("content"), list)
        for b, part in enumerate(message["content"])
        if part.get("type") == "image"
    ]


def prompt_text(prompt: Any) -> str:
    """The last message's text (the export's `prompt` column), image placeholders left out."""
    if not isinstance(prompt, list):
        return prompt
    content = prompt[-1]["content"]
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    return content


def _image_bytes(image) -> bytes:
    """A PIL image as its mode, size and pixels; a path or URL as its text; an array as its raw bytes."""
    if hasattr(image, "tobytes") and hasattr(image, "mode"):
        return f"{image.mode}{image.size}".encode() + image.tobytes()
    if isinstance(image, (str, bytes)):
        return image.encode() if isinstance(image, str) else image
    if isinstance(image, dict):  # datasets' undecoded Image feature: {"bytes": ..., "path": ...}
        return (image.get("bytes") or b"") + str(image.get("path")).encode()
    return np.asarray(image).tobytes()


class PromptMemory:
    """Per-prompt decayed Beta counts of successes; see the module docstring for the update rule."""

    def __init__(self, decay: float = 0.5, prior_alpha: float = 1.0, prior_beta: float = 1.0, capacity: int = 1024):
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay={decay!r} must be in (0, 1].")
        if not (prior_alpha > 0 and prior_beta > 0):
            raise ValueError(f"prior_alpha={prior_alpha!r} and prior_beta={prior_beta!r} must both be > 0.")
        self.decay, self.prior_alpha, self.prior_beta = float(decay), float(prior_alpha), float(prior_beta)
        self._slot: dict[int, int] = {}
        self._keys = np.zeros(capacity, dtype=np.uint64)
        self._samples = np.zeros(capacity, dtype=np.float64)
        self._positives = np.zeros(capacity, dtype=np.float64)
        self._visits = np.zeros(capacity, dtype=np.int32)
        self._last_step = np.zeros(capacity, dtype=np.int32)

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: int) -> bool:
        return key in self._slot

    def visits(self, key: int) -> int:
        slot = self._slot.get(key)
        return 0 if slot is None else int(self._visits[slot])

    def posterior(self, key: int) -> tuple[float, float, int]:
        """(alpha, beta, visits): the Beta posterior of the prompt's pass rate and how often it was sampled."""
        slot = self._slot.get(key)
        if slot is None:
            return self.prior_alpha, self.prior_beta, 0
        samples, positives = float(self._samples[slot]), float(self._positives[slot])
        return positives + self.prior_alpha, samples - positives + self.prior_beta, int(self._visits[slot])

    def pass_rate(self, key: int) -> float:
        """Posterior mean of the prompt's pass rate (the prior mean for a prompt never sampled)."""
        slot = self._slot.get(key)
        samples, positives = (0.0, 0.0) if slot is None else (self._samples[slot], self._positives[slot])
        return float((positives + self.prior_alpha) / (samples + self.prior_alpha + self.prior_beta))

    def update(self, keys: Sequence[int], samples: Sequence[int], positives: Sequence[int], step: int) -> None:
        """Fold one visit per key in: `samples[i]` completions scored for `keys[i]`, `positives[i]` of them right.

        A key listed twice is folded in twice, in order (two visits).
        """
        if not len(keys) == len(samples) == len(positives):
            raise ValueError("keys, samples and positives must have the same length.")
        for key, n, k in zip(keys, samples, positives):
            if not 0 <= k <= n:
                raise ValueError(f"positives ({k}) must be between 0 and samples ({n}).")
            slot = self._slot.get(key)
            if slot is None:
                slot = self._new_slot(key)
            self._samples[slot] = self.decay * self._samples[slot] + n
            self._positives[slot] = self.decay * self._positives[slot] + k
            self._visits[slot] += 1
            self._last_step[slot] = step

    def forget(self, keys: Sequence[int], factor: float) -> None:
        """Multiply the counts of remembered `keys` by `factor` without a visit: information ages even when a
        prompt is not sampled (the budgeted sampler calls this for the prompts it skips). Unknown keys are ignored."""
        if not 0.0 < factor <= 1.0:
            raise ValueError(f"factor={factor!r} must be in (0, 1].")
        for key in keys:
            slot = self._slot.get(key)
            if slot is not None:
                self._samples[slot] *= factor
                self._positives[slot] *= factor

    def _new_slot(self, key: int) -> int:
        slot = len(self._slot)
        if slot == len(self._keys):  # grow by doubling: amortised O(1) per new prompt
            for name in ("_keys", "_samples", "_positives", "_visits", "_last_step"):
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.zeros(max(len(old), 16), dtype=old.dtype)]))
        self._slot[key] = slot
        self._keys[slot] = key
        return slot

    # -- persistence -------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything needed to continue exactly: hyperparameters and the counts of every remembered prompt."""
        size = len(self._slot)
        return {
            "hyperparameters": np.array([self.decay, self.prior_alpha, self.prior_beta]),
            "keys": self._keys[:size].copy(),
            "samples": self._samples[:size].copy(),
            "positives": self._positives[:size].copy(),
            "visits": self._visits[:size].copy(),
            "last_step": self._last_step[:size].copy(),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        saved = tuple(float(x) for x in state["hyperparameters"])
        if saved != (self.decay, self.prior_alpha, self.prior_beta):
            raise ValueError(
                f"The saved prompt memory was built with (decay, prior_alpha, prior_beta) = {saved}, not "
                f"{(self.decay, self.prior_alpha, self.prior_beta)}: resume with the same prompt_memory_* settings."
            )
        keys = np.asarray(state["keys"], dtype=np.uint64)
        size = len(keys)
        self._keys = keys.copy()
        self._samples = np.asarray(state["samples"], dtype=np.float64).copy()
        self._positives = np.asarray(state["positives"], dtype=np.float64).copy()
        self._visits = np.asarray(state["visits"], dtype=np.int32).copy()
        self._last_step = np.asarray(state["last_step"], dtype=np.int32).copy()
        self._slot = {int(key): slot for slot, key in enumerate(keys.tolist())}
        if len(self._slot) != size:
            raise ValueError("The saved prompt memory holds duplicate keys: the file is corrupt.")

    def save(self, path: str) -> None:
        np.savez(path, **self.state_dict())

    def load(self, path: str) -> None:
        with np.load(path) as state:
            self.load_state_dict(dict(state))

    def table(self) -> dict[str, list]:
        """Columns for a readable export: prompt hash (hex), visits, decayed counts, posterior pass rate."""
        state = self.state_dict()
        samples, positives = state["samples"], state["positives"]
        pass_rate = (positives + self.prior_alpha) / (samples + self.prior_alpha + self.prior_beta)
        return {
            "prompt_hash": [f"{int(key):016x}" for key in state["keys"].tolist()],
            "visits": state["visits"].tolist(),
            "samples": samples.tolist(),
            "positives": positives.tolist(),
            "pass_rate": pass_rate.tolist(),
            "last_step": state["last_step"].tolist(),
        }


class GroupPrior:
    """Per group of prompts, the Beta distribution of its prompts' pass rates (empirical Bayes, method of moments).

    Each visit of a prompt contributes the fraction f = k / n of positives among its first samples (the ones drawn
    before any sampling rule looked at the rewards, so unbiased), n counting only the scorable ones: the trainer
    leaves unscorable samples (NaN reward) out, and a visit with fewer than two scorable ones out altogether. Across
    a group's visits:

        mean      m   = average f
        noise         = average f (1 - f) / (n - 1)     (the binomial part of the spread of f, unbiased)
        spread    v   = variance of f - noise           (how much the prompts' own pass rates differ)
        strength  s   = m (1 - m) / v - 1,  clipped to [min_strength, samples seen]
        prior         = Beta(m s, (1 - m) s)

    A homogeneous group (v ~ 0) gives a confident prior around m; a group of always-right and always-wrong prompts a
    U-shaped one: both predict correctly how often a fresh group of n comes back uniform. Every step ages all groups
    by `decay` (visited or not), so the prior follows the policy. A screened group keeps being sampled through the
    budget's explore floor, and each such visit is a fresh, unbiased look at the group: a group that starts to give
    signal is seen to do so. One that is no longer sampled at all fades below `min_visits` and its prompts are taken
    again. m is shrunk by half a pseudo-visit toward 1/2 so that a group never seen right still has a positive rate.

        >>> groups = GroupPrior(decay=1.0)
        >>> groups.prior("hard") is None                                 # nothing known yet
        True
        >>> groups.update(["hard"] * 4 + ["easy"] * 4, [4] * 8, [0, 0, 0, 1, 4, 4, 3, 4])
        >>> a, b = groups.prior("hard")
        >>> round(a / (a + b), 3), round(a + b, 1)   # mean (0.25 + 0.25) / (4 + 0.5); homogeneous: capped at 16 samples
        (0.111, 16.0)
    """

    def __init__(self, decay: float = 0.9, min_visits: float = 2.0, min_strength: float = 0.2):
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay={decay!r} must be in (0, 1].")
        self.decay, self.min_visits, self.min_strength = float(decay), float(min_visits), float(min_strength)
        # label -> [visits, sum f, sum f^2, sum f(1-f)/(n-1), samples], all decayed per step
        self._stats: dict[str, list[float]] = {}

    def __len__(self) -> int:
        return len(self._stats)

    def update(self, labels: Sequence[str], samples: Sequence[int], positives: Sequence[int]) -> None:
        """One step: age every group, then add one visit per entry (`positives[i]` right of its first `samples[i]`)."""
        if not len(labels) == len(samples) == len(positives):
            raise ValueError("labels, samples and positives must have the same length.")
        for stats in self._stats.values():
            for i in range(len(stats)):
                stats[i] *= self.decay
        for label, n, k in zip(labels, samples, positives):
            if not (n >= 2 and 0 <= k <= n):
                raise ValueError(f"a visit needs samples >= 2 and 0 <= positives <= samples, got {k} of {n}.")
            f = k / n
            stats = self._stats.setdefault(str(label), [0.0] * 5)
            for i, value in enumerate((1.0, f, f * f, f * (1.0 - f) / (n - 1), float(n))):
                stats[i] += value

    def prior(self, label: str) -> tuple[float, float] | None:
        """Beta(a, b) for a prompt of this group, or None while the group has fewer than `min_visits` (decayed)."""
        stats = self._stats.get(str(label))
        if stats is None or stats[0] < self.min_visits:
            return None
        visits, sum_f, sum_f2, sum_noise, samples = stats
        raw_mean = sum_f / visits
        spread = sum_f2 / visits - raw_mean**2 - sum_noise / visits
        mean = (sum_f + 0.25) / (visits + 0.5)
        strength = mean * (1.0 - mean) / spread - 1.0 if spread > 0 else math.inf
        strength = min(max(strength, self.min_strength), samples)
        return mean * strength, (1.0 - mean) * strength

    def state_dict(self) -> dict:
        return {
            "hyperparameters": [self.decay, self.min_visits, self.min_strength],
            "groups": {label: list(stats) for label, stats in self._stats.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        saved = tuple(float(x) for x in state["hyperparameters"])
        if saved != (self.decay, self.min_visits, self.min_strength):
            raise ValueError(
                f"The saved group prior was built with (decay, min_visits, min_strength) = {saved}, not "
                f"{(self.decay, self.min_visits, self.min_strength)}."
            )
        self._stats = {str(label): [float(x) for x in stats] for label, stats in state["groups"].items()}

    def table(self) -> dict[str, list]:
        """Columns for a readable summary: group, decayed visits, mean pass rate, prior strength (None: too few)."""
        out: dict[str, list] = {"group": [], "visits": [], "pass_rate": [], "strength": []}
        for label, stats in sorted(self._stats.items()):
            prior = self.prior(label)
            out["group"].append(label)
            out["visits"].append(stats[0])
            out["pass_rate"].append(stats[1] / stats[0] if stats[0] else None)
            out["strength"].append(None if prior is None else sum(prior))
        return out


def observe_step(
    memory: PromptMemory, keys: Sequence[int], samples: Sequence[int], positives: Sequence[int], step: int
) -> dict[str, float]:
    """Fold one step's counts per prompt into the memory; return how well it had foreseen them (`sampling/memory_*`:
    the squared error of the remembered pass rate against the rate the step then saw, over prompts seen before)."""
    predicted = [memory.pass_rate(key) for key in keys]  # before this step's samples join
    seen = [i for i, key in enumerate(keys) if key in memory]
    metrics = {
        "sampling/memory_seen_before": len(seen) / len(keys),
        "sampling/memory_predicted_extreme": sum(not 0.05 <= p <= 0.95 for p in predicted) / len(keys),
    }
    scored = [i for i in seen if samples[i] > 0]  # a visit of unscorable completions only has no observed rate
    if scored:
        errors = [(predicted[i] - positives[i] / samples[i]) ** 2 for i in scored]
        metrics["sampling/memory_brier"] = sum(errors) / len(errors)
    memory.update(keys, samples, positives, step=step)
    metrics["sampling/memory_prompts"] = float(len(memory))
    return metrics
