# make demo : install missing packages, build, run the main scenario: a PyTorch
#             TP/DP GPT trains at TP4, is SIGKILLed mid-save, verified, resumed at
#             TP4 and at TP2xDP2 (examples/torch_gpt/demo.py; table + PNG plot).
# make demo-synthetic : the ~1 GB synthetic save/verify/load table (scripts/demo.sh).
# make test : install missing packages, build, run the whole test suite.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR=ON

.PHONY: all deps configure build demo demo-synthetic test bench clean

all: build

deps:
	bash scripts/install_deps.sh

configure: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	cd examples && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		/usr/bin/python3 -m torch_gpt.demo --build $(abspath $(BUILD))

demo-synthetic: build
	bash scripts/demo.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -j 2

bench: build
	CKPT_BENCH_DEPS=1 bash scripts/install_deps.sh
	bash bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)
