"""The two loops a contributor waits on: CI from a fresh clone, and the main job (`make demo`) after its installs.

    python benchmarks/loops/loops.py ci                      # bash .ci/run in a fresh clone of HEAD (30-40 min); records it
    python benchmarks/loops/loops.py ci --from_log ci.log    # record a .ci/run log already written (its [ci] lines)
    python benchmarks/loops/loops.py demo                    # make install real-model, then make demo, timed apart
    python benchmarks/loops/loops.py report                  # the table and the plot of every record so far

Each measurement appends a record (date, commit, machine, seconds per part) to `benchmarks/loops/loops.json`, so a change
that slows either loop shows against the earlier records; `report` prints them and draws `benchmarks/loops/loops.png`.
The budgets (issue 42): CI within 35 minutes, the demo within 10 minutes after its installs, both on the 2-core dev
machine with nothing else running. A record says whether something else was running (`--busy`): compare only quiet
records. Never run by CI (it would time itself).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository
RECORDS = os.path.join(HERE, "loops.json")
BUDGETS = {"ci": 35 * 60, "demo": 10 * 60}
CI_LINE = re.compile(r"^\[ci\] (\w+): (\d+) s(?:; all: (\d+) s)?", re.M)


def parse_ci_log(text: str) -> dict[str, int]:
    """Seconds per set from `.ci/run`'s `[ci] lock: N s`, `[ci] newest: N s`, `[ci] oldest: N s; all: N s` lines."""
    parts: dict[str, int] = {}
    for name, seconds, total in CI_LINE.findall(text):
        parts[name] = int(seconds)
        if total:
            parts["all"] = int(total)
    if "all" not in parts:
        raise ValueError("no complete .ci/run log: its last line '[ci] oldest: N s; all: N s' is missing")
    return parts


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip()


def record(kind: str, parts: dict, busy: bool, note: str = "") -> dict:
    entry = {
        "kind": kind,
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "commit": _commit(),
        "cores": os.cpu_count(),
        "busy": busy,
        "seconds": parts,
        "note": note,
    }
    records = load()
    records.append(entry)
    with open(RECORDS, "w") as f:
        json.dump(records, f, indent=1)
    return entry


def load() -> list[dict]:
    if not os.path.exists(RECORDS):
        return []
    with open(RECORDS) as f:
        return json.load(f)


def fresh_clone() -> str:
    folder = tempfile.mkdtemp(prefix="trl-ada-loops-")
    subprocess.run(["git", "clone", "--quiet", ROOT, folder], check=True)
    return folder


def run_timed(command: list[str], cwd: str, log: str) -> int:
    start = time.time()
    with open(log, "w") as f:
        done = subprocess.run(command, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}); see {log}")
    return round(time.time() - start)


def measure_ci(args) -> dict:
    if args.from_log:
        with open(args.from_log) as f:
            return parse_ci_log(f.read())
    clone = fresh_clone()
    log = os.path.join(clone, "ci.log")
    run_timed(["bash", ".ci/run"], clone, log)
    with open(log) as f:
        return parse_ci_log(f.read())


def measure_demo(args) -> dict:
    clone = fresh_clone()
    install = run_timed(["make", "install", "real-model"], clone, os.path.join(clone, "install.log"))
    demo = run_timed(["make", "demo", f"DEMO_THREADS={args.threads}"], clone, os.path.join(clone, "demo.log"))
    with open(os.path.join(clone, "runs", "demo", "demo_summary.json")) as f:
        summary = json.load(f)
    print(open(os.path.join(clone, "demo.log")).read()[-3000:])
    return {"install": install, "all": demo, "demo_reported": round(summary["wall_seconds"])}


def report(records: list[dict], plot_path: str) -> None:
    print("| loop | date | commit | busy | seconds | minutes | budget |\n|---|---|---|---|---|---:|---|")
    for r in records:
        parts = ", ".join(f"{k} {v}" for k, v in r["seconds"].items() if k != "all")
        total = r["seconds"]["all"]
        verdict = "within" if total <= BUDGETS[r["kind"]] else "OVER"
        print(
            f"| {r['kind']} | {r['date']} | {r['commit']} | {'yes' if r['busy'] else 'no'} | {parts} | "
            f"{total / 60:.1f} | {verdict} ({BUDGETS[r['kind']] // 60} min) |"
        )
    if not records:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, kind in zip(axes, ("ci", "demo")):
        mine = [r for r in records if r["kind"] == kind]
        ax.bar(
            range(len(mine)),
            [r["seconds"]["all"] / 60 for r in mine],
            color=["#bbbbbb" if r["busy"] else "#2c7bb6" for r in mine],
        )
        ax.axhline(BUDGETS[kind] / 60, color="#d7191c", linestyle="--", label="budget")
        ax.set_xticks(range(len(mine)), [f"{r['date'][5:10]}\n{r['commit']}" for r in mine], fontsize=7)
        ax.set_ylabel("minutes")
        ax.set_title({"ci": "bash .ci/run, fresh clone", "demo": "make demo, after installs"}[kind])
        ax.legend()
    fig.suptitle("The two loops (grey: something else was running)")
    fig.tight_layout()
    fig.savefig(plot_path)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("ci", "demo", "report"))
    parser.add_argument("--from_log", default=None, help="ci: record this .ci/run log instead of running it")
    parser.add_argument("--threads", type=int, default=2, help="demo: DEMO_THREADS (2 on the 2-core machine)")
    parser.add_argument("--busy", action="store_true", help="something else shared the machine during the run")
    parser.add_argument("--note", default="")
    parser.add_argument("--plot", default=os.path.join(HERE, "loops.png"))
    args = parser.parse_args(argv)
    if args.what != "report":
        parts = measure_ci(args) if args.what == "ci" else measure_demo(args)
        entry = record(args.what, parts, args.busy, args.note)
        print(f"[loops] recorded {entry}")
    report(load(), args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
