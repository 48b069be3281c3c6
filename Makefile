# The two commands a newcomer needs: `make demo` and `make test`. Each installs what is missing first.
BUILD_DIR ?= build
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

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target attn-demo
	./$(BUILD_DIR)/apps/demo/attn-demo $(DEMO_ARGS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# Not one of the two newcomer commands: benchmarks take minutes and want an otherwise idle machine.
bench: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target attn-bench
	./$(BUILD_DIR)/apps/bench/attn-bench $(BENCH_ARGS)

install: build
	cmake --install $(BUILD_DIR) $(if $(PREFIX),--prefix $(PREFIX))

clean:
	rm -rf $(BUILD_DIR)
