//go:build wasip1 && !electcore_hostdriven

package main

import (
	"strings"

	"github.com/extism/go-pdk"
)

// Extism plugin functions (go-pdk): input and output through the Extism
// kernel, return 0 on success, 1 with an error message set. See ABI.md.

func extismRun(f func() error) int32 {
	err := guard(f)
	if err != nil {
		pdk.SetError(err)
		return 1
	}
	return 0
}

// extismInput copies the call's input in (go-pdk reads it 8 bytes per host
// call; the size bound is checked by the decoders).
func extismInput() []byte { return pdk.Input() }

// join: input a msgp core.Input with exactly one GroupSpec (and Now/Wall);
// output the msgp core.Output of that step. Fails if the core rejects the
// group (nothing changed then).
//
//go:wasmexport join
func extJoin() int32 {
	return extismRun(func() error {
		b := extismInput()
		if err := joinBytes(b); err != nil {
			return err
		}
		pdk.Output(outBuf)
		return nil
	})
}

// step: input a msgp core.Input, output the msgp core.Output.
//
//go:wasmexport step
func extStep() int32 {
	return extismRun(func() error {
		b := extismInput()
		if err := stepBytes(b); err != nil {
			return err
		}
		pdk.Output(outBuf)
		return nil
	})
}

// status: input a group name, output its msgp core.Status.
//
//go:wasmexport status
func extStatus() int32 {
	return extismRun(func() error {
		if err := statusBytes(string(pdk.Input())); err != nil {
			return err
		}
		pdk.Output(outBuf)
		return nil
	})
}

// groups: no input; output the joined group names, one per line, sorted.
//
//go:wasmexport groups
func extGroups() int32 {
	return extismRun(func() error {
		pdk.OutputString(strings.Join(engine.Groups(), "\n"))
		return nil
	})
}

// reset: drop every group.
//
//go:wasmexport reset
func extReset() int32 {
	return extismRun(func() error { resetEngine(); return nil })
}
