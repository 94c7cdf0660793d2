"""Shared test helpers (a package, imported as `tests.helpers`: pytest puts the repository root on sys.path).

- `data`: deterministic rewards and datasets with known pass rates, the demo's recipe at toy size;
- `tool_policy`: a calculator task and scripted policies that drive TRL's tool loop offline;
- `standin_engine`: a deterministic stand-in for the colocated vLLM engine;
- `multiprocess_worker`, `fsdp_worker`: the scripts the multi-process tests launch (with PYTHONPATH at the root);
- `processes`: what every test process does around its libraries (the collector, a worker's exit);
- here: the environment and command lines of launched processes, benchmark scripts loaded by path, and the command
  lines the pages print.
"""

import importlib.util
import os
import subprocess
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository


def launch_env(**extra) -> dict:
    """The environment of a launched test process: one thread, offline, and the repository importable."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "WANDB_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": path,
        **extra,
    }


def torchrun(script, *args) -> list[str]:
    """`script` with `args` on 2 CPU processes under torchrun: plain DDP over gloo."""
    return [sys.executable, *"-m torch.distributed.run --standalone --nproc_per_node 2".split(), script, *args]


def accelerate_launch(config_file, script, *args) -> list[str]:
    """`script` with `args` under `accelerate launch` with `config_file` (engine and process count), on a free port."""
    launch = "-m accelerate.commands.launch --main_process_port 0 --config_file".split()
    return [sys.executable, *launch, config_file, script, *args]


def run_launch(command, timeout=600, **kwargs) -> None:
    """Run a launch to its end; a failed one fails the test with the end of its output."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def load_script(relative_path: str, name: str | None = None):
    """A benchmark script (a file, not a module of the package) loaded by its path under the repository."""
    path = os.path.join(ROOT, relative_path)
    name = name or os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documented_commands(program: str) -> list[tuple[str, list[str]]]:
    """(page, arguments) for every line of a shell block in the README or docs/ that runs `program` (a console
    script such as `trl-ada-compare`, or a module run with `-m`), continuation lines joined, comments dropped; the
    arguments are the words after the program's."""
    import glob
    import shlex

    pages = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
    found = []
    for page in pages:
        language, block = None, []  # the open fence's language (None outside a fence) and its lines
        for line in open(page).read().splitlines():
            if not line.startswith("```"):
                block.append(line)
                continue
            if language is None:
                language, block = line[3:].strip(), []
                continue
            if language in ("bash", "sh", ""):
                for command in "\n".join(block).replace("\\\n", " ").splitlines():
                    if program not in command:
                        continue
                    words = shlex.split(command, comments=True)
                    at = [i for i, w in enumerate(words) if w == program or w.endswith("/" + program)]
                    if at:
                        found.append((os.path.relpath(page, ROOT), words[at[0] + 1 :]))
            language = None
    return found


def sampling_keys(logs: list[dict]) -> list[str]:
    """The `sampling/*` metrics of a run's logs that every rank must log alike (timings differ)."""
    return [k for k in logs[0] if k.startswith("sampling/") and "seconds" not in k]


def assert_ranks_agree(rank0: dict, rank1: dict, resumed: bool) -> None:
    """Two ranks of one launched run took the same sampling decisions with a finite loss, and scored every
    completion of the steps run in this launch once between them (a resumed run's logs also hold its two restored
    steps)."""
    import math

    logs0, logs1 = rank0["logs"], rank1["logs"]
    keys = sampling_keys(logs0)
    assert keys and all(a[k] == b[k] for a, b in zip(logs0, logs1) for k in keys)  # the same decisions
    assert all(math.isfinite(h["loss"]) for h in logs0 + logs1)
    new_steps = logs0[2:] if resumed else logs0
    generated = sum(h["sampling/total_samples"] + h["sampling/padding_samples"] for h in new_steps)
    assert rank0["reward_calls"] + rank1["reward_calls"] == generated > 0
