# remat — the two set-up commands are `make run` and `make test`.
# Both install the Debian packages they need (when run as root) or print
# the exact apt-get command to run.

BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_LINT ?= build-lint
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
# ctest runs this many suites at once (each Criterion suite forks its tests one at a time,
# OpenMP threads wait passively): on 2 cores -j 2 takes the suite from ~310 s to ~175 s.
TEST_JOBS  ?= $(JOBS)

.PHONY: all deps build run test test-isa test-cuda test-fenced test-asan test-clang werror lint format format-check bench fixtures install fuzz clean doc-examples

all: build

deps:
	@sh scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

PREFIX     ?= /usr/local

# Headers, libremat.so.0.MINOR + libremat.a, remat.pc, the CMake package (and the
# remat program) under $(PREFIX): `make install PREFIX=$$HOME/.local`.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# The main job: the remat program on its built-in default.
run: build
	./$(BUILD)/remat

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS)

# The device suites (DEVICE_SUITES: op fixtures and gradchecks, checkpoint, selective,
# planner, autograd, the op suites that opt in), the optimizers on the device (optim_device:
# cuda's list kernels) and the cuda tests with cuda as the test device (tests/support/rt.h, docs/cuda.md). Without a GPU
# they report themselves skipped with the reason. CUDA_DEVICE=cuda:1 picks another GPU.
CUDA_DEVICE ?= cuda
# The suites that put their tensors on the test device (RT_ON_TEST_DEVICE in tests/support/rt.h).
DEVICE_SUITES := fixtures|checkpoint|checkpoint_models|selective|planner|autograd|attention
DEVICE_SUITES := $(DEVICE_SUITES)|ck_semantics|dispatch_nn|double_backward_checkpoint|nesting
DEVICE_SUITES := $(DEVICE_SUITES)|ops_matmul|ops_reduce|split_backward|models|timing|grad_meter
DEVICE_SUITES := $(DEVICE_SUITES)|ops_layer_norm_to|grad_layout|ops_ce_bf16|ops_rms_norm_to
test-cuda: build
	cd $(BUILD) && REMAT_TEST_DEVICE=$(CUDA_DEVICE) ctest --output-on-failure -j 1 \
	  -R '^test_($(DEVICE_SUITES)|checkpoint_rng|optim_device|cuda_.*)$$'

# The suites whose numbers come from GEMMs (oneDNN's kernels, their blocking and summation
# order) or the bf16 paths, again with oneDNN capped as on older CPUs: AVX2 only, and AVX-512
# without bf16 (ONEDNN_MAX_CPU_ISA; remat_cpu_has_bf16 follows it, so the bf16 GEMMs take
# the f32 route those CPUs take). `make test` covers the machine's own ISA (AMX or
# AVX512_BF16 where it has them). The library's own kernels pick their AVX-512/AVX2 clones
# by the CPU itself, whatever the cap (src/backends/cpu/clones.h).
ISA_CAPS   ?= AVX2 AVX512_CORE
ISA_SUITES := test_(ops_matmul|wide_grad|autocast|autocast_fixtures|bf16_attention|bf16_native
ISA_SUITES := $(ISA_SUITES)|attention|backward_memory|lean_saves|fixtures|checkpoint_models
ISA_SUITES := $(ISA_SUITES)|selective|planner|double_backward_fixtures)|autocast_train|autocast_report
test-isa: build
	@for isa in $(ISA_CAPS); do \
	  echo "== ONEDNN_MAX_CPU_ISA=$$isa"; \
	  (cd $(BUILD) && ONEDNN_MAX_CPU_ISA=$$isa ctest --output-on-failure -j $(TEST_JOBS) -R '^($(ISA_SUITES))$$') \
	    || exit 1; \
	done

# The same device suites on "fenced", a CPU device whose memory faults on any host access
# outside its kernels and copies (tests/support/fenced.h): what a GPU would catch of host
# reads and writes of device data, on a machine without one.
test-fenced: build
	cd $(BUILD) && REMAT_TEST_DEVICE=fenced ctest --output-on-failure -j $(TEST_JOBS) \
	  -R '^test_($(DEVICE_SUITES)|fenced_device)$$'

