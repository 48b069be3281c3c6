# The two commands a newcomer needs: `make demo` and `make test`. Each installs what is missing first.
# Two LibTorch lanes: TORCH=debian (the default; Debian's LibTorch 1.13 and python3-torch, nothing from PyPI) and
# TORCH=pip (the LibTorch in PyPI's torch wheel, pinned in scripts/torch-pip.requirements, in .venv-torch/ and
# build-torch-pip/; docs/torch-pip-lane.md). `make test TORCH=pip` builds and tests that lane.
TORCH ?= debian
ifeq ($(TORCH),debian)
BUILD_DIR ?= build
else ifeq ($(TORCH),pip)
BUILD_DIR ?= build-torch-pip
# The lane's environment (scripts/torch-pip-env.sh): the wheel's torch.utils.cmake_prefix_path, its Python for
# the reference scripts and Python tests, CUDACXX and TORCH_CUDA_ARCH_LIST. Configured as the README's recipe
# says and with nothing else (no LDFLAGS, no extra prefix), so that every run of the lane tests the recipe.
TORCH_PIP_ENV = eval "$$(bash scripts/torch-pip-env.sh)" &&
else
$(error TORCH=$(TORCH): the lanes are TORCH=debian (the default) and TORCH=pip)
endif
JOBS ?= $(shell nproc)
DEMO_ARGS ?=

BENCH_ARGS ?= --suite quick

# OpenBLAS's kernel set for this CPU, unless the caller chose one: Debian's OpenBLAS can mistake a newer CPU for
# an old one and run 5x slower (scripts/openblas-coretype.sh says when). Tests, demo and bench all inherit it.
ifeq ($(origin OPENBLAS_CORETYPE),undefined)
  OPENBLAS_CORETYPE := $(shell bash scripts/openblas-coretype.sh)
  ifneq ($(OPENBLAS_CORETYPE),)
    export OPENBLAS_CORETYPE
  endif
endif

.PHONY: all deps configure build demo test bench install clean

all: build

deps:
	@bash scripts/install-deps.sh
ifeq ($(TORCH),pip)
	@bash scripts/setup-torch-pip.sh
endif

configure: deps
ifeq ($(TORCH),pip)
	$(TORCH_PIP_ENV) cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_PREFIX_PATH="$$ATTN_TORCH_CMAKE_PREFIX_PATH" -DATTN_PYTHON="$$ATTN_TORCH_PYTHON" \
	  -DATTN_REQUIRE_TRANSFORMERS=ON -DTORCH_CUDA_ARCH_LIST="$$TORCH_CUDA_ARCH_LIST"
else
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release
endif

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target attn-demo
	./$(BUILD_DIR)/apps/demo/attn-demo $(DEMO_ARGS)

test: build
	$(TORCH_PIP_ENV) cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# Not one of the two newcomer commands: benchmarks take minutes and want an otherwise idle machine.
bench: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target attn-bench
	./$(BUILD_DIR)/apps/bench/attn-bench $(BENCH_ARGS)

# The library alone (headers, libattn.so, the CMake package): it builds no test and no app.
install: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target attn
	cmake --install $(BUILD_DIR) $(if $(PREFIX),--prefix $(PREFIX))

clean:
	rm -rf $(BUILD_DIR)
