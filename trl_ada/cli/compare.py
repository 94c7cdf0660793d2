"""`trl-ada-compare`: should I switch? A paired comparison of samplers on your own recipe and data, CPU or GPU.

    trl-ada-compare --config recipes/SmolLM2-135M-Instruct/arith_grpo.yaml \\
        --arm grpo sampler=grpo \\
        --arm balanced sampler=reinforce_ada reinforce_ada_choice=balanced \\
        --arm dapo sampler=dapo \\
        --seeds 0 1 2 3 4 --max_steps 40 --eval_every 5 --jobs 2 --output_dir runs/compare

Every arm is the shared recipe (`--config`, any `trl_ada.cli.train` recipe) with its own `field=value` overrides (or
its own recipe: `--arm mine path/to/recipe.yaml field=value`); the first arm is the baseline. The design, and why:

- **Paired seeds.** Seed s gives every arm the same initial weights, the same training data and the same prompt
  order; only the sampler differs. Differences are taken per seed, so a seed's luck cancels out.
- **A held-out set** the runs never train on: `--eval_dataset` (a file, folder or Hub id of its own, `--eval_split`
  choosing its split), else `--eval_split` (a split of the recipe's dataset, e.g. `test`; refused for a single local
  file, which holds one split), else the built-in tasks' own held-out split, else `--eval_fraction` of the training
  rows, split off by a hash of their prompt. Its source and size are printed and reported; fewer than
  `--eval_min_examples` (20) questions is refused, since every interval is over them. Each question's score is the recipe's reward (the weighted sum of its reward functions: accuracy for 0/1
  rewards) of a greedy answer, before training, every `--eval_every` optimizer steps (or, with `--eval_every_tokens N`,
  at the first step at or past each multiple of N generated tokens: every arm at the same costs) and at the end; avg@k
  (`--eval_k` samples at temperature 1) before and at the end too. Evaluation runs under fixed sampling noise and
  does not touch the run's random state, so the evaluation before training is scored once per initial model
  (`<output_dir>/eval_cache`, keyed by its weights) and read back by every run that starts from it. A run with a
  colocated vLLM engine answers with it (its weights pushed first): on the bench, 16 s an evaluation against 204 s.
- **Every generated completion counted**, and its tokens: the trainer's own count (`trl_ada.integration.generation_count`, logged
  as `sampling/generated_completions_total` and `sampling/generated_tokens_total`), made where samples are made on
  every path: each row the generation backend returns (rounds, refills, budget top-ups, multi-process padding,
  dropped groups, plain GRPO sampling, `rollout_func`, pipelined rounds and their wasted speculative samples); with
  tools, one per sample, its tokens those of all its model turns (tool results left out).
- **Three comparisons**, each as the mean paired difference to the baseline with a 95% bootstrap interval over seeds
  and questions (`trl_ada.cli.paired`): at equal optimizer steps, at every evaluation step of the run; at equal
  generated completions and at equal generated tokens, each seed compared where both its runs have generated as many
  (scores interpolated between evaluations; on the token grid, at equal tokens, the grid's own evaluations, each
  seed at the last grid point both its runs reached). An interval that contains 0 reads **no difference measured**.
- **Resumable.** Each run writes `<output_dir>/results/<arm>-seed<seed>.json` when it ends; a rerun skips what is
  there and recomputes the report (`report.json`, `compare.png`) from all of them. `--jobs K` runs K runs at once
  (`--threads` torch threads each): on a CPU give each its own core.
- **A time limit loses nothing.** `--deadline_s` stops a run still training when it comes: the run is kept as cut,
  its evaluations count at the steps it reached, and it writes a checkpoint there; a rerun continues it from that
  checkpoint (weights, optimizer, data order, sampler state, counts: with transformers generation the run an uncut
  one would have been; a colocated vLLM engine starts its sampling stream again, so there the same run in
  distribution), so a run longer than one job finishes over several; only the checkpoint a rerun continues from
  is kept. The cut itself is not evaluated (the run's end will be), and a run may start while 20 minutes remain,
  though it will not finish. With `--keep_cut` a cut run is final instead (jobs with a hard time limit whose disk
  does not outlive them, such as a notebook's or a lent machine's): no run starts that would end after the deadline, a run
  stops early enough for its cut's greedy evaluation (as long as its last one took, 1.5 times over) to end by the
  deadline, and no checkpoint is written. `--max_completions` and `--max_tokens` stop each run at the first step at
  which it has generated that many completions or tokens (every arm the same generation budget: a cheap arm runs
  more steps, so give a `--max_steps` that no arm reaches).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

import torch

from trl_ada.cli.heldout import HeldOutScore, colocated_generate, held_out_split, weights_digest
from trl_ada.cli.progress import Progress
from trl_ada.cli.records import cut_checkpoint, load_results, result_path, write_json
from trl_ada.cli.report import ROLLOUT_SHARE, arm_cost, compare, gpu_cost, plot, print_report
from trl_ada.integration.generation_count import TOKENS_METRIC
from trl_ada.samplers import FIELD_ARMS


BASE_FIELDS = ("--report_to", "none", "--save_strategy", "no", "--logging_steps", "1", "--disable_tqdm", "true")


@dataclass
class Arm:
    name: str
    recipe: str | None = None  # the arm's own recipe; None: the shared one
    overrides: list[str] = field(default_factory=list)  # field=value

    @classmethod
    def parse(cls, tokens: list[str]) -> "Arm":
        name, rest = tokens[0], tokens[1:]
        recipe = rest.pop(0) if rest and rest[0].endswith((".yaml", ".yml")) else None
        bad = [t for t in rest if "=" not in t]
        if bad:
            raise ValueError(f"--arm {name}: overrides are field=value, got {bad}")
        return cls(name, recipe, rest)

    def argv(self) -> list[str]:
        out = []
        for item in self.overrides:
            key, value = item.split("=", 1)
            out += [f"--{key}", value]
        return out


# ---------------------------------------------------------------------------------------------------------------------
# One run (held-out scoring: trl_ada.cli.heldout; its schedule: trl_ada.cli.progress; records: trl_ada.cli.records).


def run_argv(args, arm: Arm, seed: int, run_dir: str) -> list[str]:
    """The recipe arguments of one run: the arm's recipe, the shared `--set`, the arm's overrides, then ours."""
    return [
        "--config",
        arm.recipe or args.config,
        *args.set_argv,
        *arm.argv(),
        *BASE_FIELDS,
        "--seed",
        str(seed),
        "--output_dir",
        run_dir,
        "--max_steps",
        str(args.max_steps),
    ]


def check_inputs(args, arms: list[Arm]) -> None:
    """Everything a run would refuse, checked before the first one starts: the flags' ranges, every arm's recipe
    and overrides parsed as its runs will parse them (a typo in the last arm fails now, not after the first trained),
    and the held-out set every run scores on (one too small to compare on fails now, not in every run)."""
    from trl_ada.cli.train import load_train_dataset, parse_recipe

    for flag in ("max_steps", "eval_every", "eval_every_tokens", "threads", "jobs"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise ValueError(f"--{flag} {getattr(args, flag)}: must be at least 1")
    if not 0 < args.eval_fraction < 1:
        raise ValueError(
            f"--eval_fraction {args.eval_fraction}: must lie strictly between 0 and 1 (the share of "
            "training rows held out; default 0.1)"
        )
    parsed = []
    for arm in arms:
        recipe = arm.recipe or args.config
        if not os.path.isfile(recipe):
            raise ValueError(f"--arm {arm.name}: its recipe {recipe!r} is not a file")
        try:
            parsed.append(
                parse_recipe(run_argv(args, arm, args.seeds[0], os.path.join(args.output_dir, "runs", "check")))
            )
        except ValueError as error:
            raise ValueError(f"--arm {arm.name} (with --set {' '.join(args.set) or '(none)'}): {error}") from None
    for script_args, _, _ in parsed:  # the held-out set as each arm's runs will build it
        held_out_split(args, script_args, load_train_dataset(script_args, args.task_seed))
    # An override that the recipe makes moot (e.g. reinforce_ada_choice under a recipe's `sampler: grpo`) leaves two
    # arms the same run: the comparison would then measure seed noise only. Said, not refused: an A/A run is legitimate.
    built = [
        (vars(s), {k: v for k, v in t.to_dict().items() if k not in t.unread_fields}, vars(m)) for s, t, m in parsed
    ]
    named: set[str] = set()  # each set of twins once, by its first arm
    for i, first in enumerate(arms):
        same = [arm.name for arm, config in zip(arms[i + 1 :], built[i + 1 :]) if config == built[i]]
        if same and first.name not in named:
            named.update(same)
            warnings.warn(
                f"--arm {first.name} and --arm {', '.join(same)} build the same configuration (an override may have "
                f"no effect under its sampler: sampler={built[i][1]['sampler']!r}): they differ by nothing their sampler "
                "reads, so their comparison measures seed noise only. To compare samplers, name each arm's sampler "
                "(e.g. sampler=reinforce_ada reinforce_ada_choice=balanced).",
                UserWarning,
                stacklevel=2,
            )


def run_one(args, arm: Arm, seed: int) -> dict:
    """Train one (arm, seed) and return its record (also written to results/<arm>-seed<seed>.json)."""
    from transformers import AutoTokenizer, PrinterCallback

    from trl_ada.cli.train import (
        build_trainer,
        load_agents,
        load_reward_funcs,
        load_train_dataset,
        parse_recipe,
        resolve_model,
        with_dataset,
    )

    run_dir = os.path.join(args.output_dir, "runs", f"{arm.name}-seed{seed}")
    script_args, training_args, model_args = parse_recipe(run_argv(args, arm, seed, run_dir))
    model = resolve_model(model_args.model_name_or_path, training_args, script_args.warm_start_steps)
    if model_args.dtype not in (None, "auto"):
        training_args.model_init_kwargs = {**(training_args.model_init_kwargs or {}), "dtype": model_args.dtype}
    train, held, held_source = held_out_split(args, script_args, load_train_dataset(script_args, args.task_seed))
    print(f"[compare] held-out: {held_source}, {len(held)} questions", flush=True)
    reward_funcs = load_reward_funcs(script_args.reward_funcs)
    cache_dir = os.path.join(args.output_dir, "eval_cache")
    score = HeldOutScore(
        AutoTokenizer.from_pretrained(model),
        held,
        reward_funcs,
        training_args.reward_weights,
        training_args.max_completion_length,
        args.eval_seed,
        cache_dir,
    )
    extra_score = None
    if args.eval_extra_split is not None or args.eval_extra_dataset is not None:
        # e.g. the easy questions a run on hard ones could forget
        extra_args = {"dataset_split": args.eval_extra_split or "train"}
        if args.eval_extra_dataset is not None:
            extra_args.update(dataset_name=args.eval_extra_dataset, dataset_num_examples=None)
        extra = load_train_dataset(with_dataset(script_args, **extra_args), args.task_seed)
        extra_score = HeldOutScore(
            AutoTokenizer.from_pretrained(model),
            extra.select(range(min(args.eval_examples, len(extra)))),
            reward_funcs,
            training_args.reward_weights,
            training_args.max_completion_length,
            args.eval_seed,
            cache_dir,
        )
    progress = Progress(
        score,
        args.eval_every,
        args.eval_k,
        f"{arm.name} seed {seed}",
        stop_at=args.stop_at,
        max_completions=args.max_completions,
        max_tokens=args.max_tokens,
        extra_score=extra_score,
        continue_cut=not args.keep_cut,
        every_tokens=args.eval_every_tokens,
    )
    checkpoint, cut_record = cut_checkpoint(args, arm.name, seed, run_dir)
    if checkpoint is not None:
        progress.resume(cut_record)
        print(f"[compare] {arm.name} seed {seed}: continuing from the cut at step {cut_record['steps']}", flush=True)
    trainer = build_trainer(
        model, reward_funcs, training_args, model_args, train, load_agents(script_args), callbacks=[progress]
    )
    for scorer in (score, extra_score):  # the run's own colocated engine answers the held-out set, if it has one
        if scorer is not None:
            scorer.engine = colocated_generate(trainer)
    trainer.remove_callback(PrinterCallback)  # one line per evaluation instead (runs in parallel share a terminal)
    progress.count = trainer.generation_count  # what the trainer generated, counted on every sampling path
    trainer.train(resume_from_checkpoint=checkpoint)
    logs = [h for h in trainer.state.log_history if "loss" in h]
    per_step = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps
    record = {
        "arm": arm.name,
        "seed": seed,
        "recipe": arm.recipe or args.config,
        "overrides": arm.overrides,
        "set": args.set,
        "steps": trainer.state.global_step,
        "max_steps": args.max_steps,
        "cut": progress.stopped == "deadline",
        "stopped": progress.stopped,
        "generated_completions": trainer.generation_count.completions,
        "generated_tokens": trainer.generation_count.tokens,
        "trained_completions": per_step * trainer.state.global_step * trainer.accelerator.num_processes,
        "train_seconds": progress.end_seconds,
        # of which inside generation calls (sampling/generation_seconds_total, main process; a continued run's too)
        "generation_seconds": trainer.generation_count.seconds,
        "threads": args.threads,  # seconds are per this many threads
        # the evaluation grid: steps, or generated tokens (then each grid evaluation holds its "grid_tokens")
        "eval_every": args.eval_every,
        "eval_every_tokens": args.eval_every_tokens,
        # what the held-out evaluations cost (both sets, avg@k included; a continued run adds its cut part's)
        "eval_engine": "vllm" if score.engine is not None else "transformers",
        "eval_seconds": (cut_record or {}).get("eval_seconds", 0.0)
        + score.seconds
        + (extra_score.seconds if extra_score is not None else 0.0),
        "held_out_questions": len(held),
        "held_out_source": held_source,
        "curve": progress.curve,
        "resumed_at": [*(cut_record or {}).get("resumed_at", []), *([cut_record["steps"]] if cut_record else [])],
        "reward": [h.get("sampling/iid_reward", h.get("reward")) for h in logs],
        # per step, the tokens generated so far as the trainer logged them: where each grid evaluation should be
        "generated_tokens_by_step": [h.get(TOKENS_METRIC) for h in logs],
        # per step, the share of trained groups whose rewards differ, the groups that carry a gradient: 1 - TRL's
        # frac_reward_zero_std, which weighs each group by its samples (the same thing for equal groups; Est's
        # groups differ in size)
        "signal": [None if h.get("frac_reward_zero_std") is None else 1.0 - h["frac_reward_zero_std"] for h in logs],
    }
    write_json(result_path(args.output_dir, arm.name, seed), record)
    # Full fine-tuning's checkpoints are large (weights and optimizer state): keep only the one a rerun continues from.
    keep = os.path.join(run_dir, f"checkpoint-{trainer.state.global_step}") if record["cut"] else None
    for path in glob.glob(os.path.join(run_dir, "checkpoint-*")):
        if path != keep:
            shutil.rmtree(path, ignore_errors=True)
    return record


# ---------------------------------------------------------------------------------------------------------------------
# The command (the report: trl_ada.cli.report).


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trl-ada-compare",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="the shared recipe (a trl_ada.cli.train YAML)")
    parser.add_argument(
        "--arm",
        nargs="+",
        action="append",
        default=[],
        metavar="NAME [RECIPE] [FIELD=VALUE]",
        help="an arm: its name, optionally its own recipe, then overrides; the first is the baseline",
    )
    parser.add_argument(
        "--field",
        action="store_true",
        help="add the field's rules as arms, before any --arm: "
        + ", ".join(f"{name} ({' '.join(overrides)})" for name, overrides in FIELD_ARMS)
        + "; GRPO is then the baseline",
    )
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="overrides for every arm")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max_steps", type=int, required=True, help="optimizer steps per run (every arm the same)")
    parser.add_argument(
        "--eval_every",
        type=int,
        default=None,
        help="optimizer steps between held-out evaluations (default 5; not with --eval_every_tokens)",
    )
    parser.add_argument(
        "--eval_every_tokens",
        type=int,
        default=None,
        metavar="N",
        help="evaluate on a generated-token grid instead: at the first optimizer step at or past each multiple of N "
        "generated tokens (every arm at the same costs; the report's equal-tokens comparison reads the grid)",
    )
    parser.add_argument("--eval_examples", type=int, default=64, help="held-out questions at most")
    parser.add_argument(
        "--eval_split",
        default=None,
        help="the split to evaluate on (e.g. test): of --eval_dataset if given, else of the recipe's "
        "dataset (a single local file holds one split: it is refused there)",
    )
    parser.add_argument(
        "--eval_dataset",
        default=None,
        help="the held-out set from its own source (a local json/jsonl/parquet/csv file, a folder or a "
        "Hub id), loaded as the recipe loads its dataset (same dataset_prompt_template)",
    )
    parser.add_argument("--eval_extra_dataset", default=None, help="--eval_extra_split's set from its own source")
    parser.add_argument(
        "--eval_min_examples",
        type=int,
        default=20,
        help="refuse a held-out set smaller than this (its questions are what the intervals are over)",
    )
    parser.add_argument(
        "--eval_extra_split",
        default=None,
        help="a second split scored at the same points and reported beside the comparison, not in it "
        "(e.g. the easy questions a run on hard ones could forget)",
    )
    parser.add_argument(
        "--eval_fraction",
        type=float,
        default=0.1,
        help="without --eval_split: the share of training rows held out (by a hash of the prompt)",
    )
    parser.add_argument("--eval_k", type=int, default=4, help="avg@k samples per question before and after (0: none)")
    parser.add_argument("--eval_seed", type=int, default=1234, help="the sampling noise of every evaluation")
    parser.add_argument("--task_seed", type=int, default=0, help="seed of the built-in tasks' data (not the runs')")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (separate processes)")
    parser.add_argument(
        "--deadline_s",
        type=float,
        default=None,
        help="start no run that would end after this many seconds (estimated from the runs finished "
        "so far; the first runs always start), and stop the runs still training when they come "
        "(evaluated where they stopped, kept as cut, checkpointed: a rerun continues them)",
    )
    parser.add_argument(
        "--keep_cut",
        action="store_true",
        help="a rerun trains only the missing runs and keeps those a deadline cut (jobs with a hard time "
        "limit add seeds instead of cutting the same runs again); a cut then stops early enough "
        "for its greedy evaluation to end by the deadline, and writes no checkpoint",
    )
    parser.add_argument(
        "--max_completions",
        type=int,
        default=None,
        help="stop each run at the first step at which it has generated this many completions",
    )
    parser.add_argument(
        "--max_tokens",
        type=int,
        default=None,
        help="stop each run at the first step at which it has generated this many tokens (every arm "
        "the same budget on the hardware-free cost axis; give a --max_steps no arm reaches)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--output_dir", default="runs/compare")
    parser.add_argument("--report_only", action="store_true", help="recompute the report from results/, train nothing")
    parser.add_argument("--only", nargs=2, metavar=("ARM", "SEED"), help=argparse.SUPPRESS)  # one run (for --jobs)
    parser.add_argument("--stop_at", type=float, default=None, help=argparse.SUPPRESS)  # the deadline, wall clock
    return parser


def parse_command(argv: list[str]) -> tuple[argparse.Namespace, list[Arm]]:
    """The command's flags and arms, checked as far as they can be before anything trains (`check_inputs`)."""
    args = build_parser().parse_args(argv)
    resolve_eval_grid(args)
    field = [[name, *overrides] for name, overrides in FIELD_ARMS] if args.field else []
    if not field and not args.arm:
        build_parser().error("give the arms to compare: --arm NAME [FIELD=VALUE ...] (twice or more), or --field")
    arms = [Arm.parse(tokens) for tokens in field + args.arm]
    names = [arm.name for arm in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"--arm: names must differ, got {names}")
    args.set_argv = Arm("set", None, args.set).argv()
    if args.only is None and not args.report_only:
        check_inputs(args, arms)
    return args, arms


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, arms = parse_command(argv)
    names = [arm.name for arm in arms]
    torch.set_num_threads(args.threads)
    if args.only is not None:
        run_one(args, next(arm for arm in arms if arm.name == args.only[0]), int(args.only[1]))
        return {}
    if args.deadline_s is not None and args.stop_at is None:
        args.stop_at = time.time() + args.deadline_s
    failed: list[str] = []
    if not args.report_only:
        done = load_results(args.output_dir)
        # seed by seed, so that a deadline leaves whole pairs; a run cut by a deadline continues from its cut,
        # unless --keep_cut (jobs with a hard time limit that would rather add seeds)
        pending = [
            (arm, seed)
            for seed in args.seeds
            for arm in arms
            if seed not in done.get(arm.name, {}) or (done[arm.name][seed].get("cut") and not args.keep_cut)
        ]
        print(
            f"[compare] {len(pending)} runs to train ({len(arms) * len(args.seeds) - len(pending)} already in "
            f"{args.output_dir}/results)",
            flush=True,
        )
        clock = Deadline(args.deadline_s, args.jobs, continued=not args.keep_cut)
        if args.jobs <= 1:
            run_serial(pending, args, clock)
        else:
            failed = run_parallel(argv, pending, args, clock)
        if clock.refused:
            print(f"[compare] deadline: {clock.refused} runs not started (a rerun trains them)", flush=True)
    results = load_results(args.output_dir)
    report = compare(results, names)
    print_report(report)
    write_json(os.path.join(args.output_dir, "report.json"), report)
    plot(results, names, os.path.join(args.output_dir, "compare.png"))
    print(f"\n[compare] report: {args.output_dir}/report.json, plot: {args.output_dir}/compare.png")
    if failed:  # after the report: the runs that finished are not lost with the others
        raise RuntimeError(f"trl-ada-compare: these runs failed (rerun to retry them): {failed}")
    return report


