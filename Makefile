# Orchard. `make run` starts the whole system on an embedded database;
# `make test` runs every test against a throwaway database server.

GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BUF         := github.com/bufbuild/buf/cmd/buf@v1.75.0
PKGS        := ./...
HELM        := helm.sh/helm/v3/cmd/helm@v3.22.0
KUBECONFORM := github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0
CHART       := deploy/helm/orchard
KUBE_VERSION := 1.30.14
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT      ?= $(shell git rev-parse --verify -q HEAD || echo unknown)
BUILD_DATE  ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS     := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE)

.PHONY: run test lint bench bench-dispatcher ci proto proto-check crdb-check loadtest chaos scaleout targets definition-schema

run:
	$(GO) build -o bin/orchard ./cmd/orchard
	./bin/orchard dev --demo

# A static orchard binary stamped with its version, commit and build date.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/orchard ./cmd/orchard

test:
	$(GO) test -race -count=1 -timeout 9m $(PKGS)

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

# Benchmarks of the hot paths. The store and dispatcher benchmarks also run
# pgbench against the same throwaway server, to put their rates beside its
# raw insert rate. bench-dispatcher is the end-to-end orchestration rate
# alone (W, W / pgbench, latency at half load).
bench:
	$(GO) test -run='^$$' -bench=. -benchtime=3s -timeout 30m $$($(GO) list ./... | grep -v services/dispatcher)
	$(MAKE) bench-dispatcher

bench-dispatcher:
	$(GO) test -run='^$$' -bench=Orchestrations -benchtime=3000x -timeout 30m ./services/dispatcher/

ci: lint test

# CockroachDB 25.2's own parser over our SQL (tools/crdbcheck, a module of
# its own so that ours does not depend on the parser): the migrations that
# run on CockroachDB and, when ORCHARD_SQL_CAPTURE names the directory a
# `make test` run captured into (internal/sqlcapture), every statement our
# code sent during that run. CI runs the tests once, capturing, then this.
crdb-check:
	cd tools/crdbcheck && $(GO) vet . && $(GO) test -count=1 . && \
		$(GO) run . $(if $(ORCHARD_SQL_CAPTURE),-captured $(abspath $(ORCHARD_SQL_CAPTURE)))

# The JSON Schema of the definition language (docs/definition.schema.json),
# generated from the types definitions decode into (pkg/engine/language.go).
# It is checked in; `make test` fails when it is stale.
definition-schema:
	$(GO) generate ./pkg/engine/

# API code generation (proto/). buf and its plugins run through `go run` at
# pinned versions (buf here, the plugins in proto/buf.gen.yaml), so nothing
# needs installing and nothing comes from the Buf Schema Registry. The
# generated code is checked in; old generated files are removed first so a
# deleted .proto leaves nothing behind.
proto:
	@for mod in google.golang.org/protobuf connectrpc.com/connect; do \
		v=$$($(GO) list -m -f '{{.Version}}' $$mod); \
		grep -q "$$mod/cmd/[a-z-]*@$$v\"" proto/buf.gen.yaml || \
			{ echo "proto/buf.gen.yaml: pin the plugin of $$mod at $$v, the version in go.mod"; exit 1; }; \
	done
	cd proto && $(GO) run $(BUF) lint
	find proto/orchard -name '*.pb.go' -delete
	find proto/orchard -name '*.connect.go' -delete
	cd proto && $(GO) run $(BUF) generate

# Fails when the checked-in generated code or the .proto formatting is not
# what `make proto` and `buf format` produce.
proto-check: proto
	cd proto && $(GO) run $(BUF) format --diff --exit-code
	@changes=$$(git status --porcelain -- proto); \
	if [ -n "$$changes" ]; then echo "make proto changed proto/ (run it and commit the result):"; echo "$$changes"; exit 1; fi

