#!/bin/sh
# Builds electcore.wasm at the repository root (the file is gitignored).
# Pass -hd to build the host-driven variant electcore-hd.wasm instead.
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = "-hd" ]; then
	GOOS=wasip1 GOARCH=wasm go build -tags electcore_hostdriven -buildmode=c-shared -ldflags="-s -w" -o electcore-hd.wasm ./wasm
	ls -l electcore-hd.wasm
else
	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -ldflags="-s -w" -o electcore.wasm ./wasm
	ls -l electcore.wasm
fi
