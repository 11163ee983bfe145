# make demo : install missing packages, build, run the main scenario: a PyTorch
#             TP/DP GPT trains at TP4, is SIGKILLed mid-save, verified, resumed at
#             TP4 and at TP2xDP2 (examples/torch_gpt/demo.py; table + PNG plot).
# make demo-synthetic : the ~1 GB synthetic save/verify/load table (scripts/demo.sh).
# make demo-cluster : the GPT job on 2 nodes x 2 ranks (namespaces on this machine, root:
#             scripts/cluster.py), node 2 killed during a save, restarted on node 1 alone
#             at TP2xDP1 from the last committed iteration (examples/torch_gpt/demo_cluster.py).
# make test : install missing packages, build, run the whole test suite.
# make bench [BENCH_FLAGS=--full] : ckpt against honest baselines (bench/run.py):
#   default ~0.36 GB state, 2 ranks, 3 alternating rounds, page-cache and cold
#   reads, 1 scaling round (~5 min on 2 cores); --full (or CKPT_BENCH_FULL=1): the
#   1.02 GB demo state, 5 rounds, 1-rank rows and host-cached reads too, sizes up
#   to ~4 GB, 1/2/4 ranks (15+ min).
# make install [PREFIX=/usr/local] : build only what is installed (no tests, no
#   benches) and install the command, libraries, headers, CMake package,
#   pkg-config files, the Python package and the HDF5 plugin
#   (cmake/CkptInstall.cmake). `pip install .` builds the command and the
#   Python package alone (pyproject.toml; README "Install").
# make sanitize : unit tests under ASan+UBSan in $(SAN_BUILD) (.ci/run).
# make fuzz [FUZZ_SECONDS=120 FUZZ_SEED=n] : the fuzzer (tests/fuzz) under
#   ASan+UBSan in the same build dir: every corpus input replayed verbatim,
#   then mutations until FUZZ_SECONDS; fails on a crash, hang or RSS > 2 GiB.
BUILD ?= build
JOBS ?= $(shell nproc)
# -g1 (line tables: perf and gdb backtraces keep file:line): measured 2026-12-04,
# a clean build of the tree took 724 s on 2 cores with -g; -g1 compiles e.g.
# cli/cmd_save.cc in 12-14 s instead of 18-27 s (docs/DESIGN.md "CI time").
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR=ON \
	-DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O2 -g1 -DNDEBUG' -DCMAKE_C_FLAGS_RELWITHDEBINFO='-O2 -g1 -DNDEBUG'

PREFIX ?= /usr/local
# Sanitizer build (make sanitize): its own build dir, ccache when present (told
# to cache the unit tests, which use a precompiled header: tests/CMakeLists.txt
# CKPT_UNIT_TEST_PCH; without that sloppiness ccache compiles them every time).
SAN_BUILD ?= build-asan
SANITIZE ?= address,undefined
CCACHE := $(shell command -v ccache 2>/dev/null)
# (a variable: a comma inside $(if ...) would end its argument)
SAN_LAUNCHERS = '-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_SLOPPINESS=pch_defines,time_macros;$(CCACHE)' \
	-DCMAKE_C_COMPILER_LAUNCHER=$(CCACHE)
# -O0 -g1: line numbers in reports; ASan+UBSan compile ~40 % faster than at -O1
# (measured 2026-12-05: checkpoint_test.cc 8-12 s instead of 14-18 s), which
# outweighs the slower unit tests (docs/DESIGN.md "CI time").
SAN_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR=ON -DCKPT_SANITIZE=$(SANITIZE) \
	-DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O0 -g1 -DNDEBUG' -DCMAKE_C_FLAGS_RELWITHDEBINFO='-O0 -g1 -DNDEBUG' \
	$(if $(CCACHE),$(SAN_LAUNCHERS))
