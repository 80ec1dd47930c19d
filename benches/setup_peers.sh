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
CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF" \
  "$venv/bin/pip" install -q "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION:-0.3.36}" gguf numpy tokenizers
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
PATH="$venv/bin:$PATH" cmake -S "$(echo "$src"/llama_cpp_python-*/vendor/llama.cpp)" -B "$venv/llama.cpp-build" \
  -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >/dev/null
PATH="$venv/bin:$PATH" cmake --build "$venv/llama.cpp-build" --target llama-server -j "$(nproc)" >/dev/null
"$venv/llama.cpp-build/bin/llama-server" --version 2>&1 | head -1
