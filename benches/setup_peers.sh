#!/usr/bin/env bash
# Build the peer implementations that benches/ and tools/ compare against, in their
# own virtualenv (benches/.peers), so they never leak into the test environment.
# llama-cpp-python compiles llama.cpp from source here (native CPU flags, as a user
# who pip-installs it gets): expect 10-20 minutes on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.peers"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
# On a CPU with AMX, llama.cpp 0.3.36's native build (`AMX_INT8 = 1`) segfaults in
# ggml_backend_amx_mul_mat on the first batch of more than one token (seen on a 2-core
# Xeon VM that exposes amx_tile / amx_int8, for Gemma 3 270M and both MoE bench files;
# single-token decode ran). The peer is then built native minus AMX (GCC's explicit
# -mno-amx-* win over -march=native), keeping AVX-512 / VNNI and the CPU_REPACK layouts.
# PEER_AMX=1 keeps AMX.
native_flags=""
if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && [ "${PEER_AMX:-0}" != 1 ]; then
  native_flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  echo "host has AMX: building llama.cpp without it (PEER_AMX=1 keeps it; see the comment above)"
fi
CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DCMAKE_C_FLAGS='$native_flags' -DCMAKE_CXX_FLAGS='$native_flags'" \
  "$venv/bin/pip" install -q --no-cache-dir "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION:-0.3.36}" gguf numpy tokenizers
"$venv/bin/python" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__)"

# llama-cpp-python's OpenAI server (python -m llama_cpp.server): its `server` extra's
# dependencies (the wheel above is kept: the version is already satisfied).
"$venv/bin/pip" install -q "llama-cpp-python[server]==${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"

# llama.cpp's own llama-server, built from the llama.cpp sources vendored in the same
# llama-cpp-python sdist (the same llama.cpp commit, native CPU flags), for benches/server.py.
# Another 10-15 minutes on 2 cores.
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
"$venv/bin/pip" install -q cmake ninja scikit-build-core
# No build isolation: pip only reads the sdist's metadata (with the scikit-build-core just installed).
"$venv/bin/pip" download -q --no-deps --no-binary :all: --no-build-isolation \
  "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION:-0.3.36}" -d "$src"
tar xzf "$src"/llama_cpp_python-*.tar.gz -C "$src"
# The sources unpack into a new temporary directory on every run, so an earlier run's build
# directory (its CMake cache names the old one) is never reusable: start it afresh.
rm -rf "$venv/llama.cpp-build"
PATH="$venv/bin:$PATH" cmake -S "$(echo "$src"/llama_cpp_python-*/vendor/llama.cpp)" -B "$venv/llama.cpp-build" \
  -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DCMAKE_C_FLAGS="$native_flags" -DCMAKE_CXX_FLAGS="$native_flags" >/dev/null
PATH="$venv/bin:$PATH" cmake --build "$venv/llama.cpp-build" --target llama-server -j "$(nproc)" >/dev/null
"$venv/llama.cpp-build/bin/llama-server" --version 2>&1 | head -1
