"""`trl-ada-compare`: should I switch? A paired comparison of samplers on your own recipe and data, CPU or GPU.

    trl-ada-compare --config recipes/SmolLM2-135M-Instruct/arith_grpo.yaml \\
        --arm grpo multiround_adaptive_downsampling=false \\
        --arm balanced reinforce_ada_choice=balanced \\
        --arm dapo multiround_adaptive_downsampling=false dynamic_sampling=true \\
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
  rewards) of a greedy answer, before training, every `--eval_every` optimizer steps and at the end; avg@k
  (`--eval_k` samples at temperature 1) before and at the end too. Evaluation runs under fixed sampling noise and
  does not touch the run's random state, so the evaluation before training is scored once per initial model
  (`<output_dir>/eval_cache`, keyed by its weights) and read back by every run that starts from it.
- **Every generated completion counted**, and its tokens: the trainer's own count (`trl_ada.integration.generation_count`, logged
  as `sampling/generated_completions_total` and `sampling/generated_tokens_total`), made where samples are made on
  every path: each row the generation backend returns (rounds, refills, budget top-ups, multi-process padding,
  dropped groups, plain GRPO sampling, `rollout_func`, pipelined rounds and their wasted speculative samples); with
  tools, one per sample, its tokens those of all its model turns (tool results left out).
- **Three comparisons**, each as the mean paired difference to the baseline with a 95% bootstrap interval over seeds
  and questions (`trl_ada.cli.paired`): at equal optimizer steps, at every evaluation step of the run; at equal
  generated completions and at equal generated tokens, each seed compared where both its runs have generated as many
  (scores interpolated between evaluations). An interval that contains 0 reads **no difference measured**.
- **Resumable.** Each run writes `<output_dir>/results/<arm>-seed<seed>.json` when it ends; a rerun skips what is
  there and recomputes the report (`report.json`, `compare.png`) from all of them. `--jobs K` runs K runs at once
  (`--threads` torch threads each): on a CPU give each its own core.
- **A time limit loses nothing.** `--deadline_s` stops a run still training when it comes: the run is kept as cut,
  its evaluations count at the steps it reached, and it writes a checkpoint there; a rerun continues it from that
  checkpoint (weights, optimizer, data order, sampler state, counts: with transformers generation the run an uncut
  one would have been; a colocated vLLM engine starts its sampling stream again, so there the same run in
  distribution), so a run longer than one session finishes over several; only the checkpoint a rerun continues from
  is kept. The cut itself is not evaluated (the run's end will be), and a run may start while 20 minutes remain,
  though it will not finish. With `--keep_cut` a cut run is final instead (sessions of a fixed length whose
  checkpoints do not outlive them, such as a lent GPU's): no run starts that would end after the deadline, a run
  stops early enough for its cut's greedy evaluation (as long as its last one took, 1.5 times over) to end by the
  deadline, and no checkpoint is written. `--max_completions` and `--max_tokens` stop each run at the first step at
  which it has generated that many completions or tokens (every arm the same generation budget: a cheap arm runs
  more steps, so give a `--max_steps` that no arm reaches).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field

import torch
import transformers
from transformers import TrainerCallback

from trl_ada.cli import paired
from trl_ada.cli.plotting import pyplot

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
# One run.

def held_out_split(args, script_args, train):
    """(training rows, held-out rows, where the held-out rows come from): see the module docstring for the order of
    the choices. Fewer than `--eval_min_examples` held-out questions is an error: every interval of the comparison
    is over these questions, and a handful of them cannot tell two samplers apart."""
    from trl_ada.cli.train import ScriptArguments, load_train_dataset

    if args.eval_dataset is not None:
        source = f"{args.eval_dataset}" + (f" (split {args.eval_split})" if args.eval_split else "")
        eval_args = ScriptArguments(**{**vars(script_args), "dataset_name": args.eval_dataset,
                                       "dataset_split": args.eval_split or "train", "dataset_num_examples": None})
        held = load_train_dataset(eval_args, args.task_seed)
    elif args.eval_split is not None:
        source = f"{script_args.dataset_name} split {args.eval_split}"
        eval_args = ScriptArguments(**{**vars(script_args), "dataset_split": args.eval_split})
        held = load_train_dataset(eval_args, args.task_seed)
    elif script_args.dataset_name == "arithmetic":
        from trl_ada.examples.arithmetic import arithmetic_problems

        source = "arithmetic split test"
        held = arithmetic_problems(args.eval_examples, args.task_seed, split="test")
    else:
        def is_held_out(row):
            return zlib.crc32(json.dumps(row["prompt"], sort_keys=True).encode()) % 1000 < 1000 * args.eval_fraction

        source = f"{script_args.dataset_name}: {args.eval_fraction:g} of its rows, by a hash of the prompt"
        held = train.filter(is_held_out)
        train = train.filter(lambda row: not is_held_out(row))
    held = held.select(range(min(args.eval_examples, len(held))))
    if len(held) < args.eval_min_examples:
        raise ValueError(
            f"the held-out set ({source}) has {len(held)} questions, fewer than --eval_min_examples "
            f"{args.eval_min_examples}: every interval of the comparison is over held-out questions, and so few "
            "cannot tell two samplers apart. Give a larger one (--eval_dataset FILE, --eval_split, --eval_examples, "
            "--eval_fraction), or lower --eval_min_examples knowingly.")
    return train, held, source


def _function_identity(func) -> list[str]:
    """A reward function's module, name and source: a fixed or another function of the same name is another key."""
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):
        source = repr(func)
    return [getattr(func, "__module__", ""), getattr(func, "__qualname__", repr(func)),
            hashlib.sha256(source.encode()).hexdigest()]


