"""The sampler bench's task: chat arithmetic for SmolLM2-135M-Instruct whose pass rates spread over [0, 1] (issue 99).

The hard set (benchmarks/hard_set) kept only questions the base model answers right 1-2 times in 16; the bench study
(issue 100) needs a pool where every pass rate occurs, so easy kinds (1-digit + 1-digit, multiples of ten, ...) sit
next to the hard ones. Each candidate is sampled 16 times with the hard set's sampler and screen loop (imported from
benchmarks/hard_set/hard_set.py: temperature 1.0, top_p 1.0, no top-k, 96 tokens, chat template, last_number_reward),
without its early stop, so every record holds an exact count of right answers of 16.

Splits are disjoint up to commuted operands: a question's key is its operator and operands, sorted for + and x
("7 + 5" and "5 + 7" share a key); the key's hash puts it in test (30%), validation (10%) or train (60%). No two
screened questions share a key.

    # pilot: 8 questions x 8 samples per kind (pilot.json)
    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/sampler_bench/build.py --pilot
    # screen (resumable: appends to screen.jsonl), then write the split files, summary.json and histogram.png
    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/sampler_bench/build.py --deadline_s 3600
    # rewrite the outputs from screen.jsonl without a model
    .venv/bin/python benchmarks/sampler_bench/build.py --write_only
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import re
import signal
import sys
import time


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "hard_set"))

import hard_set  # noqa: E402  (the hard set's screen loop and samplers)

from trl_ada.cli.plotting import save  # noqa: E402
from trl_ada.examples.arithmetic import HARD_ARITHMETIC_KINDS, hard_arithmetic_problem  # noqa: E402


MODEL_DIR = os.path.join(ROOT, "runs", "models", "SmolLM2-135M-Instruct")
SAMPLES = hard_set.SAMPLES  # 16
hard_set.STOP = SAMPLES + 1  # no early stop: every question takes all 16 samples (an exact count, not a censored one)

# Kinds of our own (easy ones), next to the hard set's (trl_ada.examples.arithmetic.HARD_ARITHMETIC_KINDS).
EASY_KINDS = {
    "1-digit +": lambda r: (r.randint(1, 9), "+", r.randint(1, 9)),  # 7 + 5
    "1-digit x": lambda r: (r.randint(2, 9), "x", r.randint(2, 9)),  # 7 x 5
    "1-digit -": lambda r: (lambda a: (a, "-", r.randint(1, a - 1)))(r.randint(2, 9)),  # 7 - 5
    "tens +": lambda r: (10 * r.randint(1, 9), "+", 10 * r.randint(1, 9)),  # 30 + 40
    "2-digit + 10": lambda r: (r.randint(11, 89), "+", 10),  # 47 + 10
    "2-digit x 10": lambda r: (r.randint(11, 99), "x", 10),  # 47 x 10
    "2-digit + 1": lambda r: (r.randint(11, 98), "+", 1),  # 47 + 1
    "1-digit + 2-digit": lambda r: (r.randint(1, 9), "+", r.randint(10, 99)),  # 5 + 47 (also key of 47 + 5)
}
ALL_KINDS = tuple(EASY_KINDS) + HARD_ARITHMETIC_KINDS
# Chosen after the pilots (pilot.json: 8 questions x 8 samples; benchmarks/hard_set/pilot.json for the hard kinds):
# every kind with a measured pass rate above 0 at T=1.0, the easiest first; the 1-digit kinds and the x 10 / + 1 / + 10
# kinds are finite (36-89 keys each) and leave the rotation when used up, the hard ones are endless. Keep this list
# across reruns: the candidate stream depends on it (screened keys are skipped whatever it is).
DEFAULT_KINDS = (
    "1-digit +",  # 0.19 in the pilot
    "1-digit x",  # 0.19
    "1-digit -",  # 0.17
    "2-digit x 10",  # 0.11
    "2-digit + 1",  # 0.09
    "tens +",  # 0.03
    "2-digit + 10",  # 0.03
    "3-term 1-digit +",  # 0.06 (hard set's pilot)
    "2-digit x 1-digit",  # 0.04 (hard set's pilot)
    "2-digit -",  # 0.02 (hard set's pilot)
)
SPLIT_SHARES = (("test", 3), ("validation", 1), ("train", 6))  # tenths of the key hash
# The bench's training pool: a seeded random draw from the train split, so that it and the test split share one
# distribution. Its size follows the budget: a run of 64k generated tokens makes about 1,000 completions (63 tokens
# each on average at the 96-token cap), 250 visits of 4 samples, so 96 questions come back 2-3 times each (the
# compute study's 48 came back 13-23 times and overfit); 96 is 12 steps of 8 prompts. The bench study's pilot
# measured 6-8 visits: GRPO n=4's answers shortened to 21-28 tokens on average, so 64k tokens made 2,300-3,000
# completions.
POOL_SIZE = 96


def problem_of(rng: random.Random, kind: str, suffix: str = "") -> dict:
    if kind in EASY_KINDS:
        a, op, b = EASY_KINDS[kind](rng)
        problem, answer = f"What is {a} {op} {b}?", str({"+": a + b, "-": a - b, "x": a * b}[op])
    else:
        problem, answer = hard_arithmetic_problem(rng, kind)
    return {"problem": problem + suffix, "answer": answer, "kind": kind}


def key_of(problem: str) -> str:
    """'+:5,7' for 'What is 7 + 5?' and 'What is 5 + 7?': commuted operands share a key; '-' keeps the order."""
    terms = re.findall(r"\d+|[+x-]", problem.split("?")[0])  # the question, not a suffix
    numbers, ops = terms[::2], set(terms[1::2])
    if len(ops) != 1:
        raise ValueError(f"one operator per question: {problem!r}")
    op = ops.pop()
    if op in "+x":
        numbers = sorted(numbers, key=int)
    return f"{op}:{','.join(numbers)}"


def split_of(key: str) -> str:
    tenth = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % 10
    for name, share in SPLIT_SHARES:
        if tenth < share:
            return name
        tenth -= share
    raise AssertionError


def candidates(kinds, seed: int, exclude_keys=(), suffix: str = ""):
    """Endless seeded stream of questions, kinds taking turns in `kinds`' order (repeats weight them); a question
    whose key is already screened (or drawn) is skipped; a kind with no new key in 5,000 draws leaves the rotation."""
    rng, seen, order = random.Random(f"sampler_bench/{seed}"), set(exclude_keys), list(kinds)
    while order:
        for kind in list(order):
            for _ in range(5_000):
                q = problem_of(rng, kind, suffix)
                key = key_of(q["problem"])
                if key not in seen:
                    seen.add(key)
                    yield {**q, "key": key, "split": split_of(key)}
                    break
            else:
                order = [k for k in order if k != kind]


def pool_of(train: list[dict], size: int = POOL_SIZE) -> list[dict]:
    """The training pool: `size` questions of the train split in a seeded random order (by key: the same pool
    whatever order the screen wrote them in)."""
    ordered = sorted(train, key=lambda r: hashlib.sha256(f"pool/{r['key']}".encode()).hexdigest())
    return ordered[:size]


def make_generator(args, seed: int):
    if args.sampler == "vllm":
        return hard_set.vllm_generator(args.model, args.max_new_tokens, seed=seed, max_num_seqs=args.batch_size)
    return hard_set.model_generator(args.model, args.max_new_tokens, seed=seed, device=args.device)


# --- Pilot ------------------------------------------------------------------------------------------------------------


def run_pilot(args) -> None:
    generate = make_generator(args, seed=args.seed)
    rows, per_kind = [], {}
    for kind in args.pilot_kinds:
        stream = candidates([kind], seed=1000 + args.seed, suffix=args.suffix)
        rows += [q for q in [next(stream) for _ in range(args.pilot_questions)] for _ in range(args.pilot_samples)]
    start = time.monotonic()
    results = generate(rows)
    seconds = time.monotonic() - start
    for kind in args.pilot_kinds:
        mine = [(row, res) for row, res in zip(rows, results) if row["kind"] == kind]
        rights = collections.Counter()
        for row, res in mine:
            rights[row["problem"]] += res["reward"] == 1.0
        per_kind[kind] = {
            "questions": args.pilot_questions,
            "samples_each": args.pilot_samples,
            "pass_rate": round(sum(rights.values()) / len(mine), 3),
            "right_per_question": dict(rights),
            "cut_share": round(sum(res["cut"] for _, res in mine) / len(mine), 3),
            "mean_tokens": round(sum(res["tokens"] for _, res in mine) / len(mine), 1),
            "example": {"problem": mine[0][0]["problem"], "completion": mine[0][1]["text"]},
        }
        print(f"{kind:20s} pass rate {per_kind[kind]['pass_rate']:.3f} {sorted(rights.values())}", flush=True)
    record = {
        "suffix": args.suffix,
        "sampler": args.sampler,
        "threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None,
        "completions": len(rows),
        "seconds": round(seconds, 1),
        "completions_per_s": round(len(rows) / seconds, 3),
        "per_kind": per_kind,
    }
    with open(os.path.join(args.out_dir, args.pilot_name), "w") as f:
        json.dump(record, f, indent=1)


# --- Outputs: split files, summary.json, histogram.png --------------------------------------------------------------


def write_outputs(results: list[dict], out_dir: str) -> dict:
    by_split = {name: [r for r in results if r["split"] == name] for name, _ in SPLIT_SHARES}
    by_split["pool"] = pool_of(by_split["train"])
    for name, rows in by_split.items():
        with open(os.path.join(out_dir, f"{name}.jsonl"), "w") as f:
            for r in rows:
                out = {k: r[k] for k in ("problem", "answer", "kind", "key")}
                # `prompt` as GRPOTrainer reads it (a user message, as the screen asked it): a recipe loads the file
                chat = [{"role": "user", "content": r["problem"]}]
                f.write(json.dumps({"prompt": chat, **out, "right_of_16": r["right"]}) + "\n")

    def histogram(rows):
        counts = collections.Counter(r["right"] for r in rows)
        return [counts[n] for n in range(SAMPLES + 1)]

    def middle(rows):  # pass rate in [0.125, 0.875]: 2-14 right of 16
        return sum(2 <= r["right"] <= SAMPLES - 2 for r in rows)

    kinds = [k for k in ALL_KINDS if any(r["kind"] == k for r in results)]
    per_kind = {}
    for kind in kinds:
        rows = [r for r in results if r["kind"] == kind]
        per_kind[kind] = {
            "questions": len(rows),
            "pass_rate": round(sum(r["right"] for r in rows) / (SAMPLES * len(rows)), 3),
            "right_of_16_histogram": histogram(rows),
            "middle_2_to_14": middle(rows),
            "cut_share": round(sum(r["cut"] for r in rows) / (SAMPLES * len(rows)), 3),
            "seconds_per_question": round(sum(r["seconds"] for r in rows) / len(rows), 2),
        }
    seconds = sum(r["seconds"] for r in results)
    summary = {
        "rule": f"{SAMPLES} samples per question, temperature 1.0, top_p 1.0, top_k 0, 96 completion tokens, "
        "last_number_reward, SmolLM2-135M-Instruct fp32, chat template; no early stop",
        "splits": "by sha256 of the key (operator + operands, sorted for + and x): test 30%, validation 10%, train 60%",
        "questions": len(results),
        "pool": f"{POOL_SIZE} questions of train, the first by sha256 of 'pool/' + key (a seeded random draw)",
        "per_split": {
            name: {
                "questions": len(rows),
                "middle_2_to_14": middle(rows),
                "pass_rate": round(sum(r["right"] for r in rows) / (SAMPLES * len(rows)), 3) if rows else None,
                "right_of_16_histogram": histogram(rows),
            }
            for name, rows in by_split.items()
        },
        "right_of_16_histogram": histogram(results),
        "generation_seconds": round(seconds, 1),
        "seconds_per_question": round(seconds / len(results), 2) if results else None,
        "samplers": dict(collections.Counter(r.get("sampler") for r in results)),
        "per_kind": per_kind,
    }
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if results:
        plot(summary, os.path.join(out_dir, "histogram.png"))
    return summary


def plot(summary: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    xs, bottom = list(range(SAMPLES + 1)), [0] * (SAMPLES + 1)
    colors = plt.get_cmap("tab20").colors
    for i, (kind, s) in enumerate(summary["per_kind"].items()):
        left.bar(
            xs, s["right_of_16_histogram"], bottom=bottom, color=colors[i % 20], label=f"{kind} ({s['questions']})"
        )
        bottom = [b + h for b, h in zip(bottom, s["right_of_16_histogram"])]
    left.set_xticks(xs)
    left.set_xlabel("right answers of 16 (T=1.0)")
    left.set_ylabel("questions")
    left.set_title("Pass rates of the screened questions, by kind", fontsize=10)
    left.legend(fontsize=7)
    width = 0.2
    for j, (name, s) in enumerate(summary["per_split"].items()):
        right.bar(
            [x + (j - 1.5) * width for x in xs], s["right_of_16_histogram"], width, label=f"{name} ({s['questions']})"
        )
    right.set_xticks(xs)
    right.set_xlabel("right answers of 16 (T=1.0)")
    right.set_title("By split (disjoint up to commuted operands; the pool is drawn from train)", fontsize=10)
    right.legend(fontsize=8)
    save(
        fig,
        path,
        f"Sampler bench task, SmolLM2-135M-Instruct: {summary['questions']} questions screened, "
        f"{summary['seconds_per_question']} s of generation per question (16 samples, 1 thread)",
        fontsize=11,
    )


# --- Command line -----------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=MODEL_DIR)
    parser.add_argument("--out_dir", default=HERE)
    parser.add_argument("--deadline_s", type=float, default=3600.0, help="stop screening after this many seconds")
    parser.add_argument("--max_questions", type=int, default=1200, help="stop once screen.jsonl holds this many")
    parser.add_argument("--kinds", nargs="+", default=list(DEFAULT_KINDS), help="candidate kinds (repeat to weight)")
    parser.add_argument("--sampler", choices=("vllm", "sample_compacting"), default="vllm")
    parser.add_argument("--batch_size", type=int, default=128, help="completions per generation call")
    parser.add_argument("--max_new_tokens", type=int, default=96)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0, help="seed of the candidate stream (keep it across reruns)")
    parser.add_argument("--pilot", action="store_true")
    parser.add_argument("--pilot_questions", type=int, default=8)
    parser.add_argument("--pilot_samples", type=int, default=8)
    parser.add_argument("--pilot_kinds", nargs="+", default=list(ALL_KINDS))
    parser.add_argument("--pilot_name", default="pilot.json", help="the pilot's record file")
    parser.add_argument("--suffix", default="", help="text after the question (a format lever; default none)")
    parser.add_argument("--write_only", action="store_true", help="rewrite the outputs from screen.jsonl")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    if args.pilot:
        return run_pilot(args)
    path = os.path.join(args.out_dir, "screen.jsonl")
    if args.write_only:
        return print(json.dumps(write_outputs(hard_set.read_results(path), args.out_dir)["per_split"]))

    started = time.monotonic()
    done = hard_set.read_results(path)
    stream = candidates(args.kinds, args.seed, exclude_keys={r["key"] for r in done}, suffix=args.suffix)
    budget = [max(0, args.max_questions - len(done))]

    def next_candidate():
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        return next(stream, None)

    generate = make_generator(args, seed=args.seed + len(done))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finished questions are on disk already
    with open(path, "a") as out:

        def on_result(record):
            record = {k: v for k, v in record.items() if k not in ("status", "kept")}
            record["sampler"] = args.sampler
            out.write(json.dumps(record) + "\n")
            out.flush()
            done.append(record)
            if len(done) % 8 == 0:
                print(f"[{time.monotonic() - started:6.0f} s] screened {len(done)}", flush=True)

        hard_set.screen(next_candidate, generate, on_result, args.batch_size, SAMPLES, started + args.deadline_s)
    summary = write_outputs(hard_set.read_results(path), args.out_dir)
    print(json.dumps({k: summary[k] for k in ("questions", "right_of_16_histogram", "seconds_per_question")}))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
