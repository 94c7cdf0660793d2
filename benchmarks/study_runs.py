"""The runs of a registered study, apart from its analysis: which arms and seeds a stage registers, where its runs
stand (read without their accuracy), and `trl-ada-compare` run from the clone the study is pinned in.

A study (`compute_study/study.py`, `bench_study/study.py`) holds its own `STAGES` (stage: arms, seeds, output folder)
and builds its own `trl-ada-compare` arguments; these are the parts both share.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess

from trl_ada.cli.records import load_results


def registered(stages: dict, stage: str, arms=None, seeds=None) -> tuple[list[str], list[int], str]:
    """The arms, seeds and output folder of a stage, or of the given arms and seeds of it; anything the stage does
    not register is refused (a study runs only what its plan names)."""
    stage_arms, stage_seeds, stage_dir = stages[stage]
    unknown = sorted(set(arms or []) - set(stage_arms)) + sorted(set(seeds or []) - set(stage_seeds))
    if unknown:
        raise ValueError(f"{unknown}: not registered for stage {stage!r} (arms {stage_arms}, seeds {stage_seeds})")
    return list(arms or stage_arms), list(seeds or stage_seeds), stage_dir


def cpu_hours(record: dict) -> float:
    """A run's CPU time: training and its held-out evaluations, times the threads it ran on."""
    return (record["train_seconds"] + record.get("eval_seconds", 0.0)) / 3600 * record.get("threads", 1)


def status(stages: dict, stage: str, output_dir: str | None = None, cap: float | None = None) -> dict:
    """Where a stage's runs stand, run by run, and the CPU-hours its records hold. It reads no accuracy: a plan takes
    no decision on a partial look, so a study's progress is read without its results."""
    arms, seeds, stage_dir = registered(stages, stage)
    output_dir = output_dir or stage_dir
    results = load_results(output_dir) if os.path.isdir(os.path.join(output_dir, "results")) else {}
    table, hours = {arm: {} for arm in arms}, 0.0
    for arm in arms:
        for seed in seeds:
            r = results.get(arm, {}).get(seed)
            if r is None:
                table[arm][seed] = "to run"
                continue
            hours += cpu_hours(r)
            where = f"step {r['steps']}, {r['generated_tokens']:,} tokens"
            if not r.get("cut"):
                table[arm][seed] = f"done ({where}{', resumed' if r.get('resumed_at') else ''})"
            elif os.path.isdir(os.path.join(output_dir, "runs", f"{arm}-seed{seed}", f"checkpoint-{r['steps']}")):
                table[arm][seed] = f"cut ({where}; a rerun continues it)"
            else:
                table[arm][seed] = f"cut ({where}; its checkpoint is gone: a rerun trains it anew)"
    counts = {
        state: sum(v.startswith(state) for row in table.values() for v in row.values())
        for state in ("done", "cut", "to run")
    }
    for arm, row in table.items():
        waiting = [seed for seed, state in row.items() if state == "to run"]
        print(
            f"{arm}:"
            + "".join(f"\n  seed {seed}: {state}" for seed, state in row.items() if state != "to run")
            + (f"\n  to run: seeds {', '.join(map(str, waiting))}" if waiting else "")
        )
    print(
        f"{stage} in {output_dir}: "
        + ", ".join(f"{n} {state}" for state, n in counts.items())
        + f"; {hours:.1f} CPU-hours in its records"
        + (f" (cap {cap:.0f} for the study)" if cap is not None else "")
    )
    return table


def add_run_actions(sub: argparse._SubParsersAction, stages: dict, run_memory: str) -> None:
    """The `run`, `command` and `status` actions of a study's command line."""
    for action in ("run", "command"):
        p = sub.add_parser(action, help="train the stage's runs" if action == "run" else "print the command")
        p.add_argument("stage", choices=sorted(stages))
        p.add_argument("--arms", nargs="+", default=None)
        p.add_argument("--seeds", nargs="+", type=int, default=None)
        p.add_argument("--jobs", type=int, default=1, help=f"runs at once, one thread each (a run holds {run_memory})")
        p.add_argument("--deadline_s", type=float, default=None, help="cut runs then, with a checkpoint to continue")
        p.add_argument("--output_dir", default=None)
    p = sub.add_parser("status", help="which of a stage's runs are done, cut or still to run (no accuracy)")
    p.add_argument("stage", choices=sorted(stages))
    p.add_argument("--output_dir", default=None, help="the stage's trl-ada-compare --output_dir (default: the plan's)")


def run_or_print(action: str, stage: str, compare_argv: list[str], repo: str):
    """`command`: print the `trl-ada-compare` command. `run`: run it with the package of the study's own clone (`repo`,
    pinned at the plan's commit), from its root, saying which commit runs."""
    if action == "command":
        print(shlex.join(["trl-ada-compare", *compare_argv]))
        return compare_argv
    import trl_ada
    from trl_ada.cli.compare import main as compare_main

    package = os.path.realpath(trl_ada.__file__)
    if os.path.realpath(os.getcwd()) != os.path.realpath(repo) or not package.startswith(os.path.realpath(repo)):
        raise SystemExit(
            f"run the study from the root of the clone that holds it ({repo}), so that its runs use that clone's "
            f"package and paths (now: cwd {os.getcwd()}, trl_ada {package})"
        )
    commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout.strip()
    print(f"[study] {stage}: trl_ada from {os.path.dirname(package)}, commit {commit}{' (modified)' if dirty else ''}")
    return compare_main(compare_argv)
