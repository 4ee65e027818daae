# tensorpress: `make test` is what CI runs (.ci/run). It installs the Debian
# packages the tests need when dpkg says they are missing, then vets and
# tests with the race detector (cgo on: the DataDog zstd and liblzma xz
# backends) and again as a pure-Go build (CGO_ENABLED=0: klauspost's zstd
# and ulikunitz's xz only).

GO        ?= go
APT_PKGS  := zstd xz-utils liblzma-dev gcc dataset-fashion-mnist clang-14 python3-grpcio python3-numpy nats-server python3-pytest
# reference regenerates testvectors/reference with numpy and PyTorch; the
# tests read the committed files and need neither.
REF_PKGS  := python3-numpy python3-torch dataset-fashion-mnist
FUZZTIME  ?= 30s
BENCHTIME ?= 1s

.PHONY: all test deps vet test-race test-purego test-noasm test-python bench-python python header fuzz bench benchmarks build clean reference apt proto

all: build test

deps:
	@$(MAKE) --no-print-directory apt PKGS="$(APT_PKGS)"

apt:
	@missing=""; \
	for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "make: installing Debian packages:$$missing"; \
		sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing; \
	fi

vet:
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) vet ./...

test-race:
	CGO_ENABLED=1 $(GO) test -race -count=1 ./...

# test-purego runs -short: the tests of real processes and NATS clusters,
# which do not depend on the zstd backend, run once, in test-race.
test-purego:
	CGO_ENABLED=0 $(GO) test -short -count=1 ./...

# test-noasm runs the packages with assembly kernels on their pure-Go twins,
# and the golden frames through them.
test-noasm:
	$(GO) test -count=1 -tags noasm ./lossless ./lossy ./testvectors

# python comes before the Go tests: codec-bench's py: rows start Python clients.
test: deps vet python test-race test-purego test-noasm test-python

# python builds the C ABI (cmd/libtensorpress) as a shared library beside
# the Python package, with its generated header (both ignored by git).
# Debian's python3 has numpy; the one a PATH may put first may not.
PY    ?= /usr/bin/python3
LIBTP := python/tensorpress/libtensorpress.so

python:
	$(GO) build -buildmode=c-shared -trimpath -o $(LIBTP) ./cmd/libtensorpress

# header refreshes the committed copy of the generated header.
header: python
	cp python/tensorpress/libtensorpress.h cmd/libtensorpress/libtensorpress.h

test-python: python
	$(PY) -m pytest -q -p no:cacheprovider python/tests

# bench-python measures the Python package (not part of make test): speed
# against the Go library (python/bench/speed.py runs go test -bench), then
# the full safety run (100,000 mutated frames) and memory run (100,000
# mixed calls, RSS before and after malloc_trim).
bench-python: python
	$(PY) python/bench/speed.py
	$(PY) python/bench/safety_run.py fuzz --n 100000
	$(PY) python/bench/safety_run.py memory --m 100000

# proto regenerates the hub's gRPC code: protoc from Debian, the plugins
# at the versions the committed code was made with, from the module proxy.
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
PROTO_BIN          := $(CURDIR)/.protobin

proto:
	@$(MAKE) --no-print-directory apt PKGS="protobuf-compiler"
	GOBIN=$(PROTO_BIN) $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$(PROTO_BIN) $(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH="$(PROTO_BIN):$$PATH" protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative hub/hubpb/hub.proto

reference:
	@$(MAKE) --no-print-directory apt PKGS="$(REF_PKGS)"
	/usr/bin/python3 testvectors/reference/gen.py

build:
	$(GO) build ./...

# fuzz runs every fuzz target for FUZZTIME each (seed corpora also run in
# `make test`, as part of go test).
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$f"; \
			$(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg; \
		done; \
	done

# bench runs the Go micro-benchmarks and the end-to-end CLI benchmarks;
# the link benchmark uses tc-shaped namespaces too when run as root.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./...
	$(GO) run ./cmd/codec-bench
	$(GO) run ./cmd/codec-bench link --change --link $$( [ "$$(id -u)" = 0 ] && echo both || echo sim )

clean:
	$(GO) clean -testcache -fuzzcache
