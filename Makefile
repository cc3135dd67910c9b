# electcore — build, test and run targets. `make help` lists them.
#
# Variables you can override: GO, TEST_TIMEOUT, TEST_FLAGS, FUZZTIME, BENCHTIME,
# SOAK_SEEDS, SOAK_NODES, MUTANTS_FLAGS, BENCH_SCALE_FLAGS, BACKGROUND.

GO           ?= go
WASM         := electcore.wasm
EMBEDDED     := internal/module/electcore.wasm
BIN          := bin/electhost
TEST_TIMEOUT ?= 30m
TEST_FLAGS   ?=
FUZZTIME     ?= 10s
BENCHTIME    ?= 1s
SOAK_SEEDS   ?= 1000000
# Empty: the fault mix draws 3..7 nodes per seed.
SOAK_NODES   ?=
NODE_DIR     := examples/node
MUTANTS_FLAGS ?=
# The mutants and the fuzz targets load both cores and check nothing about
# time: niced, so that the tests beside them that do wait on timers (make
# test's lanes) keep their share.
BACKGROUND   ?= nice -n 10
BENCH_SCALE_FLAGS ?=

# Packages that only build for GOOS=wasip1 (the module itself) are vetted
# with that GOOS; everything else natively.
MODULE       := $(shell $(GO) list -m)
WASM_PKGS    := $(MODULE)/wasm
NATIVE_PKGS   = $(shell $(GO) list ./... | grep -v -x -F $(addprefix -e ,$(WASM_PKGS)))
# The packages whose code runs goroutines of its own (the agent's loop,
# publisher and callbacks; the transports; the state store's writers): make
# test runs their tests once, under the race detector (test-race).
RACE_PKGS     := ./host ./transport/... ./statestore
GO_PKGS        = $(shell $(GO) list ./... | grep -v -x -F $(addprefix -e ,$(WASM_PKGS) $(shell $(GO) list $(RACE_PKGS))))


.PHONY: all help build wasm check-module test test-go test-go-pilot test-pilot test-race test-node vet demo bench bench-scale fuzz soak mutants clean

all: build wasm

help:
	@echo "make build   bin/electhost"
	@echo "make wasm    electcore.wasm at the repo root (wasip1, c-shared) and its built-in copy, internal/module/electcore.wasm"
	@echo "make check-module  fail if the committed built-in module differs from the sources"
	@echo "make test    wasm, go vet (native + wasip1), go test (timeout $(TEST_TIMEOUT); host, transport and statestore under -race), node tests, TEST_JOBS=$(TEST_JOBS) at a time; the Pilot end-to-end tests after the other Go tests (test-pilot)"
	@echo "make test-race  go test -race over host, transport, statestore and electhost (RACE_RUN: which electhost tests; '' for all)"
	@echo "make demo    the guided election demo on an embedded NATS server"
	@echo "make bench   every Go benchmark once (BENCHTIME=$(BENCHTIME))"
	@echo "make bench-scale  N agent processes x G groups over electhost's broker: time to lead, CPU, RSS, messages, failover (BENCH_SCALE_FLAGS=$(BENCH_SCALE_FLAGS))"
	@echo "make fuzz    every Fuzz target for FUZZTIME=$(FUZZTIME)"
	@echo "make soak    a long simulation (SOAK_SEEDS=$(SOAK_SEEDS) seeds per mode: fault mix + failover, the targeted schedule, then (quorum) every seed changing membership)"
	@echo "make mutants mutate the core, one known bug at a time, and show the simulator (and, for membership, the property checker) catches each (core/sim/mutants)"

build: $(BIN)

$(BIN): FORCE
	@mkdir -p bin
	$(GO) build -o $(BIN) ./cmd/electhost

wasm: $(WASM)

# wasm/build: the plain GOOS=wasip1 go build, with msgp's JSON tables made
# lazy and its error paths written without fmt (≈915 KB smaller; see
# wasm/build/main.go). Reproducible, so the copy
# built into every Go program (internal/module, committed) is refreshed here
# and CI fails if it differs from the sources (make check-module). Always
# rebuilt (Go's build cache makes an unchanged build take seconds): a file
# date cannot tell when git put an older module in place.
$(WASM): FORCE
	$(GO) run ./wasm/build -o $(WASM)
	cp $(WASM) $(EMBEDDED)

