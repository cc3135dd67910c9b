// Package module carries electcore.wasm inside every Go program that imports
// the host package, so that `go install` and `go build` give a program that
// needs no file beside it.
//
// electcore.wasm here is committed: `make wasm` rebuilds it from core/ and
// wasm/ (reproducibly: -trimpath, -buildvcs=false) and CI rebuilds it and
// fails if the committed bytes differ from the sources. After changing
// core/ or wasm/, run `make wasm` and commit this file with the change.
package module

import _ "embed"

// Wasm is the module built from this repository's wasm/ (raw ABI and Extism
// exports; not the host-driven build).
//
//go:embed electcore.wasm
var Wasm []byte
