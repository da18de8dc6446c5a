# Included right after llama.cpp's own project() call when llama-cpp-python builds it (CMAKE_ARGS in the Makefile):
# llama-cpp-python forces llama.cpp's "common" utilities on, but only its multimodal library (mtmd, LLAVA_BUILD, off
# here) links them; the Python bindings load libllama and libggml alone. Skipping them halves the compile.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp common utilities (unused without mtmd)" FORCE)
