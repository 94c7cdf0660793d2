"""Prompt refill: an endless, seeded stream of extra prompts drawn from the training set.

TRL's dataloader hands each step a fixed generation batch. When a step drops prompts (dynamic sampling) it replaces
them with prompts drawn from this stream: the dataset's indices in a fresh seeded permutation per pass, read with a
cursor. The permutation is a pure function of (seed, pass), so every process draws the same prompts, and the cursor
is all the state a checkpoint needs for a resumed run to draw what an uninterrupted run would have drawn.

The stream is independent of TRL's sampler (its own random domain), so a drawn prompt may also come up in TRL's
order later in the epoch; every drawn prompt counts as consumed (`sampling/prompts_drawn`).

    >>> stream = PromptStream(num_prompts=5, seed=0)
    >>> first = stream.draw(3)
    >>> stream.draw(4)[:2] == [i for i in PromptStream(5, seed=0).draw(5) if i not in first]
    True
    >>> stream.state_dict()                   # 7 drawn: one full pass of 5, then 2 into the second
    {'pass_index': 1, 'position': 2, 'drawn': 7}
"""

from __future__ import annotations

import numpy as np
import torch


__all__ = ["EpochSeededSampler", "PromptStream"]

_DOMAIN = 0x5EF111  # keeps the stream's permutations apart from any other use of the same seed


class PromptStream:
    def __init__(self, num_prompts: int, seed: int, shuffle: bool = True):
        if num_prompts < 1:
            raise ValueError("The training set is empty: there is nothing to refill from.")
        self.num_prompts, self.seed, self.shuffle = num_prompts, seed, shuffle
        self.pass_index, self.position, self.drawn = 0, 0, 0
        self._order = self._permutation(0)

    def _permutation(self, pass_index: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.num_prompts))
        rng = np.random.default_rng([_DOMAIN, self.seed, pass_index])
        return rng.permutation(self.num_prompts).tolist()

    def draw(self, count: int) -> list[int]:
        """The next `count` dataset indices (a new permutation starts when one runs out)."""
        drawn = []
        while len(drawn) < count:
            if self.position == self.num_prompts:
                self.pass_index, self.position = self.pass_index + 1, 0
                self._order = self._permutation(self.pass_index)
            take = min(count - len(drawn), self.num_prompts - self.position)
            drawn += self._order[self.position : self.position + take]
            self.position += take
        self.drawn += count
        return drawn

    def state_dict(self) -> dict[str, int]:
        settings = {"num_prompts": self.num_prompts, "seed": self.seed, "shuffle": self.shuffle}
        return {"pass_index": self.pass_index, "position": self.position, "drawn": self.drawn, **settings}

    def load_state_dict(self, state: dict[str, int]) -> None:
        # The cursor walks one permutation: of another dataset's length, seed or order it points at other prompts.
        for name, field, now in (
            ("num_prompts", "the training set's length", self.num_prompts),
            ("seed", "seed", self.seed),
            ("shuffle", "shuffle_dataset", self.shuffle),
        ):
            if name in state and state[name] != now:  # a state without the settings cannot be checked
                raise ValueError(
                    f"the checkpoint's refill stream was saved with {field} = {state[name]!r}, this run has {now!r}: "
                    "resume with the training set and settings the checkpoint was saved with, or start a new run."
                )
        self.pass_index, self.position, self.drawn = state["pass_index"], state["position"], state["drawn"]
        self._order = self._permutation(self.pass_index)


class EpochSeededSampler(torch.utils.data.Sampler):
    """TRL's RepeatSampler with `set_epoch`, so that a run resumed in epoch e walks the prompts in the same order as
    an uninterrupted run.

    RepeatSampler draws one permutation per epoch from a generator seeded once; a resumed run builds a fresh one, so
    without this every epoch after the resume point would repeat the order of the first epochs (GRPOTrainer has the
    same problem). `set_epoch(e)`, which the Trainer calls at the start of every epoch, re-seeds the generator and
    skips e permutations: the order of an uninterrupted run, reproduced.
    """

    def __init__(self, sampler):
        self.sampler = sampler

    def __iter__(self):
        return iter(self.sampler)

    def __len__(self):
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        sampler = self.sampler
        if not getattr(sampler, "shuffle", False) or getattr(sampler, "seed", None) is None:
            return
        sampler.generator.manual_seed(sampler.seed)
        for _ in range(epoch):
            torch.randperm(sampler.num_samples, generator=sampler.generator)
