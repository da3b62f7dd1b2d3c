# pgsweep — two commands for a newcomer: `make demo` and `make test`.
#
# DATABASE_URL: the database to use. When it is empty, targets start the
# throwaway cluster under .pgsweep/ (`make db`) and use that.
SHELL := /bin/bash
GO ?= go
DATABASE_URL ?=

# The repository's Go modules (docs/development.md, "Modules"): the client at
# the root, then one module per thing an application or an operator imports or
# runs. go.work uses them all; `./...` stops at a nested module's go.mod, so
# every module is named here, and modules-check fails when a go.mod is missing
# from this list or from go.work, or is not tidy. internal/citustest is a
# module too (make test-citus).
MODULES := runner relay relay/nats relay/amqp cmd/pgsweep internal/bench internal/securitytest internal/uitest internal/schedtest internal/tracingtest
GO_PKGS := ./... $(addprefix ./,$(addsuffix /...,$(MODULES)))
# -tags bench: cmd/pgsweep's tests cover `pgsweep bench` (the production build leaves it out).
GO_TAGS := bench

db_url = $(if $(DATABASE_URL),$(DATABASE_URL),$$(scripts/db.sh dsn 2>/dev/null || scripts/db.sh start))

.PHONY: db db-stop brokers brokers-stop migrate demo test vet fmt-check modules-check pgtap isolation gotest build build-bench

## db: install what is missing, start the throwaway cluster, print its DSN
db:
	@scripts/db.sh start

## db-stop: stop the throwaway cluster
db-stop:
	@scripts/db.sh stop

## brokers: install what is missing, start NATS (JetStream) and RabbitMQ on free local ports, print their URLs
brokers:
	@scripts/brokers.sh start

## brokers-stop: stop the brokers `make brokers` started
brokers-stop:
	@scripts/brokers.sh stop

# NATS_URL and AMQP_URL for the relay's tests: the caller's, or those of the
# brokers scripts/brokers.sh runs (started when they are not running).
brokers_env = if [ -z "$$NATS_URL" ] || [ -z "$$AMQP_URL" ]; then \
	scripts/brokers.sh start >/dev/null || { echo "make: the relay's tests need the brokers (scripts/brokers.sh start failed)"; exit 1; }; \
	eval "$$(scripts/brokers.sh env | sed 's/^/export /')"; fi

## build: the production binary bin/pgsweep (no benchmarks, no research baselines)
build:
	$(GO) build -o bin/pgsweep ./cmd/pgsweep

## build-bench: bin/pgsweep-bench, the CLI plus `pgsweep bench` and its baselines (docs/benchmarks.md)
build-bench:
	$(GO) build -tags bench -o bin/pgsweep-bench ./cmd/pgsweep

## migrate: install pgsweep into DATABASE_URL (or the throwaway cluster)
migrate:
	@url=$(db_url); $(GO) run ./cmd/pgsweep migrate --database-url "$$url"

## demo: pgsweep at work on DATABASE_URL (or the throwaway cluster)
demo:
	@url=$(db_url); $(GO) run ./cmd/pgsweep demo --database-url "$$url"

## test: vet, gofmt, the modules' go.mod files, the pgTAP suite, the isolation specs and the Go tests of every module (with -race; the relay's against the brokers)
test: vet fmt-check modules-check pgtap isolation gotest

vet:
	$(GO) vet -tags $(GO_TAGS) $(GO_PKGS)
	$(GO) vet ./cmd/pgsweep

## modules-check: every go.mod is in MODULES and go.work, and each module is tidy on its own (GOWORK=off)
modules-check:
	@found=$$(git ls-files --cached --others --exclude-standard '*go.mod' 2>/dev/null | sed 's#/\{0,1\}go.mod$$##; s#^$$#.#' | sort); \
	listed=$$(printf '%s\n' . $(MODULES) internal/citustest | sort); \
	used=$$(GOWORK= $(GO) work edit -json | sed -n 's/.*"DiskPath": "\.\/\{0,1\}\(.*\)".*/\1/p' | sed 's#^$$#.#' | sort); \
	if [ "$$found" != "$$listed" ] || [ "$$found" != "$$used" ]; then \
		echo "modules-check: go.mod files, Makefile MODULES and go.work differ:"; \
		echo " go.mod: "$$found; echo " MODULES: "$$listed; echo " go.work: "$$used; exit 1; fi; \
	for m in $$found; do \
		(cd $$m && GOWORK=off $(GO) mod tidy -diff >/dev/null) || { echo "modules-check: $$m: go.mod/go.sum not tidy (cd $$m && GOWORK=off go mod tidy)"; exit 1; }; \
	done

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

