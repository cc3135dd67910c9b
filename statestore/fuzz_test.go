package statestore

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzStateDecode: a state file's decoder refuses anything but a well-framed,
// checksummed file (ErrCorrupt), and round-trips what it accepts.
func FuzzStateDecode(f *testing.F) {
	f.Add(encodeState([]byte("term 3 vote a")))
	f.Add(encodeState(nil))
	f.Add([]byte("ECST"))
	f.Fuzz(func(t *testing.T, file []byte) {
		payload, err := decodeState(file)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("refusal %v is not ErrCorrupt", err)
			}
			return
		}
		if !bytes.Equal(encodeState(payload), file) {
			t.Fatalf("accepted %q, which does not re-encode to itself", file)
		}
	})
}
