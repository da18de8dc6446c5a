# Included right after llama.cpp's own project() call when llama-cpp-python builds it (CMAKE_ARGS in the Makefile).
#
# llama-cpp-python forces llama.cpp's "common" utilities on, but only its multimodal library (mtmd, LLAVA_BUILD, off
# here) links them; the Python bindings load libllama and libggml alone. Skipping them halves the compile.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp common utilities (unused without mtmd)" FORCE)

# libllama (model loading, graph construction, KV cache, tokenizer, sampler) is two thirds of what is left and gains
# nothing from -O3: the logits are computed in ggml's kernels, which keep upstream's -O3. libllama's objects are built
# for baseline x86-64 (no -mfma) without -ffast-math, so the optimisation level cannot change a floating-point result;
# -O1 with the standard headers precompiled takes a fifth less CPU for the whole build, the logits bit for bit equal
# (benchmarks/llama_build.py; docs/benchmarks.md). Deferred: the target exists only once src/ is processed.
cmake_language(DEFER CALL set_property TARGET llama APPEND PROPERTY COMPILE_OPTIONS -O1)
cmake_language(DEFER CALL target_precompile_headers llama PRIVATE
    <algorithm> <array> <cmath> <cstring> <functional> <map> <memory> <regex> <set> <sstream> <stdexcept> <string>
    <unordered_map> <unordered_set> <vector>)