# Reruns the commands of the marked examples in README.md and docs/cli.md and
# rewrites their output (the test doc_examples checks that they still match).
doc-examples: build
	sh scripts/doc_examples.sh $(BUILD)/remat --update README.md docs/cli.md

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer.
test-asan: deps
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DREMAT_SANITIZE=ON -DCMAKE_C_COMPILER=clang $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)
	@# Criterion reports a test as passed before LeakSanitizer runs at the
	@# worker's exit, so the log is also scanned for sanitizer reports.
	@# (-LE statistical: tests whose claim is a training statistic of the Release build: CMakeLists.txt)
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest -V -j $(TEST_JOBS) -LE statistical > sanitizers.log 2>&1; rc=$$?; \
	  grep -E "Synthesis|tests passed|tests failed" sanitizers.log; \
	  if grep -qE "ERROR: (Leak|Address)Sanitizer|runtime error:" sanitizers.log; then \
	    grep -E -A25 "ERROR: (Leak|Address)Sanitizer|runtime error:" sanitizers.log | head -150; \
	    echo "sanitizers reported errors (full log: $(BUILD_ASAN)/sanitizers.log)"; exit 1; fi; \
	  if [ $$rc -ne 0 ]; then tail -80 sanitizers.log; exit $$rc; fi

# -Wall -Wextra -Werror under gcc and clang (build only; WERROR_CCS picks the compilers: CI
# builds its gcc -Werror build as the one `make test` runs, `make build CMAKE_ARGS=-DREMAT_WERROR=ON`,
# then `make werror WERROR_CCS=clang`).
WERROR_CCS ?= gcc clang
werror: deps
	@for cc in $(WERROR_CCS); do \
	  cmake -S . -B build-werror-$$cc -DCMAKE_BUILD_TYPE=Release -DREMAT_WERROR=ON -DCMAKE_C_COMPILER=$$cc >/dev/null && \
	  cmake --build build-werror-$$cc -j $(JOBS) || exit 1; \
	done

# The layout check (.clang-format, every tracked C/CUDA file), then clang-tidy over src/, tools/ and bench/
# (checks in .clang-tidy) with the flags CMake exports for a clang build.
lint:
	@sh scripts/deps.sh lint
	@sh scripts/format.sh --check
	@bash scripts/lint.sh $(BUILD_LINT) $(JOBS)

# .clang-format over every tracked C/CUDA file: `format` rewrites, `format-check` lists what differs.
format:
	@sh scripts/deps.sh format
	@sh scripts/format.sh
format-check:
	@sh scripts/deps.sh format
	@sh scripts/format.sh --check

# libFuzzer on the parsers of untrusted files, the save file's, safetensors' and
# tokenizer.json's with encoding and decoding (clang, -fsanitize=fuzzer,address,undefined),
# FUZZ_SECONDS split evenly between them, each from its committed seeds (copied: libFuzzer
# adds what it finds to its first corpus directory, which stays in the build tree).
# FUZZ_CONFIG is what the fuzzers' own build leaves out. CI fuzzes from the sanitizer build
# instead (`make test-asan CMAKE_ARGS=-DREMAT_FUZZ=ON`, then `make fuzz BUILD_FUZZ=$(BUILD_ASAN)
# FUZZ_CONFIG=`): no build of the library for the fuzzers alone.
BUILD_FUZZ   ?= build-fuzz
FUZZ_CONFIG  ?= -DREMAT_BUILD_TESTS=OFF -DREMAT_BUILD_PROGRAMS=OFF
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := savefile safetensors tokenizer
FUZZ_EACH     = $$(( $(FUZZ_SECONDS) / $(words $(FUZZ_TARGETS)) ))
fuzz: deps
	@cmake -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DREMAT_FUZZ=ON \
	  $(FUZZ_CONFIG) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD_FUZZ) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD_FUZZ)/corpus/$$t && cp tests/fuzz/corpus/$$t/* $(BUILD_FUZZ)/corpus/$$t/ && \
	  echo "== fuzz_$$t, $(FUZZ_EACH) s ==" && \
	  ./$(BUILD_FUZZ)/fuzz_$$t -max_total_time=$(FUZZ_EACH) -timeout=10 \
	    -rss_limit_mb=2048 -print_final_stats=1 $(BUILD_FUZZ)/corpus/$$t || exit 1; \
	done

bench: build
	./$(BUILD)/bench_gemm
	./$(BUILD)/bench_ops

# Regenerates tests/fixtures from PyTorch (needs python3-torch; CI does not).
# Debian's interpreter by default: a python3 earlier on PATH (pyenv, a venv) may lack its torch.
FIXTURE_PYTHON ?= /usr/bin/python3
fixtures:
	$(FIXTURE_PYTHON) scripts/gen_fixtures.py tests/fixtures
	$(FIXTURE_PYTHON) scripts/gen_optim_fixtures.py tests/fixtures/optim
	$(FIXTURE_PYTHON) scripts/gen_autocast_fixtures.py tests/fixtures/autocast/ops.txt
	$(FIXTURE_PYTHON) scripts/gen_double_fixtures.py tests/fixtures/double

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_LINT) $(BUILD_FUZZ) build-werror-gcc build-werror-clang