# The Helm chart: helm lint --strict, and the rendered manifests validated by
# kubeconform -strict against the Kubernetes $(KUBE_VERSION) schemas vendored
# in deploy/kubernetes-schemas (nothing is fetched), with the least values a
# user must set and with a production-like set.
helm-lint:
	@set -e; for values in default production; do \
		echo "helm-lint: $$values values"; \
		$(GO) run $(HELM) lint --strict $(CHART) -f $(CHART)/ci/$$values-values.yaml --kube-version $(KUBE_VERSION); \
		$(GO) run $(HELM) template orchard $(CHART) -f $(CHART)/ci/$$values-values.yaml --kube-version $(KUBE_VERSION) \
		| $(GO) run $(KUBECONFORM) -strict -summary -kubernetes-version $(KUBE_VERSION) \
			-schema-location 'deploy/kubernetes-schemas/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json' \
			-schema-location 'deploy/kubernetes-schemas/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json' -; \
	done

# The deployment topology rehearsed on this machine (deploy/smoke).
deploy-smoke:
	$(GO) run ./deploy/smoke

# The OCI image as a tarball (bin/orchard-image.tar), without a Docker daemon.
image:
	bash deploy/image/build.sh

# The standard load test (loadtest/plans/standard.yaml, 60 s) against a
# fresh `orchard dev` that this target starts and stops; the report lands in
# loadtest-results/. LOADTEST_ARGS adds flags (--plan burst, --duration 20s).
LOADTEST_DIR := .orchard/loadtest
LOADTEST_ADDR := 127.0.0.1:18080
loadtest:
	$(GO) build -o bin/orchard ./cmd/orchard
	@rm -rf $(LOADTEST_DIR); mkdir -p $(LOADTEST_DIR)
	@./bin/orchard dev --fresh --dir $(LOADTEST_DIR) --listen $(LOADTEST_ADDR) --ops-addr '' --log-level error \
		> $(LOADTEST_DIR)/dev.log 2>&1 & pid=$$!; \
	trap "kill $$pid 2>/dev/null; wait $$pid" EXIT; \
	for i in $$(seq 600); do [ -s $(LOADTEST_DIR)/tokens/admin ] && break; \
		kill -0 $$pid 2>/dev/null || { cat $(LOADTEST_DIR)/dev.log; exit 1; }; sleep 0.1; done; \
	./bin/orchard loadtest --addr http://$(LOADTEST_ADDR) --token-file $(LOADTEST_DIR)/tokens/admin \
		--cpu-pid $$pid $(LOADTEST_ARGS)

# Throughput with one dispatcher process and with two (loadtest/scaleout):
# each run a fresh PostgreSQL, `orchard api` and the dispatchers as processes
# of their own, the burst plan for 15 s; runs alternate, two rounds.
# SCALEOUT_ARGS adds flags (--dispatcher-cpu 0.05 caps each dispatcher
# through a cgroup; --dispatchers 1,2,3; --hints members); the reports land
# in .orchard/scaleout/.
scaleout:
	$(GO) build -o bin/ ./cmd/orchard ./loadtest/scaleout
	./bin/scaleout --orchard bin/orchard $(SCALEOUT_ARGS)

# The performance goals, measured in one sitting (loadtest/targets): pgbench's
# insert rate on a PostgreSQL server set up as orchard dev's, then burst, half
# load (at half the W just measured), one in flight, chains, and fairness
# (the noisy tenant on and off in turns), each on a fresh `orchard dev`; a table of the means
# against the goals. TARGETS_ARGS adds flags (--compare OTHER_ORCHARD_BINARY,
# --rounds 3, --skip fairness); the reports land in .orchard/targets/.
targets:
	$(GO) build -o bin/ ./cmd/orchard ./loadtest/targets
	./bin/targets --orchard bin/orchard $(TARGETS_ARGS)

# The short fault campaign (loadtest/chaos): the services as processes of
# their own under load, faults injected every 4 s for 30 s (kill -9 of a
# dispatcher, the API, a worker; a database restart; connection cuts and
# latency), then every instance judged through the API. Fails when one was
# lost, duplicated, failed or stuck. CHAOS_ARGS adds flags (--duration 5m,
# --seed N); the report lands in .orchard/chaos/.
chaos:
	$(GO) build -o bin/ ./cmd/orchard ./loadtest/chaos/cmd/orchard-chaos
	./bin/orchard-chaos --orchard bin/orchard --duration 30s --interval 4s $(CHAOS_ARGS)
