"""The configuration reference is generated from the fields themselves, so that it cannot drift:
    python -m tests.packaging.test_docs    # prints docs/knobs.md's field table
"""

import ast
import dataclasses
import os

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
