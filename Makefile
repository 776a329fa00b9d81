# dlock: make test is the one test command (README, .ci/run).
GO      ?= go
PKGS    ?= ./...
TIMEOUT ?= 20m
# RACE_PKGS: the packages make test runs with the race detector (go test
# -race): the portable layer, the in-process driver and the Redis drivers,
# whose waits, renewals and notifications run on many goroutines. Their
# tests wait on servers, so the detector costs little time there.
RACE_PKGS ?= ./lock/ ./driver/memory/ ./internal/redisx/ ./driver/redisnx/ ./driver/rediswatch/
# TEST_SKIP: tests make test leaves to make conformance, each covered in make
# test by a shorter one: the whole suite through PgBouncer in transaction mode
# (100 s; TestPgBouncerTransactionPooling runs every kind of call through it),
# PostgreSQL's suite on a primary with a synchronous standby (60 s; TestFailover
# checks what the standby changes), and memcached's suite on two servers
# (124 s; TestCounterOnLockServer checks what two servers change: each lock and
# its counter on one server).
TEST_SKIP ?= ^(TestConformancePgBouncer|TestConformanceReplica|TestConformanceTwoServers)$$
# TEST_P: packages make test runs at once. Their tests mostly wait on servers'
# TTLs and sessions (the main module's batch used 1.5 CPU-minutes in 5 wall
# minutes at 3), so more than the 2 cores' default shortens the run without
# loading the machine: the longest package (zookeeper, 3 min) starts at once.
TEST_P ?= 4
# TEST_TAGS: the build tags of the main module's tests. demo compiles dlock's
# demo (internal/cli's demo*.go), which the dlock users build leaves out, so
# that its tests run too; the end-to-end tests build a dlock without it as well.
TEST_TAGS ?= demo
# SIDE_NICE: the niceness of make check and of the cmd/dlock and bench
# modules' tests, which run beside the race batch (see test).
SIDE_NICE ?= 10
# ETCD_SPLIT: the processes the driver/etcd module's tests are dealt to
# (scripts/split-test.sh): one after another they took 641 s with the race
# detector, the longest lane of make test, beside the other packages' 464 s.
# ETCD_SPLIT_FIRST: its longest tests (the two conformance suites, the
# failover and lost-reply tests), dealt first so that they go to different
# processes. ETCD_SPLIT_ALONE: tests a busier machine starves (etcd's
# auth-revision churn, a member cut off), run after the others in one
# process, beside the other packages only, as before the split.
ETCD_SPLIT ?= 2
ETCD_SPLIT_FIRST ?= TestConformanceCluster TestConformance TestAudit38LostGrantReply TestFailover \
  TestAudit38FrozenLeader TestAudit38FrozenFollower TestAudit38RenewalRepliesLost TestAudit38LostPlaceReply
ETCD_SPLIT_ALONE ?= TestAudit32AuthChurn TestAudit38MemberCutOff
# PG_SPLIT: the processes driver/postgres's tests are dealt to, beside the
# other packages (466 s in one process, the second stage's longest lane).
# PG_SPLIT_FIRST: dealt first, in turn: the three minute-long tests that
# call t.Parallel land in the first process (positions 1, 3 and 5), where
# they run together, and the conformance suite (a minute) and the next
# longest (15-20 s) in the second.
PG_SPLIT ?= 2
PG_SPLIT_FIRST ?= TestAudit39KeysUsedOnceBounded TestConformance TestAudit39HotKeyDeadTuples TestEnv38DefaultIsolation \
  TestEnv38SweepBoundsKeysUsedOnce TestEnv38RideOutBounded TestAudit43PGSetBehindBusyRow

.PHONY: test check api servers conformance unit images up down test-docker chaos bench nemesis release

