# The map of the project: make build test bench demo fuzz chaos.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/refundkit/refundkit/cmd/internal/cli.Version=$(VERSION)
STRIPE_MOCK_VERSION := v0.203.0
TOOLS := $(CURDIR)/bin/tools
export STRIPE_MOCK_BIN := $(TOOLS)/stripe-mock
# nats-server, pinned: the NATS JetStream checkpoint's tests start their own
# on loopback (refund/checkpoint/natsjs/natstest).
NATS_SERVER_VERSION := v2.15.2
export NATS_SERVER_BIN := $(TOOLS)/nats-server

.PHONY: build test test-short bench demo fuzz chaos lint tools clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

# stripe-mock (Stripe's own mock of its API) checks that the requests refund
# sends fit the real API spec; the contract test starts it on free loopback
# ports. Installing it needs the Go module proxy; offline, name one installed
# already: make test STRIPE_MOCK_BIN=/path/to/stripe-mock
tools: $(STRIPE_MOCK_BIN) $(NATS_SERVER_BIN)
$(NATS_SERVER_BIN):
	GOBIN=$(TOOLS) $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION) || { \
	  echo "tools: installing nats-server $(NATS_SERVER_VERSION) needs the Go module proxy; offline: make test NATS_SERVER_BIN=/path/to/nats-server" >&2; exit 1; }
$(STRIPE_MOCK_BIN):
	GOBIN=$(TOOLS) $(GO) install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION) || { \
	  echo "tools: installing stripe-mock $(STRIPE_MOCK_VERSION) needs the Go module proxy (GOPROXY=$$($(GO) env GOPROXY)); offline: make test STRIPE_MOCK_BIN=/path/to/stripe-mock" >&2; exit 1; }

# The whole suite: unit tests, testscript end-to-end suites, the contract test
# against stripe-mock and the short fault matrix, all with the race detector
# (docs/development.md: how long it takes). -timeout: go test's own 10m per
# package is a deadline a busy machine passes (cmd/internal/cli did, at 600s).
test: tools lint
	$(GO) test -race -count=1 -timeout 30m ./...

# The same without the fault matrix, which runs the real binaries for a
# minute or more: for the edit-and-test loop.
test-short: tools lint
	$(GO) test -race -count=1 -timeout 30m -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The new core (bin/) beside the old one (BENCH_BASE, default 87c9614) and
# the best baselines, on the shape a real run writes: about 35 minutes.
# Quicker, for development: make bench BENCH_ITEMS=100000 (see scripts/bench.sh).
bench: build
	scripts/bench.sh

# PROVIDER=paypal runs the same demo with PayPal captures.
PROVIDER ?= stripe
demo: build
	PROVIDER=$(PROVIDER) scripts/demo.sh

chaos: build
	scripts/chaos.sh $(CHAOSFLAGS)

FUZZTIME ?= 2m
fuzz:
	$(GO) test ./journal -run '^$$' -fuzz FuzzScanner -fuzztime $(FUZZTIME)
	$(GO) test ./journal -run '^$$' -fuzz FuzzReader -fuzztime $(FUZZTIME)
	$(GO) test ./refund/plan -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME)
	$(GO) test ./refund -run '^$$' -fuzz FuzzPlanItem -fuzztime $(FUZZTIME)
	$(GO) test ./refund -run '^$$' -fuzz FuzzParseItem -fuzztime $(FUZZTIME)
	$(GO) test ./refund/sim/stripesim -run '^$$' -fuzz FuzzReadCharges -fuzztime $(FUZZTIME)
	$(GO) test ./refund/audit -run '^$$' -fuzz FuzzAuditScan -fuzztime $(FUZZTIME)
	$(GO) test ./refund/money -run '^$$' -fuzz FuzzParseValue -fuzztime $(FUZZTIME)
	$(GO) test ./refund/money -run '^$$' -fuzz '^FuzzAdd$$' -fuzztime $(FUZZTIME)
	$(GO) test ./refund/sim/paypalsim -run '^$$' -fuzz FuzzReadCaptures -fuzztime $(FUZZTIME)
	$(GO) test ./refund -run '^$$' -fuzz FuzzNothingDoneUnproven -fuzztime $(FUZZTIME)
	$(GO) test ./refund/provider/exec -run '^$$' -fuzz FuzzAnswers -fuzztime $(FUZZTIME)
	$(GO) test ./refund/provider/paypal -run '^$$' -fuzz FuzzRefundAnswer -fuzztime $(FUZZTIME)
	$(GO) test ./refund/provider/adyen -run '^$$' -fuzz FuzzOutcome -fuzztime $(FUZZTIME)

clean:
	rm -rf bin out

# make install: the binaries (built as make build builds them), their man
# pages and bash completions under PREFIX, inside DESTDIR when given (for
# packaging). BUILDDIR is where they are built first (default bin/).
PREFIX ?= /usr/local
DESTDIR ?=
BUILDDIR ?= bin
COMMANDS := plan refund audit journal-merge webhook adyen-webhook stripe-sim
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || date +%s)

.PHONY: man install

# The man pages, from each command's kong grammar (its hidden --help-man),
# into $(BUILDDIR)/man/man1: man -l bin/man/man1/refund.1
man:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BUILDDIR)/ ./cmd/...
	mkdir -p $(BUILDDIR)/man/man1
	for c in $(COMMANDS); do SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(BUILDDIR)/$$c --help-man > $(BUILDDIR)/man/man1/$$c.1 || exit 1; done

# Bash completion is each binary completing itself (complete -C); zsh
# takes the same files after: autoload -U bashcompinit && bashcompinit
install: man
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	for c in $(COMMANDS); do \
	  install -m 0755 $(BUILDDIR)/$$c $(DESTDIR)$(PREFIX)/bin/$$c && \
	  install -m 0644 $(BUILDDIR)/man/man1/$$c.1 $(DESTDIR)$(PREFIX)/share/man/man1/$$c.1 && \
	  printf 'complete -C %s %s\n' "$(PREFIX)/bin/$$c" "$$c" > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/$$c || exit 1; \
	done
