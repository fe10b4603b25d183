# The map of the project: make build test bench demo fuzz chaos.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/refundkit/refundkit/cmd/internal/cli.Version=$(VERSION)
STRIPE_MOCK_VERSION := v0.203.0
TOOLS := $(CURDIR)/bin/tools
export STRIPE_MOCK_BIN := $(TOOLS)/stripe-mock

.PHONY: build test test-short bench demo fuzz chaos lint tools clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

# stripe-mock (Stripe's own mock of its API) checks that the requests refund
# sends fit the real API spec; the contract test starts it.
tools: $(STRIPE_MOCK_BIN)
$(STRIPE_MOCK_BIN):
	GOBIN=$(TOOLS) $(GO) install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION)

# The whole suite: unit tests, testscript end-to-end suites, the contract test
# against stripe-mock and the short fault matrix, all with the race detector.
test: tools lint
	$(GO) test -race -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

bench: build
	scripts/bench.sh

demo: build
	scripts/demo.sh

chaos: build
	scripts/chaos.sh $(CHAOSFLAGS)

FUZZTIME ?= 2m
fuzz:
	$(GO) test ./journal -run '^$$' -fuzz FuzzScanner -fuzztime $(FUZZTIME)
	$(GO) test ./refund/plan -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME)
	$(GO) test ./refund/plan -run '^$$' -fuzz FuzzJSONRow -fuzztime $(FUZZTIME)
	$(GO) test ./refund -run '^$$' -fuzz FuzzParseItem -fuzztime $(FUZZTIME)
	$(GO) test ./refund/stripesim -run '^$$' -fuzz FuzzReadCharges -fuzztime $(FUZZTIME)
	$(GO) test ./refund/audit -run '^$$' -fuzz FuzzAuditScan -fuzztime $(FUZZTIME)

clean:
	rm -rf bin out