## test: install missing servers, vet, and run every test against real servers:
## the main module's, then the harness module's (harness/: chaos's short selection,
## the metrics read through OpenTelemetry's SDK, the packaging check; the nemesis's
## short pass on its own; its container tests run in test-docker), the bench module's (peer libraries on dlock's keys)
## beside the race batch; then the same servers in containers (test-docker: it fails without a Docker engine
## unless DLOCK_SKIP_DOCKER=1, and then says what it skipped).
## Stages run one after another; within a stage, lanes run at once (docs/testing.md):
## 1. the race batch; beside it the harness module's tests but the nemesis (chaos's
##    short selection, 4 minutes of faults on servers of its own), and at nice
##    SIDE_NICE (so that the tests come first for the CPU) make check and the
##    container helper, and the cmd/dlock then bench modules' tests (mostly
##    compiling: the command twice, the peer libraries), and the Docker images
##    (mostly I/O); the batch's last two packages (the Redis drivers, minutes)
##    leave the cores waiting on Redis.
## 2. the other packages, and beside them driver/postgres's tests in PG_SPLIT
##    processes and the driver/etcd module's with the race detector in
##    ETCD_SPLIT processes (scripts/split-test.sh).
## 3. the nemesis's short pass, alone: its timing checks (a call returning 200ms
##    past its context's end) are made on a 2-core machine, and go test would run
##    it beside two other packages' servers;
## 4. test-docker (its images and helper are up to date by then).
test: servers
	@echo "test: $(RACE_PKGS) with the race detector, with installed servers (local provider, or DLOCK_*_ADDR / DLOCK_TEST_BACKEND if set)"
	@echo "test: beside them: the harness module's tests but the nemesis; at nice $(SIDE_NICE): make check and the container helper; the cmd/dlock module (the command, etcd included), then the bench module (the peers themselves on dlock's keys: redsync, redislock); the Docker images; their output follows"
	@mkdir -p bin; rm -f bin/side-test.rc bin/check.rc bin/images.rc bin/harness-test.rc; \
	  ( cd harness && $(GO) test -count=1 -timeout $(TIMEOUT) $$($(GO) list ./... | grep -v -e '/nemesis$$' -e '/containers$$' -e '/cmd/dlock-containers$$'); \
	    echo $$? > ../bin/harness-test.rc) > bin/harness-test.out 2>&1 & \
	  ( nice -n $(SIDE_NICE) sh -c 'make --no-print-directory check && make --no-print-directory bin/dlock-containers'; \
	    echo $$? > bin/check.rc) > bin/check.out 2>&1 & \
	  ( nice -n $(SIDE_NICE) sh -c '(cd cmd/dlock && $(GO) test -count=1 -timeout $(TIMEOUT) ./...); a=$$?; \
	    (cd bench && $(GO) test -count=1 -timeout $(TIMEOUT) ./...); b=$$?; [ $$a = 0 ] && [ $$b = 0 ]'; \
	    echo $$? > bin/side-test.rc) > bin/side-test.out 2>&1 & \
	  ( if [ "$$DLOCK_SKIP_DOCKER" != 1 ] && docker info >/dev/null 2>&1; then bash docker/build-images.sh; \
	    else echo "images: not built here (no Docker engine, or DLOCK_SKIP_DOCKER=1): test-docker says why"; fi; \
	    echo $$? > bin/images.rc) > bin/images.out 2>&1 & \
	  $(GO) test -count=1 -timeout $(TIMEOUT) -p $(TEST_P) -race $(RACE_PKGS); rc=$$?; \
	  wait; echo "test: make check"; cat bin/check.out; \
	  echo "test: cmd/dlock and bench modules"; cat bin/side-test.out; \
	  echo "test: the Docker images"; cat bin/images.out; \
	  echo "test: the harness module (harness/) but the nemesis"; cat bin/harness-test.out; \
	  [ $$rc = 0 ] && [ "$$(cat bin/check.rc 2>/dev/null)" = 0 ] && [ "$$(cat bin/side-test.rc 2>/dev/null)" = 0 ] && \
	  [ "$$(cat bin/images.rc 2>/dev/null)" = 0 ] && [ "$$(cat bin/harness-test.rc 2>/dev/null)" = 0 ]
	@echo "test: the other packages, and beside them driver/postgres in $(PG_SPLIT) processes and the driver/etcd module (a module of its own: etcd's client reaches only its users) with the race detector in $(ETCD_SPLIT) processes; its output follows"
	@mkdir -p bin; rm -f bin/etcd-test.rc bin/pg-test.rc; ( SPLIT_FIRST='$(ETCD_SPLIT_FIRST)' SPLIT_ALONE='$(ETCD_SPLIT_ALONE)' SPLIT_TIMEOUT=$(TIMEOUT) GO='$(GO)' \
	  bash scripts/split-test.sh driver/etcd $(ETCD_SPLIT) -race; \
	  echo $$? > bin/etcd-test.rc) > bin/etcd-test.out 2>&1 & \
	  ( SPLIT_FIRST='$(PG_SPLIT_FIRST)' SPLIT_SKIP='$(TEST_SKIP)' SPLIT_TIMEOUT=$(TIMEOUT) GO='$(GO)' \
	  bash scripts/split-test.sh driver/postgres $(PG_SPLIT) -tags '$(TEST_TAGS)'; \
	  echo $$? > bin/pg-test.rc) > bin/pg-test.out 2>&1 & \
	  $(GO) test -count=1 -timeout $(TIMEOUT) -p $(TEST_P) -tags '$(TEST_TAGS)' -skip '$(TEST_SKIP)' $$($(GO) list $(PKGS) | grep -v -x -e github.com/dlock-go/dlock/driver/postgres $(foreach p,$(RACE_PKGS),-e 'github.com/dlock-go/dlock/$(patsubst ./%/,%,$(p))')); rc=$$?; \
	  wait; echo "test: driver/postgres"; cat bin/pg-test.out; \
	  echo "test: driver/etcd module"; cat bin/etcd-test.out; \
	  [ $$rc = 0 ] && [ "$$(cat bin/pg-test.rc 2>/dev/null)" = 0 ] && [ "$$(cat bin/etcd-test.rc 2>/dev/null)" = 0 ]
	@echo "test: harness/nemesis on its own"
	cd harness && $(GO) test -count=1 -timeout $(TIMEOUT) ./nemesis/
	@$(MAKE) --no-print-directory test-docker

