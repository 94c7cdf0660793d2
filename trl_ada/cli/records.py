"""`trl-ada-compare`'s records: one JSON per (arm, seed) under `<output_dir>/results/`, written atomically, and the
checkpoint a deadline's cut left for a rerun to continue."""

from __future__ import annotations

import glob
import json
import os


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
        raise ValueError(
            f"{arm} seed {seed} was cut at step {record['steps']} of a {record['max_steps']}-step run: "
            f"continue it with --max_steps {record['max_steps']}, or delete {path} to train it anew with "
            f"--max_steps {args.max_steps}"
        )
    # the grid a resumed run goes on with is the one its saved evaluations were taken on (None: the step grid)
    if record.get("eval_every_tokens") != args.eval_every_tokens:
        then = _grid_flag(record.get("eval_every_tokens"))
        raise ValueError(
            f"{arm} seed {seed} was cut at step {record['steps']} of a run evaluated {then}: continue it {then}, or "
            f"delete {path} to train it anew {_grid_flag(args.eval_every_tokens)}"
        )
    return checkpoint, record


def _grid_flag(every_tokens: int | None) -> str:
    return "without --eval_every_tokens" if every_tokens is None else f"with --eval_every_tokens {every_tokens}"


def result_path(output_dir: str, arm: str, seed: int) -> str:
    return os.path.join(output_dir, "results", f"{arm}-seed{seed}.json")


def write_json(path: str, data) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"  # parallel runs may write the same file (the evaluation cache)
    with open(temporary, "w") as f:
        json.dump(data, f)
    os.replace(temporary, path)  # a cut run leaves no half-written result


def load_results(output_dir: str) -> dict[str, dict[int, dict]]:
    results: dict[str, dict[int, dict]] = {}
    for path in sorted(glob.glob(os.path.join(output_dir, "results", "*.json"))):
        with open(path) as f:
            record = json.load(f)
        results.setdefault(record["arm"], {})[record["seed"]] = record
    sizes = {len(r["curve"][0]["items"]) for runs in results.values() for r in runs.values() if r.get("curve")}
    if len(sizes) > 1:  # paired differences over questions need the same questions in every run
        raise ValueError(
            f"{output_dir}/results: the runs there were scored on held-out sets of different sizes "
            f"({sorted(sizes)} questions): one comparison's runs share --eval_split and --eval_examples; "
            "give a comparison with other settings its own --output_dir"
        )
    return results
