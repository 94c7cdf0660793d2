"""The held-out set of `trl-ada-compare` and its scoring: each question's score is the recipe's weighted reward of
a greedy answer (or of k samples at temperature 1), under fixed sampling noise, cached by the model's weights."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import time
import zlib

import torch
import transformers

from trl_ada.cli.records import write_json


def held_out_split(args, script_args, train):
    """(training rows, held-out rows, where the held-out rows come from): see the module docstring for the order of
    the choices. Fewer than `--eval_min_examples` held-out questions is an error: every interval of the comparison
    is over these questions, and a handful of them cannot tell two samplers apart."""
    from trl_ada.cli.train import load_train_dataset, with_dataset

    if args.eval_dataset is not None:
        source = f"{args.eval_dataset}" + (f" (split {args.eval_split})" if args.eval_split else "")
        eval_args = with_dataset(
            script_args,
            dataset_name=args.eval_dataset,
            dataset_split=args.eval_split or "train",
            dataset_num_examples=None,
        )
        held = load_train_dataset(eval_args, args.task_seed)
    elif args.eval_split is not None:
        source = f"{script_args.dataset_name} split {args.eval_split}"
        eval_args = with_dataset(script_args, dataset_split=args.eval_split)
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
            "--eval_fraction), or lower --eval_min_examples knowingly."
        )
    return train, held, source


def _function_identity(func) -> list[str]:
    """A reward function's module, name and source: a fixed or another function of the same name is another key."""
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):
        source = repr(func)
    return [
        getattr(func, "__module__", ""),
        getattr(func, "__qualname__", repr(func)),
        hashlib.sha256(source.encode()).hexdigest(),
    ]


def weights_digest(model) -> str:
    """A digest of every weight's bytes: two models with the same digest answer every prompt alike."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def generate_in_batches(model, tokenizer, prompts, k, max_new_tokens, temperature, batch_size, report=None):
    """k answers per prompt (texts, token ids), generated exactly as `_generate_transformers` generates them with the
    same `batch_size` (the same batches in the same order, so the same answers and the same sampling noise), calling
    `report(answers done, answers in all)` after each batch: an evaluation shows it is moving."""
    from trl_ada.cli.evaluate import _generate_transformers

    rows = [p for p in prompts for _ in range(k)]
    texts, ids = [], []
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        batch_texts, batch_ids = _generate_transformers(
            model, tokenizer, batch, 1, max_new_tokens, temperature, 1.0, len(batch)
        )
        texts += batch_texts
        ids += batch_ids
        if report is not None:
            report(len(texts), len(rows))
    return texts, ids


def batch_progress(prefix: str, started: float):
    """A `report` for `generate_in_batches`: one flushed line per batch, the answers done and the seconds since
    `started`."""

    def report(done: int, total: int) -> None:
        print(f"{prefix}: {done}/{total} answers ({time.time() - started:.0f} s)", flush=True)

    return report


def colocated_generate(trainer):
    """Held-out answers from the run's own colocated vLLM engine, or None where the run has none (transformers then
    answers, `generate_in_batches`). The engine holds the weights of the step's start: they are pushed first where a
    step changed them since (through the trainer's own push, so the next step's generation need not push again).
    On a CPU this answers a held-out set several times faster than transformers' generate, which would otherwise
    cost a run more than its training."""
    generation = getattr(trainer, "vllm_generation", None)
    if not getattr(trainer, "use_vllm", False) or generation is None or generation.mode != "colocate":
        return None
    from vllm import SamplingParams

    from trl_ada.integration.vllm_backend import awake_for_rounds

    def generate(prompts, k, max_new_tokens, temperature, seed):
        sync = trainer.state.global_step != trainer._last_loaded_step
        trainer._last_loaded_step = trainer.state.global_step
        params = SamplingParams(n=k, temperature=temperature, top_p=1.0, max_tokens=max_new_tokens, seed=seed)
        with awake_for_rounds(generation, sync=sync):
            outputs = generation.llm.chat(prompts, params, use_tqdm=False)
        answers = [answer for output in outputs for answer in output.outputs]
        return [a.text for a in answers], [list(a.token_ids) for a in answers]

    return generate


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

    def __init__(
        self, tokenizer, dataset, reward_funcs, reward_weights, max_new_tokens, seed, cache_dir=None, batch_size=64
    ):
        self.tokenizer, self.dataset, self.reward_funcs = tokenizer, dataset, reward_funcs
        self.weights = reward_weights or [1.0] * len(reward_funcs)
        self.max_new_tokens, self.seed, self.seconds = max_new_tokens, seed, 0.0
        self.cache_dir = cache_dir
        # Answers per generate call: the batches, and so the sampled answers, of every score in the cache
        self.batch_size = batch_size
        # `generate(prompts, k, max_new_tokens, temperature, seed)` in place of transformers (`colocated_generate`)
        self.engine = None

    def __call__(
        self, model, k: int = 1, temperature: float = 0.0, reuse: bool = False, label: str | None = None
    ) -> list[float]:
        """`label`: a line per batch of answers, prefixed with it (a long evaluation is not silent); None: quiet."""
        if not reuse or self.cache_dir is None:
            return self._score(model, k, temperature, label)
        from trl_ada.cli.evaluate import SAMPLING

        device = str(model.device)
        if model.device.type == "cuda":  # an H100 and an H200 run other kernels: greedy answers may differ
            device += " " + torch.cuda.get_device_name(model.device)
        key = hashlib.sha256(
            json.dumps(
                [
                    weights_digest(model),
                    model.config.to_json_string(),
                    model.generation_config.to_json_string(),
                    device,
                    self.tokenizer.chat_template,
                    self.dataset.to_list(),
                    [_function_identity(f) for f in self.reward_funcs],
                    self.weights,
                    self.max_new_tokens,
                    self.seed,
                    k,
                    temperature,
                    SAMPLING,
                    torch.__version__,
                    transformers.__version__,
                    # other batches draw other sampling noise; the default adds nothing, so cached scores stay found
                    *([self.batch_size] if self.batch_size != 64 else []),
                    *(["vllm"] if self.engine is not None else []),  # another engine's kernels: other answers
                ],
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()
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
            items = self._score(model, k, temperature, label)
            write_json(path, items)
            return items

    def _score(self, model, k: int, temperature: float, label: str | None = None) -> list[float]:
        from trl_ada.cli.evaluate import evaluation_noise, reward_samples

        start = time.time()
        prompts = list(self.dataset["prompt"])
        report = None
        if label is not None:
            kind = "greedy" if temperature == 0 else f"sampled (k={k})"
            report = batch_progress(f"[compare] {label}: held-out {kind}", start)
        if self.engine is not None:
            texts, ids = self.engine(prompts, k, self.max_new_tokens, temperature, self.seed)
            if report is not None:
                report(len(texts), len(texts))
        else:
            with evaluation_noise(model, self.seed):
                texts, ids = generate_in_batches(
                    model, self.tokenizer, prompts, k, self.max_new_tokens, temperature, self.batch_size, report
                )
        # No trainer_state of the run: a fresh one (step 0) at every evaluation, so that a reward that reads the step
        # scores every checkpoint alike (and the cache key holds no step).
        total = reward_samples(self.reward_funcs, self.weights, self.dataset, texts, k, completion_ids=ids)
        self.seconds += time.time() - start
        return [sum(total[i * k : (i + 1) * k]) / k for i in range(len(prompts))]
