"""Prompt memory: each prompt's pass rate, remembered across steps as a decayed Beta posterior ("Ada-EMA").

Within one step no sampling rule can avoid paying for a prompt that is always right or always wrong; across steps
it can, if it remembers. Every time a prompt is sampled, its counts decay and take in the new samples:

    samples   <- decay * samples   + (completions scored this step)
    positives <- decay * positives + (completions with reward > positive_threshold)
    pass_rate  = (positives + prior_alpha) / (samples + prior_alpha + prior_beta)

`decay` < 1 forgets old visits geometrically, so the estimate follows a policy that improves; with the default 0.5,
the last visit carries about half of the weight. An unscorable completion (NaN reward) counts as a failure, as it
does in the pooled baseline. A prompt is keyed by a stable content hash of its token ids (blake2b, 8 bytes), never by
Python's salted `hash()`, so every process and every resumed run computes the same key.

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
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

__all__ = ["PromptMemory", "prompt_key"]


def prompt_key(prompt_ids: Sequence[int]) -> int:
    """Stable 64-bit content hash of a prompt's token ids (the same on every process, platform and run)."""
    data = np.asarray(prompt_ids, dtype="<i8").tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


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