# The committed module must be what the sources build.
check-module: wasm
	@git ls-files --error-unmatch $(EMBEDDED) >/dev/null 2>&1 && git diff --quiet -- $(EMBEDDED) || { echo "$(EMBEDDED) differs from what core/ and wasm/ build: run make wasm and commit it"; exit 1; }

# Two lanes: test-go in one; vet, test-race and test-node in the other.
# test-go's long tail is electhost's end-to-end tests, which mostly wait
# on election timers, so the race run fits beside it instead of after it.
# Each target's output is printed whole when it ends (--output-sync), so
# two go test runs never interleave. TEST_JOBS=1 runs them one after
# another. CI_EXTRA names more targets for the same lanes: .ci/run adds
# the mutants, the module check and the fuzz targets, each started when a
# lane is free (the second lane reaches them while test-go's end-to-end
# tests still run); set MUTANTS_FLAGS and FUZZTIME as for those targets.
TEST_JOBS ?= 2
CI_EXTRA  ?=
test:
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target test-go-pilot vet test-race test-node $(CI_EXTRA)

# The first lane: test-go, then test-pilot, on the module this make built
# (-o wasm: not rebuilt under the other lane's tests).
test-go-pilot: wasm
	@$(MAKE) --no-print-directory -o wasm test-go
	@$(MAKE) --no-print-directory -o wasm test-pilot

vet: wasm
	$(GO) vet $(NATIVE_PKGS)
	GOOS=wasip1 GOARCH=wasm $(GO) vet $(WASM_PKGS)
	GOOS=wasip1 GOARCH=wasm $(GO) vet -tags electcore_hostdriven $(WASM_PKGS)

# The Go tests load the module just built (internal/testwasm honours it).
# RACE_PKGS' tests run in test-race instead, PILOT_E2E in test-pilot.
test-go: wasm
	ELECTCORE_WASM=$(CURDIR)/$(WASM) $(GO) test -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) -skip '$(PILOT_E2E)' $(GO_PKGS)

# electhost's end-to-end tests over the pilotctl stand-in, after test-go,
# with no other end-to-end test beside them: only the other lane's CPU
# work, niced (CI's mutants and fuzz targets), or its race run. Each message
# there is a pilotctl process plus the modelled daemon's delays, so on a
# starved runner a leader's round of acks takes more than the lease has
# left after a heartbeat, at the default timings these tests are about, and
# a group whose every lease lapses has nothing left to test (RATIONALE:
# "The Pilot end-to-end tests run after the others").
PILOT_E2E ?= ^TestE2EPilot
test-pilot: wasm
	ELECTCORE_WASM=$(CURDIR)/$(WASM) $(GO) test -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) -run '$(PILOT_E2E)' ./cmd/electhost

# The race detector over RACE_PKGS (all their tests) and electhost, in one
# go test so the packages run side by side. Under -race electhost's e2e
# tests also run a -race build of the binary (a race in an agent makes it
# exit 66, which the tests check); test-go has run all of electhost's tests
# already, so here run its in-process and CLI tests and the e2e scenario,
# auth and duplicate-id tests (RACE_RUN also matches every test, fuzz seed
# corpus and example of RACE_PKGS, which have no TestE2E*): the whole e2e
# suite under -race would about double CI's time. RACE_RUN='' runs all.
RACE_RUN  ?= ^(Test[^E]|TestE[^2]|TestE2ENATS$$|TestE2EAuth$$|TestE2EDuplicateID$$|Fuzz|Example)
# demo and sim exercise the core and the in-memory bus, covered above; the
# self-contained binary test runs only demo and sim, with no compilation
# cache (a race-built wazero compiling the module: CPU, no agent); the
# unwritable-cache test checks one warning, then compiles in memory the same
# way (over 4 minutes for two CI runs side by side at load 35); the restore
# storm test needs three wasm agents' 300 groups settled, which the race
# lane's load (20-24) kept from happening within 2 minutes (test-go runs it).
RACE_SKIP ?= ^(TestDemoCommand|TestSimCommand|TestSelfContainedBinary|TestCLIUnwritableDefaultCache|TestRestoreAfterTrapKeepsFollowing)$$
test-race: wasm
	ELECTCORE_WASM=$(CURDIR)/$(WASM) $(GO) test -race -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(if $(RACE_RUN),-run '$(RACE_RUN)' -skip '$(RACE_SKIP)') $(RACE_PKGS) ./cmd/electhost