pgtap:
	@url=$(db_url); DATABASE_URL="$$url" pgtap/run.sh

## isolation: deterministic interleavings (pg_isolation_regress; after pgtap, which installs schema pgsweep)
isolation:
	@url=$(db_url); DATABASE_URL="$$url" sql/isolation/run.sh

gotest:
	@url=$(db_url); $(brokers_env); TEST_DATABASE_URL="$$url" $(GO) test -race -count=1 -timeout 35m -tags $(GO_TAGS) $(GO_PKGS)

.PHONY: ui-assets
## ui-assets: refresh the dashboard's htmx and uPlot (ui/static) from the npm registry at their pinned versions
ui-assets:
	scripts/ui-assets.sh

.PHONY: migration migration-sync migration-release
## migration: NAME=what [FILES="lease.sql claim.sql"]: a new migration carrying the functions, procedures and views
## of sql/functions that differ from what the migrations install (FILES first, in that order; then the others)
migration:
	@test -n "$(NAME)" || { echo 'usage: make migration NAME=what [FILES="a.sql b.sql"]'; exit 2; }
	$(GO) run ./internal/migrationgen new $(NAME) $(FILES)

## migration-sync: refresh what the unreleased migrations carry from sql/functions; record checksums
migration-sync:
	$(GO) run ./internal/migrationgen sync

## migration-release: freeze every migration (run when a version ships)
migration-release:
	$(GO) run ./internal/migrationgen release

.PHONY: test-cron
## test-cron: opt-in: schedule maintain() with pg_cron and wait (at most 75 s) for a real run
test-cron:
	@url=$(db_url); TEST_DATABASE_URL="$$url" $(GO) test -tags crontest -count=1 -run TestCronRealRun -timeout 3m -v ./runner/

.PHONY: test-faults
## test-faults: the fault-injection suite (internal/faults, about 2 minutes): a PostgreSQL cluster of its own
## (scripts/db.sh on another port and directory), real workers, runners and a producer; kill -9, SIGTERM,
## pg_terminate_backend, restarts, a stopped server, statement_timeout; nothing lost, no overlapping runs;
## and, beside it (one go test, two packages), the slow fault tests of other packages (build tag faults: a
## broker down for 30 s, on a broker of its own). The suite's own tests run one after the other: both run
## retention at full duty cycle on 300,000 rows; side by side on a loaded machine a worker's 5 s lease expired
## without a fault, which the suite rightly counts as a duplicate nothing explains
test-faults:
	$(GO) vet -tags faults ./internal/faults/ ./cmd/pgsweep/
	@url=$(db_url); TEST_DATABASE_URL="$$url" $(GO) test -tags faults -count=1 -v -timeout 10m \
		-run 'TestFaults|TestRelayBrokerDownThirtySeconds' ./internal/faults/ ./cmd/pgsweep/

.PHONY: citus citus-stop test-citus
## citus: start the throwaway Citus cluster (scripts/citus.sh: a coordinator and two workers from the installed
## PostgreSQL 15 and Citus, on free local ports under .pgsweep/citus), print the coordinator's DSN
citus:
	@scripts/citus.sh start

## citus-stop: stop the Citus cluster
citus-stop:
	@scripts/citus.sh stop

## test-citus: the Citus tier (internal/citustest, build tag citus) on the `make citus` cluster (started when
## missing); TEST_DATABASE_URL for the tests that need a PostgreSQL without Citus
test-citus:
	@url=$(db_url); curl=$$(scripts/citus.sh dsn 2>/dev/null || scripts/citus.sh start); \
	$(GO) vet -tags citus ./internal/citustest/... && \
	TEST_DATABASE_URL="$$url" TEST_CITUS_URL="$$curl" $(GO) test -tags citus -count=1 -v -timeout 30m ./internal/citustest/...
