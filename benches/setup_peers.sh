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