# The Node example (a non-Go agent on electcore.wasm) and the mixed Go/Node
# swarm; its dependencies come from the committed lockfile.
test-node: wasm
	cd $(NODE_DIR) && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm test

demo: wasm
	$(GO) run ./cmd/electhost demo

bench: wasm
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 30m $(NATIVE_PKGS)

# The scale benchmark (internal/cmd/benchscale; not part of make test): agent
# processes joining many groups over the broker of bin/electhost. Niced: it
# loads the whole machine for a few minutes. Try BENCH_SCALE_FLAGS='-json'
# or '-groups 100 -cores native'.
bench-scale: build
	nice -n 10 $(GO) run ./internal/cmd/benchscale -electhost $(BIN) $(BENCH_SCALE_FLAGS)

# Every Fuzz target of every package, one at a time (a fuzzing run takes
# one target). FUZZTIME is a duration or a count (20000x); with a duration,
# Go 1.26 can end a clean run with a spurious "context deadline exceeded"
# and no crasher written (golang/go#75804): a real failure writes
# testdata/fuzz/<target>/. The targets are found in the test files go list
# names (those this build compiles), not with go test -list, which links
# every package's test binary: about a minute of CI for nothing. Each
# package's instrumented test binary is built once (go test -c -fuzz) and
# run for each of its targets in the package's directory, with go test's
# own corpus cache ($GOCACHE/fuzz/<package>), as go test -fuzz would.
fuzz: wasm
	@set -e; bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; \
	cache=$$($(GO) env GOCACHE)/fuzz; \
	$(GO) list -f '{{.ImportPath}} {{.Dir}}{{range .TestGoFiles}} {{$$.Dir}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$$.Dir}}/{{.}}{{end}}' $(NATIVE_PKGS) | \
	while read -r pkg dir files; do \
		[ -n "$$files" ] || continue; \
		targets=$$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p' $$files); \
		[ -n "$$targets" ] || continue; \
		test=$$bin/$$(echo "$$pkg" | tr / _).test; \
		$(BACKGROUND) $(GO) test -c -fuzz "^$$(echo $$targets | cut -d' ' -f1)\$$" -o "$$test" $$pkg; \
		for f in $$targets; do \
			echo "== $$pkg $$f ($(FUZZTIME))"; \
			(cd "$$dir" && $(BACKGROUND) "$$test" -test.run '^$$' -test.fuzz "^$$f\$$" -test.fuzztime $(FUZZTIME) \
				-test.fuzzcachedir "$$cache/$$pkg" -test.paniconexit0 </dev/null) || { echo "FAIL $$pkg $$f"; exit 1; }; \
		done; \
	done

# The CI runs core/sim.CISeeds (20,000) seeds of each suite; the soak picks
# up where it stops.
soak: build
	$(BIN) sim --mode quorum --first-seed 20001 --seeds $(SOAK_SEEDS) $(if $(SOAK_NODES),--nodes $(SOAK_NODES))
	$(BIN) sim --mode bully --first-seed 20001 --seeds $(SOAK_SEEDS) $(if $(SOAK_NODES),--nodes $(SOAK_NODES))
	$(BIN) sim --mode quorum --scenario faults --targeted --first-seed 20001 --seeds $(SOAK_SEEDS) $(if $(SOAK_NODES),--nodes $(SOAK_NODES))
	$(BIN) sim --mode quorum --scenario faults --membership --first-seed 20001 --seeds $(SOAK_SEEDS) $(if $(SOAK_NODES),--nodes $(SOAK_NODES))
	$(BIN) sim --mode bully --scenario faults --targeted --first-seed 20001 --seeds $(SOAK_SEEDS) $(if $(SOAK_NODES),--nodes $(SOAK_NODES))

# Each mutation of the core (core/sim/mutants/main.go) must be caught by the
# simulator within the CI's seed budget; the unmutated core must pass it.
# (After the module only so that, in make test's lanes with CI_EXTRA, the
# second lane runs vet and the race run first.)
mutants: | wasm
	$(BACKGROUND) $(GO) run ./core/sim/mutants $(MUTANTS_FLAGS)

clean:
	rm -rf bin $(WASM)

FORCE:
