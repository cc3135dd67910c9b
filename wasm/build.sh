#!/bin/sh
# Builds electcore.wasm at the repository root (the file is gitignored).
# Pass -hd to build the host-driven variant electcore-hd.wasm instead, -o FILE
# to write elsewhere. The build is `go run ./wasm/build` (see its doc: the
# plain go build with msgp's JSON converter tables made lazy, ~580 KB smaller).
set -eu
cd "$(dirname "$0")/.."
go run ./wasm/build "$@"