## check: go vet, staticcheck and gofmt, in every module (the main one,
## driver/etcd/, cmd/dlock/, harness/, bench/), no replace directive in a published
## module's go.mod, and that the public API is the one api/dlock.txt records
## (make api). staticcheck comes from the Go module proxy at the version named here.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
# MODULES: every module of the repository (the root go.work uses the first
# three, the published ones; harness/ and bench/ have go.work files of their own).
PUBLISHED = . driver/etcd cmd/dlock
MODULES   = $(PUBLISHED) harness bench
check:
	@for m in $(MODULES); do echo "check: go vet in $$m"; (cd $$m && $(GO) vet ./...) || exit 1; done
	$(GO) vet -tags demo ./internal/cli/
	@for m in $(MODULES); do echo "check: staticcheck in $$m"; (cd $$m && $(STATICCHECK) ./...) || exit 1; done
	$(STATICCHECK) -tags demo ./internal/cli/
	@for m in $(PUBLISHED); do if grep -q '^replace' $$m/go.mod; then \
	  echo "check: $$m/go.mod has a replace directive: go install ...@version refuses it (go.work serves the clone)"; exit 1; fi; done
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi
	$(GO) run ./internal/apilist -check api/dlock.txt

## api: record the public API (packages lock, driver and the drivers, driver/etcd's
## module too) in api/dlock.txt, one line per exported name; make check compares.
api:
	$(GO) run ./internal/apilist > api/dlock.txt.new && mv api/dlock.txt.new api/dlock.txt

## servers: install the backend servers (Debian packages) if missing.
servers:
	@bash scripts/install-servers.sh

## unit: the tests that need no server.
unit:
	$(GO) test -short -count=1 -tags '$(TEST_TAGS)' $(PKGS)

