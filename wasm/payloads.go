//go:build wasip1 && !electcore_hostdriven

package main

// Every output is encoded for the caller before the engine steps again, so
// the engine may write each step's payloads over the last's
// (core.Engine.ReusePayloads).
const reusePayloads = true