def weights_digest(model) -> str:
    """A digest of every weight's bytes: two models with the same digest answer every prompt alike."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class HeldOutScore:
    """Each held-out question's score: the recipe's weighted reward of its answers (greedy, or k samples at T=1).

    With a `cache_dir`, a call with `reuse=True` keeps its scores there under a key of the model's weights, config,
    generation config and device (a GPU by name), the held-out rows, the chat template, the reward functions
    (module, name, source) and weights, the sampling settings and the torch and transformers versions, and a later
    call with the same key reads them: the evaluation before training is the same for every arm (and, from one model folder, every seed),
    and on the hard set it costs more than ten minutes a run (a greedy pass and avg@k, one thread). The noise is
    fixed (`eval_seed`), so a hit is exact. Runs that miss together (a parallel first wave) score once: the others
    wait on a lock beside the entry and read it.
    """

    def __init__(self, tokenizer, dataset, reward_funcs, reward_weights, max_new_tokens, seed, cache_dir=None):
        self.tokenizer, self.dataset, self.reward_funcs = tokenizer, dataset, reward_funcs
        self.weights = reward_weights or [1.0] * len(reward_funcs)
        self.max_new_tokens, self.seed, self.seconds = max_new_tokens, seed, 0.0
        self.cache_dir = cache_dir

    def __call__(self, model, k: int = 1, temperature: float = 0.0, reuse: bool = False) -> list[float]:
        if not reuse or self.cache_dir is None:
            return self._score(model, k, temperature)
        device = str(model.device)
        if model.device.type == "cuda":  # an H100 and an H200 run other kernels: greedy answers may differ
            device += " " + torch.cuda.get_device_name(model.device)
        key = hashlib.sha256(json.dumps([
            weights_digest(model), model.config.to_json_string(), model.generation_config.to_json_string(),
            device, self.tokenizer.chat_template, self.dataset.to_list(),
            [_function_identity(f) for f in self.reward_funcs], self.weights, self.max_new_tokens, self.seed, k,
            temperature, torch.__version__, transformers.__version__,
        ], sort_keys=True, default=str).encode()).hexdigest()
        path = os.path.join(self.cache_dir, f"{key}.json")
        os.makedirs(self.cache_dir, exist_ok=True)
        # Runs starting together wait for the first to score and read its scores: otherwise each scores the same
        # initial model at once, each slower for the others.
        import fcntl  # POSIX, as vLLM and the launches this tool runs

        with open(f"{path}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.path.exists(path):
                with open(path) as f:
                    return json.load(f)
            items = self._score(model, k, temperature)
            write_json(path, items)
            return items

    def _score(self, model, k: int, temperature: float) -> list[float]:
        from trl_ada.cli.evaluate import _generate_transformers, evaluation_noise

        start = time.time()
        prompts = list(self.dataset["prompt"])
        with evaluation_noise(model, self.seed):
            texts = _generate_transformers(model, self.tokenizer, prompts, k, self.max_new_tokens, temperature, 1.0, 64)
        columns = {c: [v for v in self.dataset[c] for _ in range(k)]
                   for c in self.dataset.column_names if c != "prompt"}
        completions = [[{"role": "assistant", "content": t}] for t in texts]  # as TRL hands conversational rewards
        total = [0.0] * len(texts)
        for func, weight in zip(self.reward_funcs, self.weights):
            values = func(prompts=[p for p in prompts for _ in range(k)], completions=completions, **columns)
            total = [t + weight * (v if v is not None else 0.0) for t, v in zip(total, values)]
        self.seconds += time.time() - start
        return [sum(total[i * k : (i + 1) * k]) / k for i in range(len(prompts))]


class Progress(TrainerCallback):
    """Completions and tokens generated so far and the training clock (evaluation excluded); the held-out score
    before training, every `every` steps and at the end. Training stops early, evaluated where it stopped, at
    `stop_at` (a wall-clock time: the comparison's deadline; the run is then `cut`) or once `max_completions` are
    generated. `count` is the trainer's `generation_count`, set once the trainer exists."""

    def __init__(self, score: HeldOutScore, every: int, eval_k: int, label: str,
                 stop_at: float | None = None, max_completions: int | None = None, max_tokens: int | None = None,
                 extra_score: HeldOutScore | None = None, continue_cut: bool = True):
        self.count = None
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
        """Continue a cut run's curve: its evaluations on the `every` grid (and step 0) up to the cut, the cut's own
        avg@k dropped (it was final then), the clock going on from the training seconds it had reached."""
        cut = record["steps"]
        self.curve = [{k: v for k, v in point.items() if point["step"] == 0 or k not in ("avg_items", "avg@k")}
                      for point in record["curve"] if point["step"] % self.every == 0 or point["step"] == 0]
        self.resumed_seconds = record["train_seconds"]

    def training_seconds(self) -> float:
        evaluating = self.score.seconds + (self.extra_score.seconds if self.extra_score is not None else 0.0)
        return time.time() - self.started - evaluating

    def _point(self, step, model, final=False):
        reuse = step == 0  # the model every run starts from: scored once per comparison (see HeldOutScore)
        started = time.time()
        point = {"step": step, "samples": self.count.completions, "tokens": self.count.tokens,
                 "trained_tokens": self.count.trained_tokens,
                 "seconds": self.training_seconds(), "items": self.score(model, reuse=reuse)}
        point["greedy"] = sum(point["items"]) / len(point["items"])
        if self.extra_score is not None:
            extra = self.extra_score(model, reuse=reuse)
            point["extra_greedy"] = sum(extra) / len(extra)
        if final and self.eval_k > 0:
            point["avg_items"] = self.score(model, k=self.eval_k, temperature=1.0, reuse=reuse)
            point["avg@k"] = sum(point["avg_items"]) / len(point["avg_items"])
        if not reuse and not final:
            self.eval_estimate = time.time() - started
        self.curve.append(point)
        print(f"[compare] {self.label} step {step:3d}  {point['samples']} completions generated  "
              f"held-out greedy {point['greedy']:.3f}" + (f"  avg@{self.eval_k} {point['avg@k']:.3f}"
                                                           if "avg@k" in point else ""), flush=True)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.resumed_seconds is not None:  # evaluated up to the cut already
            self.started = time.time() - self.resumed_seconds
            return
        self.started = time.time()
        self._point(0, model, final=True)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.max_completions is not None and self.count.completions >= self.max_completions:
            self.stopped = "max_completions"
        elif self.max_tokens is not None and self.count.tokens >= self.max_tokens:
            self.stopped = "max_tokens"
        elif self.stop_at is not None and time.time() + self.cut_margin() >= self.stop_at \
                and state.global_step < state.max_steps:
            self.stopped = "deadline"
        final = state.global_step >= state.max_steps or self.stopped is not None
        if final:
            self.end_seconds = self.training_seconds()
        cut = self.stopped == "deadline"
        if cut and self.continue_cut:
            final = False  # its end, evaluated then, is a later session's: here only the grid's evaluation
        if final or state.global_step % self.every == 0:
            # a final cut is scored greedily, as the grid is: avg@k over the held-out set would outlast the deadline
            self._point(state.global_step, model, final=final and not cut)
        if self.stopped is not None:
            control.should_training_stop = True
        if cut and self.continue_cut:  # a rerun continues from here (written whatever the save strategy)
            control.should_save = True

    def cut_margin(self) -> float:
        """Seconds before the deadline at which training stops: none when the cut is continued (it is not evaluated),
        else room for its greedy evaluation."""
        return 0.0 if self.continue_cut or self.eval_estimate is None else 1.5 * self.eval_estimate


def run_one(args, arm: Arm, seed: int) -> dict:
    """Train one (arm, seed) and return its record (also written to results/<arm>-seed<seed>.json)."""
    from transformers import AutoTokenizer, PrinterCallback
    from trl import get_peft_config

    from trl_ada.cli.train import ScriptArguments, load_object, load_reward_funcs, load_train_dataset, parse_recipe, resolve_model
    from trl_ada.trainer import AdaGRPOTrainer

    run_dir = os.path.join(args.output_dir, "runs", f"{arm.name}-seed{seed}")
    argv = ["--config", arm.recipe or args.config, *args.set_argv, *arm.argv(), *BASE_FIELDS,
            "--seed", str(seed), "--output_dir", run_dir, "--max_steps", str(args.max_steps)]
    script_args, training_args, model_args = parse_recipe(argv)
    model = resolve_model(model_args.model_name_or_path, training_args, script_args.warm_start_steps)
    if model_args.dtype not in (None, "auto"):
        training_args.model_init_kwargs = {**(training_args.model_init_kwargs or {}), "dtype": model_args.dtype}
    train, held, held_source = held_out_split(args, script_args, load_train_dataset(script_args, args.task_seed))
    print(f"[compare] held-out: {held_source}, {len(held)} questions", flush=True)
    reward_funcs = load_reward_funcs(script_args.reward_funcs)
    cache_dir = os.path.join(args.output_dir, "eval_cache")
    score = HeldOutScore(AutoTokenizer.from_pretrained(model), held, reward_funcs, training_args.reward_weights,
                         training_args.max_completion_length, args.eval_seed, cache_dir)
    extra_score = None
    if args.eval_extra_split is not None or args.eval_extra_dataset is not None:
        # e.g. the easy questions a run on hard ones could forget
        extra_args = {"dataset_split": args.eval_extra_split or "train"}
        if args.eval_extra_dataset is not None:
            extra_args.update(dataset_name=args.eval_extra_dataset, dataset_num_examples=None)
        extra = load_train_dataset(ScriptArguments(**{**vars(script_args), **extra_args}), args.task_seed)
        extra_score = HeldOutScore(AutoTokenizer.from_pretrained(model), extra.select(range(min(args.eval_examples,
                                   len(extra)))), reward_funcs, training_args.reward_weights,
                                   training_args.max_completion_length, args.eval_seed, cache_dir)
    progress = Progress(score, args.eval_every, args.eval_k, f"{arm.name} seed {seed}",
                        stop_at=args.stop_at, max_completions=args.max_completions, max_tokens=args.max_tokens,
                        extra_score=extra_score,
                        continue_cut=not args.keep_cut)
    checkpoint, cut_record = cut_checkpoint(args, arm.name, seed, run_dir)
    if checkpoint is not None:
        progress.resume(cut_record)
        print(f"[compare] {arm.name} seed {seed}: continuing from the cut at step {cut_record['steps']}", flush=True)
    trainer = AdaGRPOTrainer(
        model=model, reward_funcs=reward_funcs, args=training_args, train_dataset=train,
        peft_config=get_peft_config(model_args), callbacks=[progress],
        tools=[load_object(path, "tools") for path in script_args.tools] or None,
        environment_factory=(load_object(script_args.environment_factory, "environment_factory")
                             if script_args.environment_factory else None),
    )
    trainer.remove_callback(PrinterCallback)  # one line per evaluation instead (runs in parallel share a terminal)
    progress.count = trainer.generation_count  # what the trainer generated, counted on every sampling path
    trainer.train(resume_from_checkpoint=checkpoint)
    logs = [h for h in trainer.state.log_history if "loss" in h]
    per_step = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps
    record = {"arm": arm.name, "seed": seed, "recipe": arm.recipe or args.config, "overrides": arm.overrides,
              "set": args.set, "steps": trainer.state.global_step, "max_steps": args.max_steps,
              "cut": progress.stopped == "deadline", "stopped": progress.stopped,
              "generated_completions": trainer.generation_count.completions,
              "generated_tokens": trainer.generation_count.tokens,
              "trained_completions": per_step * trainer.state.global_step * trainer.accelerator.num_processes,
              "train_seconds": progress.end_seconds, "threads": args.threads,  # seconds are per this many threads
              # what the held-out evaluations cost (both sets, avg@k included; a continued run adds its cut part's)
              "eval_seconds": (cut_record or {}).get("eval_seconds", 0.0) + score.seconds
              + (extra_score.seconds if extra_score is not None else 0.0),
              "held_out_questions": len(held), "held_out_source": held_source, "curve": progress.curve,
              "resumed_at": [*(cut_record or {}).get("resumed_at", []), *([cut_record["steps"]] if cut_record else [])],
              "reward": [h.get("sampling/iid_reward", h.get("reward")) for h in logs],
              # per step, the share of trained groups whose rewards differ, the groups that carry a gradient: 1 - TRL's
              # frac_reward_zero_std, which weighs each group by its samples (the same thing for equal groups; Est's
              # groups differ in size)
              "signal": [None if h.get("frac_reward_zero_std") is None else 1.0 - h["frac_reward_zero_std"]
                         for h in logs]}
    write_json(result_path(args.output_dir, arm.name, seed), record)
    # Full fine-tuning's checkpoints are large (weights and optimizer state): keep only the one a rerun continues from.
    keep = os.path.join(run_dir, f"checkpoint-{trainer.state.global_step}") if record["cut"] else None
    for path in glob.glob(os.path.join(run_dir, "checkpoint-*")):
        if path != keep:
            shutil.rmtree(path, ignore_errors=True)
    return record


def cut_checkpoint(args, arm: str, seed: int, run_dir: str) -> tuple[str | None, dict | None]:
    """The checkpoint a deadline wrote when it cut this run, and the cut run's record; (None, None) when there is no
    cut run to continue (none yet, finished, or its checkpoint is gone: it trains from the start)."""
    path = result_path(args.output_dir, arm, seed)
    if not os.path.exists(path):
        return None, None
    with open(path) as f:
        record = json.load(f)
    checkpoint = os.path.join(run_dir, f"checkpoint-{record['steps']}")
    if not (record.get("cut") and os.path.isdir(checkpoint)):
        return None, None
    if record["max_steps"] != args.max_steps:
        raise ValueError(f"{arm} seed {seed} was cut at step {record['steps']} of a {record['max_steps']}-step run: "
                         f"continue it with --max_steps {record['max_steps']}, or delete {path} to train it anew with "
                         f"--max_steps {args.max_steps}")
    return checkpoint, record


def result_path(output_dir: str, arm: str, seed: int) -> str:
    return os.path.join(output_dir, "results", f"{arm}-seed{seed}.json")


def write_json(path: str, data) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"  # parallel runs may write the same file (the evaluation cache)
    with open(temporary, "w") as f:
        json.dump(data, f)
    os.replace(temporary, path)  # a cut run leaves no half-written result


# ---------------------------------------------------------------------------------------------------------------------
# The report.

def load_results(output_dir: str) -> dict[str, dict[int, dict]]:
    results: dict[str, dict[int, dict]] = {}
    for path in sorted(glob.glob(os.path.join(output_dir, "results", "*.json"))):
        with open(path) as f:
            record = json.load(f)
        results.setdefault(record["arm"], {})[record["seed"]] = record
    sizes = {len(r["curve"][0]["items"]) for runs in results.values() for r in runs.values() if r.get("curve")}
    if len(sizes) > 1:  # paired differences over questions need the same questions in every run
        raise ValueError(f"{output_dir}/results: the runs there were scored on held-out sets of different sizes "
                         f"({sorted(sizes)} questions): one comparison's runs share --eval_split and --eval_examples; "
                         "give a comparison with other settings its own --output_dir")
    return results


def compare(results: dict[str, dict[int, dict]], arms: list[str]) -> dict:
    """Every arm against the first: paired differences at each common evaluation step, at equal generated
    completions and at equal generated tokens."""
    baseline = arms[0]
    report = {"baseline": baseline, "arms": {}}
    for arm in arms[1:]:
        seeds = sorted(set(results.get(arm, {})) & set(results.get(baseline, {})))
        if not seeds:
            continue
        runs, bases = [results[arm][s]["curve"] for s in seeds], [results[baseline][s]["curve"] for s in seeds]
        by_step = []  # at each evaluated step, the seeds whose two runs both reached it (a cut run stops early)
        for step in sorted({p["step"] for c in runs + bases for p in c}):
            pairs = [(run, base) for run, base in zip(runs, bases)
                     if any(p["step"] == step for p in run) and any(p["step"] == step for p in base)]
            if pairs:
                diffs = [_at(run, "step", step) - _at(base, "step", step) for run, base in pairs]
                by_step.append({"step": step, **paired.paired_difference(diffs)})

        def per_step(name, key):
            return sum(results[name][s][key] / max(results[name][s]["steps"], 1) for s in seeds) / len(seeds)

        report["arms"][arm] = {
            "seeds": seeds, "equal_steps": by_step,
            "equal_completions": _at_equal_cost(runs, bases, "samples", "completions"),
            "equal_tokens": _at_equal_cost(runs, bases, "tokens", "tokens"),
            **_trained_axes(runs, bases),
            "completions_per_step": per_step(arm, "generated_completions"),
            "baseline_completions_per_step": per_step(baseline, "generated_completions"),
            "tokens_per_step": per_step(arm, "generated_tokens"),
            "baseline_tokens_per_step": per_step(baseline, "generated_tokens"),
        }
    report["cost"] = {name: arm_cost(results.get(name, {})) for name in arms if results.get(name)}
    records = [r for name in arms for r in results.get(name, {}).values()]
    report["held_out"] = [list(pair) for pair in sorted({(r.get("held_out_source", "?"), r.get("held_out_questions"))
                                                         for r in records})]
    return report


def _at_equal_cost(runs, bases, axis: str, label: str) -> dict:
    """The paired difference where each seed's two runs have both generated as much (`axis`: "samples" for
    completions, "tokens"): the smaller of their final counts, each run's scores interpolated there."""
    diffs, at = [], []
    pairs = list(zip(runs, bases))
    if any(min(run[-1][axis], base[-1][axis]) > 0 for run, base in pairs):
        # a run cut before its first evaluation after step 0 would add a difference of exactly 0 (the same model)
        pairs = [(run, base) for run, base in pairs if min(run[-1][axis], base[-1][axis]) > 0]
    for run, base in pairs:
        x = min(run[-1][axis], base[-1][axis])
        at.append(x)
        diffs.append(paired.interpolate_items(run, axis, "items", x) - paired.interpolate_items(base, axis, "items", x))
    return {label: at, **paired.paired_difference(diffs)}


# The GPU cost model (docs/compare.md): a step's cost is generated tokens plus trained tokens, weighed so that the
# rollout is ROLLOUT_SHARE of a GRPO step, where every generated token is trained once. Seer (arXiv 2511.14617),
# RollPacker (2509.21009) and APRIL (2509.18521) measure the rollout at 63-90% of a synchronous step; 0.75 is the
# Reinforce-Ada paper's own Table 3 (8 H100s): balanced's step 2.8x GRPO n=4's while it generates about 3.5x the
# tokens and trains as many, i.e. 0.75 * 3.5 + 0.25 * 1 = 2.9. The unit: one token of a GRPO step.
ROLLOUT_SHARE = 0.75


def gpu_cost(point: dict, rollout_share: float = ROLLOUT_SHARE) -> float:
    """The modelled GPU cost of a run up to a curve point, in GRPO-token units."""
    return rollout_share * point["tokens"] + (1.0 - rollout_share) * point["trained_tokens"]


def _trained_axes(runs, bases) -> dict:
    """At equal trained tokens and at equal modelled GPU cost, for runs that counted their trained tokens."""
    if not all("trained_tokens" in p for curve in runs + bases for p in curve):
        return {}
    with_cost = [[{**p, "gpu_cost": gpu_cost(p)} for p in curve] for curve in runs + bases]
    runs, bases = with_cost[:len(runs)], with_cost[len(runs):]
    return {"equal_trained_tokens": _at_equal_cost(runs, bases, "trained_tokens", "trained_tokens"),
            "equal_gpu_cost": _at_equal_cost(runs, bases, "gpu_cost", "gpu_cost")}


def arm_cost(runs: dict[int, dict]) -> dict:
    """What an arm spent per optimizer step, averaged over its runs: generated completions and tokens, trained
    completions, seconds."""
    records = list(runs.values())
    steps = [max(r["steps"], 1) for r in records]

    def mean(key):
        return sum((r.get(key) or 0) / n for r, n in zip(records, steps)) / len(records)

    signal = [x for r in records for x in r.get("signal", []) if x is not None]
    return {"runs": len(records), "cut": sum(bool(r.get("cut")) for r in records),
            "signal_share": sum(signal) / len(signal) if signal else None,
            "mean_steps": sum(steps) / len(steps),
            "generated_per_step": mean("generated_completions"),
            "generated_tokens_per_step": mean("generated_tokens"), "trained_per_step": mean("trained_completions"),
            "seconds_per_step": mean("train_seconds"), **_extra_scores(records)}


def _extra_scores(records: list[dict]) -> dict:
    """The second held-out set's greedy score (--eval_extra_split), before training and at each run's end."""
    if not all("extra_greedy" in r["curve"][0] for r in records):
        return {}
    return {"extra_before": sum(r["curve"][0]["extra_greedy"] for r in records) / len(records),
            "extra_after": sum(r["curve"][-1]["extra_greedy"] for r in records) / len(records)}


def _at(curve, axis, x):
    import numpy as np

    return np.asarray(next(p["items"] for p in curve if p[axis] == x), dtype=float)


def print_report(report: dict) -> None:
    baseline = report["baseline"]
    held = "; ".join(f"{source}, {n} questions" for source, n in report.get("held_out", []))
    print(f"\nHeld-out set: {held or 'unknown'}.")
    print(f"Paired difference to {baseline} in held-out score (points, 95% bootstrap interval over seeds and "
          "questions; an interval containing 0 reads 'no difference measured').")
    print(f"\n| arm | seeds | completions per step (vs {baseline}) | equal generated completions | equal generated "
          "tokens | equal optimizer steps (last evaluation every seed reached) |\n|---|---:|---|---|---|---|")
    for arm, r in report["arms"].items():
        every_seed = [row for row in r["equal_steps"] if row["seeds"] == len(r["seeds"])]  # not only uncut pairs
        last = (every_seed or r["equal_steps"])[-1]
        at, tokens = r["equal_completions"]["completions"], r["equal_tokens"]["tokens"]
        print(f"| {arm} | {len(r['seeds'])} | {r['completions_per_step']:.1f} "
              f"({r['baseline_completions_per_step']:.1f}) | {paired.describe(r['equal_completions'])} at "
              f"{min(at)}-{max(at)} | {paired.describe(r['equal_tokens'])} at {min(tokens)}-{max(tokens)} | "
              f"{paired.describe(last)} at step {last['step']} |")
    modelled = {arm: r for arm, r in report["arms"].items() if "equal_gpu_cost" in r}
    if modelled:
        print(f"\nAt equal trained tokens, and at equal modelled GPU cost (generated tokens x {ROLLOUT_SHARE} + "
              f"trained tokens x {1 - ROLLOUT_SHARE:g}: the rollout {ROLLOUT_SHARE:.0%} of a GRPO step; "
              "docs/compare.md):\n")
        print("| arm | equal trained tokens | equal modelled GPU cost |\n|---|---|---|")
        for arm, r in modelled.items():
            print(f"| {arm} | {paired.describe(r['equal_trained_tokens'])} | {paired.describe(r['equal_gpu_cost'])} |")
    print("\nCost per optimizer step (mean over runs; training seconds exclude evaluation):\n")
    print("| arm | runs (cut) | steps | generated completions | generated tokens | trained completions | seconds | "
          "trained groups with signal |\n|---|---|---:|---:|---:|---:|---:|---:|")
    for arm, c in report.get("cost", {}).items():
        signal = "-" if c.get("signal_share") is None else f"{c['signal_share']:.2f}"
        print(f"| {arm} | {c['runs']} ({c['cut']}) | {c['mean_steps']:.0f} | {c['generated_per_step']:.1f} | "
              f"{c['generated_tokens_per_step']:.0f} | {c['trained_per_step']:.1f} | {c['seconds_per_step']:.2f} | "
              f"{signal} |")
    extras = {arm: c for arm, c in report.get("cost", {}).items() if "extra_before" in c}
    if extras:
        print("\nThe second held-out set (--eval_extra_split), greedy, mean over runs:\n")
        print("| arm | before | at the end |\n|---|---:|---:|")
        for arm, c in extras.items():
            print(f"| {arm} | {c['extra_before']:.3f} | {c['extra_after']:.3f} |")
    for arm, r in report["arms"].items():
        print(f"\n{arm} against {baseline} at equal optimizer steps, along the run:\n")
        print("| step | seeds | difference |\n|---:|---:|---|")
        for row in r["equal_steps"]:
            print(f"| {row['step']} | {row['seeds']} | {paired.describe(row)} |")


def plot(results: dict[str, dict[int, dict]], arms: list[str], path: str) -> None:
    plt = pyplot()
    if plt is None:
        return

    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
    for arm in arms:
        for axis, ax in zip(("step", "samples", "tokens"), axes):
            for i, record in enumerate(results.get(arm, {}).values()):
                curve = record["curve"]
                ax.plot([p[axis] for p in curve], [p["greedy"] for p in curve], color=f"C{arms.index(arm)}",
                        alpha=0.6, label=arm if i == 0 else None)
    axes[0].set_xlabel("optimizer steps")
    axes[1].set_xlabel("generated completions")
    axes[2].set_xlabel("generated tokens")
    axes[0].set_ylabel("held-out score (greedy)")
    axes[0].legend()
    fig.suptitle("trl-ada-compare: one line per run (seed)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------------
# The command.

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trl-ada-compare", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="the shared recipe (a trl_ada.cli.train YAML)")
    parser.add_argument("--arm", nargs="+", action="append", required=True, metavar="NAME [RECIPE] [FIELD=VALUE]",
                        help="an arm: its name, optionally its own recipe, then overrides; the first is the baseline")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="overrides for every arm")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max_steps", type=int, required=True, help="optimizer steps per run (every arm the same)")
    parser.add_argument("--eval_every", type=int, default=5, help="optimizer steps between held-out evaluations")
    parser.add_argument("--eval_examples", type=int, default=64, help="held-out questions at most")
    parser.add_argument("--eval_split", default=None,
                        help="the split to evaluate on (e.g. test): of --eval_dataset if given, else of the recipe's "
                             "dataset (a single local file holds one split: it is refused there)")
    parser.add_argument("--eval_dataset", default=None,
                        help="the held-out set from its own source (a local json/jsonl/parquet/csv file, a folder or a "
                             "Hub id), loaded as the recipe loads its dataset (same dataset_prompt_template)")
    parser.add_argument("--eval_extra_dataset", default=None, help="--eval_extra_split's set from its own source")
    parser.add_argument("--eval_min_examples", type=int, default=20,
                        help="refuse a held-out set smaller than this (its questions are what the intervals are over)")
    parser.add_argument("--eval_extra_split", default=None,
                        help="a second split scored at the same points and reported beside the comparison, not in it "
                             "(e.g. the easy questions a run on hard ones could forget)")
    parser.add_argument("--eval_fraction", type=float, default=0.1,
                        help="without --eval_split: the share of training rows held out (by a hash of the prompt)")
    parser.add_argument("--eval_k", type=int, default=4, help="avg@k samples per question before and after (0: none)")
    parser.add_argument("--eval_seed", type=int, default=1234, help="the sampling noise of every evaluation")
    parser.add_argument("--task_seed", type=int, default=0, help="seed of the built-in tasks' data (not the runs')")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (separate processes)")
    parser.add_argument("--deadline_s", type=float, default=None,
                        help="start no run that would end after this many seconds (estimated from the runs finished "
                             "so far; the first runs always start), and stop the runs still training when they come "
                             "(evaluated where they stopped, kept as cut, checkpointed: a rerun continues them)")
    parser.add_argument("--keep_cut", action="store_true",
                        help="a rerun trains only the missing runs and keeps those a deadline cut (sessions of a fixed "
                             "length add seeds instead of cutting the same runs again); a cut then stops early enough "
                             "for its greedy evaluation to end by the deadline, and writes no checkpoint")
    parser.add_argument("--max_completions", type=int, default=None,
                        help="stop each run at the first step at which it has generated this many completions")
    parser.add_argument("--max_tokens", type=int, default=None,
                        help="stop each run at the first step at which it has generated this many tokens (every arm "
                             "the same budget on the hardware-free cost axis; give a --max_steps no arm reaches)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--output_dir", default="runs/compare")
    parser.add_argument("--report_only", action="store_true", help="recompute the report from results/, train nothing")
    parser.add_argument("--only", nargs=2, metavar=("ARM", "SEED"), help=argparse.SUPPRESS)  # one run (for --jobs)
    parser.add_argument("--stop_at", type=float, default=None, help=argparse.SUPPRESS)  # the deadline, wall clock
    return parser


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    arms = [Arm.parse(tokens) for tokens in args.arm]
    names = [arm.name for arm in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"--arm: names must differ, got {names}")
    args.set_argv = Arm("set", None, args.set).argv()
    torch.set_num_threads(args.threads)
    if args.only is not None:
        run_one(args, next(arm for arm in arms if arm.name == args.only[0]), int(args.only[1]))
        return {}
    if args.deadline_s is not None and args.stop_at is None:
        args.stop_at = time.time() + args.deadline_s
    failed: list[str] = []
    if not args.report_only:
        done = load_results(args.output_dir)
        # seed by seed, so that a cut session leaves whole pairs; a run cut by a deadline continues from its cut,
        # unless --keep_cut (sessions of a fixed length that would rather add seeds)
        pending = [(arm, seed) for seed in args.seeds for arm in arms if seed not in done.get(arm.name, {})
                   or (done[arm.name][seed].get("cut") and not args.keep_cut)]
        print(f"[compare] {len(pending)} runs to train ({len(arms) * len(args.seeds) - len(pending)} already in "
              f"{args.output_dir}/results)", flush=True)
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


class Deadline:
    """Whether another run may start: it must be expected to end before `seconds` (the mean duration of the runs
    finished so far; until one has finished, the first wave of `jobs` runs starts). When cut runs are `continued`,
    a run that will not end in time still makes progress: it starts while `min_left` seconds remain."""

    def __init__(self, seconds: float | None, jobs: int, continued: bool = False, min_left: float = 1200.0):
        self.seconds, self.jobs, self.start = seconds, max(jobs, 1), time.time()
        self.continued, self.min_left = continued, min_left
        self.durations: list[float] = []
        self.started = self.refused = 0

    def may_start(self) -> bool:
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
    """`--jobs` runs at once, each its own process with `--threads` torch threads; returns the runs that failed (the
    others go on; a failed run's result is missing, so a rerun trains it again).

    Each run gets its own MASTER_PORT: a colocated vLLM engine (`use_vllm=True, vllm_mode="colocate"`) sets up a
    one-process torch.distributed group, and accelerate's CPU state fills an unset MASTER_PORT with 29500, so two
    runs starting together otherwise race for that port and one fails (EADDRINUSE)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    running: list[tuple[subprocess.Popen, str, float, str]] = []  # process, label, start, MASTER_PORT
    failed = []
    queue = list(pending)
    while queue or running:
        while queue and len(running) < args.jobs:
            arm, seed = queue.pop(0)
            if not clock.may_start():
                continue
            command = [sys.executable, "-m", "trl_ada.cli.compare", *argv, "--only", arm.name, str(seed)]
            if args.stop_at is not None:
                command += ["--stop_at", repr(args.stop_at)]
            ports = {str(p) for p in free_ports(len(running) + 1)} - {e[3] for e in running}
            port = sorted(ports)[0]  # free now, and no running run's
            running.append((subprocess.Popen(command, env={**env, "MASTER_PORT": port}), f"{arm.name} seed {seed}",
                            time.time(), port))
        time.sleep(1.0)
        for entry in list(running):
            process, label, started, _ = entry
            if process.poll() is not None:
                running.remove(entry)
                if process.returncode != 0:
                    failed.append(label)
                else:  # a run that failed early says nothing of how long runs take
                    clock.finished(time.time() - started)
    return failed


__all__ = ["Arm", "compare", "load_results", "main", "run_one"]


def cli() -> int:
    """The console script: `main` returns the report (for Python callers); a shell wants exit status 0."""
    main()
    return 0


if __name__ == "__main__":
    main()