## conformance: every driver's conformance suite on the local provider, then on the
## docker provider (a failure when no Docker engine answers, unless DLOCK_SKIP_DOCKER=1 skips it, saying so), and a table
## of driver x provider x subtest counts. DLOCK_TEST_BACKEND=docker (or local) runs
## that provider only; CONFORMANCE_PROVIDERS="local docker" sets the list.
## Raw go test -json output: conformance-<provider>.out.
CONFORMANCE_PROVIDERS ?= $(or $(DLOCK_TEST_BACKEND),local docker)
# DRIVERS are the driver packages: ./driver/... but the suite itself.
DRIVERS = $(shell $(GO) list ./driver/... | grep -v '/drivertest$$')
# CONFORMANCE_DRIVERS are the packages make conformance runs (all drivers).
# make test's Docker part runs the suite of the driver whose servers are a
# group in containers (the ZooKeeper ensemble, where a container's network
# and pauses change the timing); internal/testsupport/testserver's tests on the docker
# provider start, pause, kill and restart every kind of server there, and
# every driver's suite already ran on the local provider.
CONFORMANCE_DRIVERS ?= $(DRIVERS)
DOCKER_CONFORMANCE_DRIVERS ?= ./driver/zookeeper/
conformance:
	@$(GO) build -o bin/conftable ./internal/testsupport/testserver/conftable
	@status=0; runs=""; \
	for p in $(CONFORMANCE_PROVIDERS); do \
	  case $$p in \
	  local) $(MAKE) --no-print-directory servers || exit 1 ;; \
	  docker) if [ -z "$(DLOCK_TEST_BACKEND)" ] && ! docker info >/dev/null 2>&1; then \
	      if [ "$$DLOCK_SKIP_DOCKER" = 1 ]; then \
	        echo "conformance: docker provider SKIPPED (DLOCK_SKIP_DOCKER=1): no Docker engine answers"; continue; fi; \
	      echo "conformance: FAIL: no Docker engine answers (docker info failed); set DLOCK_SKIP_DOCKER=1 to skip the docker provider and say so"; \
	      status=1; continue; fi; \
	    if [ -z "$$DLOCK_CONTAINERS_HELPER" ]; then $(MAKE) --no-print-directory bin/dlock-containers || exit 1; \
	      export DLOCK_CONTAINERS_HELPER="$(CURDIR)/bin/dlock-containers"; fi ;; \
	  esac; \
	  echo "conformance: $$p provider"; \
	  DLOCK_TEST_BACKEND=$$p $(GO) test -count=1 -timeout $(TIMEOUT) -json -run 'TestConformance' $(CONFORMANCE_DRIVERS) \
	    | bin/conftable -record conformance-$$p.out -provider $$p || status=1; \
	  runs="$$runs $$p=conformance-$$p.out"; \
	done; \
	[ -z "$$runs" ] || bin/conftable $$runs || status=1; \
	exit $$status

## test-docker: build the images (make images) and the container helper (bin/dlock-containers),
## then run the harness's own tests (internal/testsupport/testserver on the docker provider, every kind of
## server; the harness module's container engine and helper) and the conformance suites of
## DOCKER_CONFORMANCE_DRIVERS on the docker provider (make conformance runs them all). Without a Docker engine (docker info fails) it fails, unless DLOCK_SKIP_DOCKER=1,
## and then says what was skipped.
test-docker:
	@if [ "$$DLOCK_SKIP_DOCKER" = 1 ]; then \
	  echo "test-docker: SKIPPED (DLOCK_SKIP_DOCKER=1): not tested: the docker provider (internal/testsupport/testserver on containers), the harness module's ./containers/ and ./cmd/dlock-containers/, and the conformance suites on the docker provider"; \
	  exit 0; \
	fi; \
	if ! docker info >/dev/null 2>&1; then \
	  echo "test-docker: FAIL: no Docker engine answers (docker info failed); the docker provider, the container packages and the conformance suites on containers were not tested."; \
	  echo "test-docker: start Docker, or set DLOCK_SKIP_DOCKER=1 to skip them and say so."; \
	  exit 1; \
	fi; \
	$(MAKE) --no-print-directory images bin/dlock-containers && \
	export DLOCK_CONTAINERS_HELPER="$(CURDIR)/bin/dlock-containers" && \
	echo "test-docker: internal/testsupport/testserver on the docker provider" && \
	DLOCK_TEST_BACKEND=docker $(GO) test -count=1 -timeout $(TIMEOUT) ./internal/testsupport/testserver/ && \
	echo "test-docker: the harness module's container engine and helper" && \
	(cd harness && $(GO) test -count=1 -timeout $(TIMEOUT) ./containers/ ./cmd/dlock-containers/) && \
	DLOCK_TEST_BACKEND=docker CONFORMANCE_DRIVERS="$(DOCKER_CONFORMANCE_DRIVERS)" $(MAKE) --no-print-directory conformance

