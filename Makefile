# Orchard. `make run` starts the whole system on an embedded database;
# `make test` runs every test against a throwaway database server.

GO          ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
PKGS        := ./...

.PHONY: run test lint bench ci

run:
	$(GO) build -o bin/orchard ./cmd/orchard
	./bin/orchard dev

test:
	$(GO) test -race -count=1 -timeout 9m $(PKGS)

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

# Benchmarks of the hot paths. The store benchmark also runs pgbench against
# the same throwaway server, to put the numbers beside its raw insert rate.
bench:
	$(GO) test -run='^$$' -bench=. -benchtime=3s -timeout 30m $(PKGS)

ci: lint test
