"""The package's layers (docs/layout.md): the pure algorithm imports without torch or TRL, no import runs up a layer,
and the modules import each other without a cycle."""

import ast
import functools
import os
import subprocess
import sys

from tests.helpers import ROOT


PACKAGE = os.path.join(ROOT, "trl_ada")
# bottom to top, as docs/layout.md draws them; a module may import its own layer and the ones below
LAYERS = {
    "trl_ada.core": 1,
    "trl_ada.data": 1,
    "trl_ada.rewards": 1,
    "trl_ada.config": 2,
    "trl_ada.samplers": 2,
    "trl_ada.integration": 2,
    "trl_ada.trainer": 3,
    "trl_ada.examples": 4,
    "trl_ada.cli": 5,
}


@functools.cache
def modules():
    """Every module of the library (the package's face left out), by dotted name."""
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            dotted = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")
            if dotted == "trl_ada":
                continue
            found[dotted] = path
    return found


def layer(dotted: str) -> int:
    return next(value for prefix, value in LAYERS.items() if dotted == prefix or dotted.startswith(prefix + "."))


def imports(path: str, top_level_only: bool = False) -> set[str]:
    """The trl_ada modules a file imports (anywhere in it, or only at its top level); TYPE_CHECKING blocks left out."""
    tree = ast.parse(open(path).read())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    found = set()
    for node in nodes:
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trl_ada"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules()}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("trl_ada")}
    return {name for name in found if name in modules() or name in LAYERS}


def test_the_algorithm_and_the_samplers_import_without_torch_or_trl():
    code = (
        "import sys, trl_ada.core.sampling, trl_ada.core.advantages, trl_ada.core.est, trl_ada.core.budget, "
        "trl_ada.core.dynamic, trl_ada.core.pipelined, trl_ada.core.memory, trl_ada.samplers.reinforce_ada, "
        "trl_ada.samplers.budget, trl_ada.samplers.est, trl_ada.samplers.knapsack; "
        "print(sorted(m for m in ('torch', 'trl', 'transformers', 'datasets', 'accelerate') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_no_import_runs_up_a_layer():
    upward = [
        (source, target)
        for source, path in modules().items()
        for target in imports(path)
        if layer(target) > layer(source)
    ]
    assert not upward, upward


def test_the_modules_import_each_other_without_a_cycle():
    graph = {name: imports(path, top_level_only=True) - {name} for name, path in modules().items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name, path):
        state[name] = 1
        for target in graph.get(name, ()):
            if state.get(target) == 1:
                raise AssertionError(f"import cycle: {' -> '.join(path + [target])}")
            if state.get(target) is None:
                visit(target, path + [target])
        state[name] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])
