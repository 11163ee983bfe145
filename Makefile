# make demo : install missing packages, build, run the main scenario.
# make test : install missing packages, build, run the whole test suite.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR=ON

.PHONY: all deps configure build demo test bench clean

all: build

deps:
	bash scripts/install_deps.sh

configure: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -j 2

bench: build
	CKPT_BENCH_DEPS=1 bash scripts/install_deps.sh
	/usr/bin/python3 bench/run.py $(BUILD)

clean:
	rm -rf $(BUILD)
