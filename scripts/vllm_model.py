"""Convert the embedded SmolLM2-135M GGUF into the Hugging Face layout vLLM loads (float32 safetensors + tokenizer),
once, into ``$DHP_VLLM_MODEL`` (default ``~/.cache/dhp/vllm/smollm2-135m``; never committed). Run by
``make test-vllm`` in its own environment (transformers + gguf, which the normal environment does not need).

transformers reads GGUF files and dequantises them (Q4_1 → float32), so the vLLM judge's weights are the
llama.cpp judge's dequantised weights: the same model, computed in float32 instead of Q4 kernels.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def target() -> Path:
    return Path(os.environ.get("DHP_VLLM_MODEL") or Path.home() / ".cache" / "dhp" / "vllm" / "smollm2-135m")


def main() -> int:
    out = target()
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        print(f"vLLM model ready: {out}")
        return 0
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dhp.backends import smollm2_gguf_path

    src = smollm2_gguf_path()
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
    # the weights are dequantised on load; drop transformers' GGUF marker so the float weights can be saved
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    tmp = out.with_name(out.name + ".part")  # written whole, then renamed: an interrupted run leaves no model
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tok.save_pretrained(tmp)
    model.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"vLLM model written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