def resolve_eval_grid(args) -> None:
    """One evaluation grid: `--eval_every` steps (5 when neither flag is given) or `--eval_every_tokens`."""
    if args.eval_every is not None and args.eval_every_tokens is not None:
        raise ValueError(
            f"--eval_every {args.eval_every} and --eval_every_tokens {args.eval_every_tokens}: give one evaluation "
            "grid, optimizer steps (--eval_every) or generated tokens (--eval_every_tokens)"
        )
    if args.eval_every is None and args.eval_every_tokens is None:
        args.eval_every = 5


class Deadline:
    """Whether another run may start: it must be expected to end before `seconds` (the mean duration of the runs
    finished so far; until one has finished, the first wave of `jobs` runs starts). When cut runs are `continued`,
    a run that will not end in time still makes progress: it starts while `min_left` seconds remain. Asked from
    every worker thread of `--jobs`: one lock keeps the counts."""

    def __init__(self, seconds: float | None, jobs: int, continued: bool = False, min_left: float = 1200.0):
        self.seconds, self.jobs, self.start = seconds, max(jobs, 1), time.time()
        self.continued, self.min_left = continued, min_left
        self.durations: list[float] = []
        self.started = self.refused = 0
        self.lock = threading.Lock()

    def may_start(self) -> bool:
        with self.lock:
            if self.seconds is not None:
                elapsed = time.time() - self.start
                expected = sum(self.durations) / len(self.durations) if self.durations else 0.0
                if self.continued:
                    expected = min(expected, self.min_left)
                first_wave = not self.durations and self.started < self.jobs
                if elapsed >= self.seconds or (not first_wave and elapsed + expected > self.seconds):
                    self.refused += 1
                    return False
            self.started += 1
            return True

    def finished(self, seconds: float) -> None:
        with self.lock:
            self.durations.append(seconds)


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free now: held open together, so none is handed out twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Ports:
    """MASTER_PORTs for runs at once: each free when handed out and none a running run's (a port is free until its
    run binds it, so the free ones alone could hand it out twice)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.taken: set[str] = set()

    @contextlib.contextmanager
    def port(self):
        with self.lock:
            port = min({str(p) for p in free_ports(len(self.taken) + 1)} - self.taken)
            self.taken.add(port)
        try:
            yield port
        finally:
            with self.lock:
                self.taken.discard(port)


def run_serial(pending, args, clock: Deadline) -> None:
    """`--jobs 1`: the runs one after another, in this process. Unless the caller set MASTER_PORT, they use a port
    free now rather than accelerate's default 29500: a colocated vLLM engine binds it, so a second comparison running
    beside this one (another `--jobs 1` call) otherwise failed with EADDRINUSE."""
    chosen = "MASTER_PORT" not in os.environ
    if chosen:
        os.environ["MASTER_PORT"] = str(free_ports(1)[0])
    try:
        for arm, seed in pending:
            if not clock.may_start():
                break
            started = time.time()
            run_one(args, arm, seed)
            clock.finished(time.time() - started)
    finally:
        if chosen:
            del os.environ["MASTER_PORT"]


def run_parallel(argv, pending, args, clock: Deadline) -> list[str]:
    """`--jobs` runs at once, each its own process with `--threads` torch threads, in the order of `pending`;
    returns the runs that failed (the others go on; a failed run's result is missing, so a rerun trains it again).

    Each run gets its own MASTER_PORT: a colocated vLLM engine (`use_vllm=True, vllm_mode="colocate"`) sets up a
    one-process torch.distributed group, and accelerate's CPU state fills an unset MASTER_PORT with 29500, so two
    runs starting together otherwise race for that port and one fails (EADDRINUSE)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    ports = Ports()

    def train(arm: Arm, seed: int) -> str | None:
        """One run in its own process, on a worker thread; the run's label if it failed."""
        if not clock.may_start():  # asked when a worker is free: the moment the run would start
            return None
        command = [sys.executable, "-m", "trl_ada.cli.compare", *argv, "--only", arm.name, str(seed)]
        if args.stop_at is not None:
            command += ["--stop_at", repr(args.stop_at)]
        started = time.time()
        with ports.port() as port:
            code = subprocess.run(command, env={**env, "MASTER_PORT": port}).returncode
        if code != 0:
            return f"{arm.name} seed {seed}"
        clock.finished(time.time() - started)  # a run that failed early says nothing of how long runs take
        return None

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
    try:
        outcomes = list(pool.map(lambda run: train(*run), pending))
    finally:
        pool.shutdown(cancel_futures=True)  # interrupted (Ctrl-C): the runs still queued do not start
    return [label for label in outcomes if label is not None]


__all__ = [
    "ROLLOUT_SHARE",
    "Arm",
    "Deadline",
    "HeldOutScore",
    "Progress",
    "arm_cost",
    "compare",
    "cut_checkpoint",
    "gpu_cost",
    "held_out_split",
    "load_results",
    "main",
    "plot",
    "print_report",
    "result_path",
    "run_one",
    "weights_digest",
    "write_json",
]


def cli() -> int:
    """The console script: `main` returns the report (for Python callers); a shell wants exit status 0."""
    main()
    return 0


if __name__ == "__main__":
    main()
