"""Shared test helpers (a package, imported as `tests.helpers`: pytest puts the repository root on sys.path).

- `data`: deterministic rewards and datasets with known pass rates, the demo's recipe at toy size;
- `tool_policy`: a calculator task and scripted policies that drive TRL's tool loop offline;
- `standin_engine`: a deterministic stand-in for the colocated vLLM engine;
- `multiprocess_worker`, `fsdp_worker`: the scripts the multi-process tests launch (with PYTHONPATH at the root);
- `processes`: what every test process does around its libraries (the collector, a worker's exit).
"""

import importlib.util
import os


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


def load_script(relative_path: str, name: str | None = None):
    """A benchmark script (a file, not a module of the package) loaded by its path under the repository."""
    path = os.path.join(ROOT, relative_path)
    name = name or os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