## bin/dlock-containers: the docker provider's container helper (harness/cmd/dlock-containers).
## Test binaries use the one DLOCK_CONTAINERS_HELPER names (test-docker sets it to this build);
## without it, each builds its own copy into the user cache directory.
.PHONY: bin/dlock-containers
bin/dlock-containers:
	cd harness && $(GO) build -o ../bin/dlock-containers ./cmd/dlock-containers

# Compose: the v2 plugin (docker compose) if the docker CLI has it, else docker-compose.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_PROJECT ?= dlock

## images: build redis:7.0, memcached:1.6, zookeeper:3.8, postgres:15 and etcd:3.4 from this machine's
## Debian packages, offline (docker/README-containers.md); up to date images are kept.
images: servers
	@bash docker/build-images.sh

## up: start every backend on fixed loopback ports (docker-compose.yml) and wait
## until they answer; . docker/compose.env points the tests at them.
up:
	$(COMPOSE) -p $(COMPOSE_PROJECT) up -d
	@bash docker/wait-up.sh
	@echo "backends are up; point the tests and examples at them with: . docker/compose.env"

## down: stop and remove the backends of make up, with their volumes.
down:
	$(COMPOSE) -p $(COMPOSE_PROJECT) down -v --remove-orphans

## demo: install missing servers, build bin/dlock with the demo (-tags demo: the dlock
## users install leaves it out), and run it: workers contending for locks on every
## backend, on local servers it starts.
.PHONY: demo
demo: servers
	$(GO) build -tags demo -o bin/dlock ./cmd/dlock
	./bin/dlock demo -start-servers

## chaos: every fault scenario against every driver and every broken-algorithm
## control (make test runs a short selection), then the table of results,
## also written to chaos-table.txt.
chaos: servers
	cd harness && DLOCK_CHAOS=full DLOCK_CHAOS_TABLE=chaos-table.txt $(GO) test -count=1 -timeout 60m -run 'TestFaults|TestControls' ./chaos/

## nemesis: the seeded, randomized checker of the lock contract (harness/nemesis): each driver
## under load (Lockers in this process and in a child process, many goroutines, a few hot keys)
## and random, overlapping faults for NEMESIS_DURATION (default 60s), then the broken-algorithm
## controls, which it must catch; a summary line per driver. NEMESIS_SEED=S replays a seed,
## NEMESIS_DRIVERS=redisnx,zookeeper selects drivers (ctl-NAME: a control). make test runs 10s each.
NEMESIS_TIMEOUT ?= 60m
nemesis: servers
	cd harness && DLOCK_NEMESIS=full $(GO) test -count=1 -timeout $(NEMESIS_TIMEOUT) -v -run 'TestNemesis|TestTeeth' ./nemesis/

## bench: dlock against peer libraries and the backends' own round trips, on
## servers from the test harness; the report goes to bench/results/.
bench: servers
	@$(GO) build -o bin/serve ./internal/testsupport/testserver/cmd/serve
	bin/serve -kinds redis,memcached,zookeeper,postgres,etcd -- sh -c 'cd bench && BENCH_COMMAND="make bench" $(GO) run . -out results/'

## release: tag the release VERSION (make release VERSION=v0.2.0) of the three published
## modules, in order: the main one (VERSION), driver/etcd (driver/etcd/VERSION, requiring
## it), cmd/dlock (cmd/dlock/VERSION, requiring both), with their go.sum filled from the
## new tags without the network; then go install ...@VERSION must work (scripts/release.sh).
## It refuses a working tree with changes; nothing is pushed: it prints the push command.
release:
	@[ -n "$(VERSION)" ] || { echo "release: give VERSION, as in make release VERSION=v0.2.0"; exit 2; }
	bash scripts/release.sh $(VERSION)