SAN_ENV = ASAN_OPTIONS=detect_leaks=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1
# Unit tests that load the instrumented HDF5 plugin into an uninstrumented
# python/h5dump process cannot run under a sanitizer (the codec and format
# tests cover the same filter in-process). The two Ceph radosgw suites run in
# make test only: each starts radosgw (~15 s of Ceph start-up), and under the
# sanitizers the same S3 client and conformance suite run against s3rver
# (s3_conformance_test, s3_storage_test, s3_client_test, s3_tools_test).
SAN_EXCLUDE ?= H5py|s3_radosgw

# The tests' MPI processes take OpenMPI's ob1 messaging layer at once. Left to
# choose, every MPI_Init (a singleton `ckpt save` too) first opens the cm
# layer's PSM/PSM2 transports, finds no such hardware after ~0.2 s and selects
# ob1 anyway. Measured 2026-12-05, quiet: a singleton tiny save 0.55 -> 0.34 s, ctest
# exit_codes 18.6 -> 11.8 s, hostile_manifests 25.3 -> 16.3 s. An OMPI_MCA_pml
# already set is kept. Users' own jobs are left to OpenMPI's choice. In CI's
# CPU-bound middle part it saves nothing measurable (docs/DESIGN.md "CI time").
TEST_ENV = OMPI_MCA_pml=$${OMPI_MCA_pml:-ob1}

FUZZ_SECONDS ?= 120
FUZZ_SEED ?= $(shell date +%s)

.PHONY: all deps configure build demo demo-synthetic demo-cluster test bench clean install sanitize san-configure san-build fuzz

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

demo-cluster: build
	cd examples && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		/usr/bin/python3 -m torch_gpt.demo_cluster --build $(abspath $(BUILD))

# ctest shows a skipped test without its output: say here why the cluster tests will skip.
test: build
	@/usr/bin/python3 scripts/cluster.py check >/dev/null || echo "cluster tests (label cluster) \
	will be SKIPPED: $$(/usr/bin/python3 scripts/cluster.py check)"
	cd $(BUILD) && $(TEST_ENV) ctest --output-on-failure --timeout 600 -j 2

bench: build
	CKPT_BENCH_DEPS=1 bash scripts/install_deps.sh
	/usr/bin/python3 bench/run.py $(BUILD) $(BENCH_FLAGS)

# Unit tests only (label "unit"; no mpirun campaign or integration tests).
san-configure: deps
	cmake -S . -B $(SAN_BUILD) $(SAN_FLAGS)

# The sanitizer build alone (what make sanitize and make fuzz run); .ci/run
# starts it beside make test's ctest, at idle priority.
san-build: san-configure
	cmake --build $(SAN_BUILD) -j $(JOBS) --target ckpt_unit_tests ckpt_fuzz

sanitize: san-configure
	cmake --build $(SAN_BUILD) -j $(JOBS) --target ckpt_unit_tests
	cd $(SAN_BUILD) && $(SAN_ENV) $(TEST_ENV) ctest -L unit -E '$(SAN_EXCLUDE)' --output-on-failure --timeout 900 -j 2

# The seed is printed; rerun a failure with FUZZ_SEED=<that seed>. Crash and
# hang inputs land in $(SAN_BUILD)/fuzz/crashes (check them into the corpus
# once fixed).
fuzz: san-configure
	cmake --build $(SAN_BUILD) -j $(JOBS) --target ckpt_fuzz
	rm -rf $(SAN_BUILD)/fuzz && mkdir -p $(SAN_BUILD)/fuzz/found
	$(SAN_ENV) $(SAN_BUILD)/tests/fuzz/ckpt_fuzz --work $(SAN_BUILD)/fuzz/work --seconds $(FUZZ_SECONDS) \
		--seed $(FUZZ_SEED) --seeds tests/fuzz/corpus --corpus $(SAN_BUILD)/fuzz/found \
		--crashes $(SAN_BUILD)/fuzz/crashes --max-rss-mb 2048 --hang-seconds 20

# Builds only what is installed (target ckpt_products), not the tests and benches.
install: configure
	cmake --build $(BUILD) -j $(JOBS) --target ckpt_products
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD)
