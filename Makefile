# Thin wrapper over CMake. `make test` is the project's test command and
# `make demo` its main job; both install what they need first.
BUILD ?= build
JOBS ?= 2

.PHONY: all build setup test test-full test-fast demo clean

all: build

setup:
	scripts/setup.sh

build:
	scripts/setup.sh --build-only
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test:
	scripts/test.sh

# Everything CI's time leaves out as well: the slow cases, the exact-mode
# rerun of every parity suite, every suite under the sanitizers.
test-full:
	SPINDLE_TEST_FULL=1 scripts/test.sh

# Release build and tests only, without the sanitizer pass.
test-fast:
	SPINDLE_SKIP_SANITIZERS=1 scripts/test.sh

demo:
	scripts/demo.sh

clean:
	rm -rf build build-asan
