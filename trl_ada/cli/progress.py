"""The callback that runs `trl-ada-compare`'s evaluation schedule and its stopping rules (deadline, generation
budgets) inside one training run."""

from __future__ import annotations

import time

from transformers import TrainerCallback

from trl_ada.cli.heldout import HeldOutScore


class Progress(TrainerCallback):
    """Completions and tokens generated so far and the training clock (evaluation excluded); the held-out score
    before training, every `every` steps (or, with `every_tokens`, at the first step at or past each multiple of
    `every_tokens` generated tokens: the token grid) and at the end. Training stops early, evaluated where it stopped, at
    `stop_at` (a wall-clock time: the comparison's deadline; the run is then `cut`) or once `max_completions` are
    generated. `count` is the trainer's `generation_count`, set once the trainer exists."""

    def __init__(
        self,
        score: HeldOutScore,
        every: int,
        eval_k: int,
        label: str,
        stop_at: float | None = None,
        max_completions: int | None = None,
        max_tokens: int | None = None,
        extra_score: HeldOutScore | None = None,
        continue_cut: bool = True,
        every_tokens: int | None = None,
    ):
        self.count = None
        # The token grid: samplers generate at different rates per step, so a step grid lands at different token
        # costs per arm; this one evaluates every arm at the same costs. `grid_done`: the last grid point evaluated.
        self.every_tokens, self.grid_done = every_tokens, 0
        self.continue_cut = continue_cut  # a deadline's cut is continued later: evaluate at the real end only
        self.score, self.every, self.eval_k, self.label = score, every, eval_k, label
        self.extra_score = extra_score  # --eval_extra_split: a second held-out set, watched, not compared
        self.stop_at, self.max_completions, self.max_tokens = stop_at, max_completions, max_tokens
        self.curve: list[dict] = []
        self.started = 0.0
        self.stopped = None  # None: ran its max_steps; "deadline", "max_completions" or "max_tokens"
        self.resumed_seconds = None  # training seconds before the cut this run continues from
        self.end_seconds = None  # training seconds when it stopped (evaluations excluded)
        # What the last greedy evaluation on the grid took: a final cut (continue_cut off) stops this much earlier,
        # 1.5 times over, so that its own evaluation ends by the deadline (a record evaluated past it is lost).
        self.eval_estimate = None

    def resume(self, record: dict) -> None:
        """Continue a cut run's curve: its evaluations on the grid (steps, or tokens) and at step 0 up to the cut, the
        cut's own avg@k dropped (it was final then), the clock going on from the training seconds it had reached. On
        the token grid the next grid point follows the last one the saved curve holds: none is evaluated twice, none
        skipped (the generated count goes on from the checkpoint)."""

        def on_grid(point):
            if self.every_tokens is not None:
                return bool(point.get("grid_tokens"))
            return point["step"] % self.every == 0

        self.curve = [
            {k: v for k, v in point.items() if point["step"] == 0 or k not in ("avg_items", "avg@k")}
            for point in record["curve"]
            if point["step"] == 0 or on_grid(point)
        ]
        self.grid_done = max((g for point in self.curve for g in point.get("grid_tokens", [])), default=0)
        self.resumed_seconds = record["train_seconds"]

    def training_seconds(self) -> float:
        evaluating = self.score.seconds + (self.extra_score.seconds if self.extra_score is not None else 0.0)
        return time.time() - self.started - evaluating

    def grid_points(self) -> list[int]:
        """The token grid points the generated count has reached since the last one evaluated: the current step is
        the first at or past each of them (several when one step generates more than `every_tokens`)."""
        if self.every_tokens is None:
            return []
        reached = self.count.tokens // self.every_tokens
        return [k * self.every_tokens for k in range(self.grid_done // self.every_tokens + 1, reached + 1)]

    def _point(self, step, model, final=False, grid=()):
        reuse = step == 0  # the model every run starts from: scored once per comparison (see HeldOutScore)
        label = f"{self.label} step {step}"  # a line per batch of answers: a long evaluation is not silent
        started = time.time()
        point = {
            "step": step,
            "samples": self.count.completions,
            "tokens": self.count.tokens,
            "trained_tokens": self.count.trained_tokens,
            "seconds": self.training_seconds(),
            "items": self.score(model, reuse=reuse, label=label),
        }
        if grid:  # the grid points this evaluation stands for; "tokens" is what the run had generated then
            point["grid_tokens"] = list(grid)
            self.grid_done = max(grid)
        point["greedy"] = sum(point["items"]) / len(point["items"])
        if self.extra_score is not None:
            extra = self.extra_score(model, reuse=reuse, label=f"{label} (second set)")
            point["extra_items"] = extra  # per question, as "items": the second set's comparisons pair them too
            point["extra_greedy"] = sum(extra) / len(extra)
        if final and self.eval_k > 0:
            point["avg_items"] = self.score(model, k=self.eval_k, temperature=1.0, reuse=reuse, label=label)
            point["avg@k"] = sum(point["avg_items"]) / len(point["avg_items"])
        if not reuse and not final:
            self.eval_estimate = time.time() - started
        self.curve.append(point)
        print(
            f"[compare] {self.label} step {step:3d}  {point['samples']} completions generated  "
            + (f"(grid {point['grid_tokens'][-1]} tokens: {point['tokens']})  " if grid else "")
            + f"held-out greedy {point['greedy']:.3f}"
            + (f"  avg@{self.eval_k} {point['avg@k']:.3f}" if "avg@k" in point else ""),
            flush=True,
        )

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.resumed_seconds is not None:  # evaluated up to the cut already
            self.started = time.time() - self.resumed_seconds
            return
        self.started = time.time()
        self._point(0, model, final=True, grid=[0] if self.every_tokens is not None else ())

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.max_completions is not None and self.count.completions >= self.max_completions:
            self.stopped = "max_completions"
        elif self.max_tokens is not None and self.count.tokens >= self.max_tokens:
            self.stopped = "max_tokens"
        elif (
            self.stop_at is not None
            and time.time() + self.cut_margin() >= self.stop_at
            and state.global_step < state.max_steps
        ):
            self.stopped = "deadline"
        final = state.global_step >= state.max_steps or self.stopped is not None
        if final:
            self.end_seconds = self.training_seconds()
        cut = self.stopped == "deadline"
        if cut and self.continue_cut:
            final = False  # its end, evaluated then, is a later job's: here only the grid's evaluation
        grid = self.grid_points()
        on_step_grid = self.every_tokens is None and state.global_step % self.every == 0
        if final or on_step_grid or grid:
            # a final cut is scored greedily, as the grid is: avg@k over the held-out set would outlast the deadline
            self._point(state.global_step, model, final=final and not cut, grid=grid)
        if self.stopped is not None:
            control.should_training_stop = True
        if cut and self.continue_cut:  # a rerun continues from here (written whatever the save strategy)
            control.should_save = True

    def cut_margin(self) -> float:
        """Seconds before the deadline at which training stops: none when the cut is continued (it is not evaluated),
        else room for its greedy evaluation."""
        return 0.0 if self.continue_cut or self.eval_estimate is None else 1.5 * self.eval_estimate
