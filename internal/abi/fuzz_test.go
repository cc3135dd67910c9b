package abi

import (
	"bytes"
	"testing"

	"github.com/electcore/electcore/core"
)

// FuzzInput decodes arbitrary bytes as a msgp Input batch, as the wasm
// module does, and steps an engine with whatever decodes: never a panic, and
// the output always encodes.
func FuzzInput(f *testing.F) {
	seed := core.Input{Now: 5, Join: []core.GroupSpec{{Config: core.Config{ID: "a", Group: "g", Members: []string{"a", "b"}}}},
		Inbound:  []core.Message{{Topic: core.Topic("g"), Payload: []byte(`{"type":"election","candidate":"b","priority":9,"term":3}`)}},
		Commands: []core.Command{{Kind: core.CmdCampaign, Group: "g"}, {Kind: core.CmdTransfer, Group: "g", Target: "b"}}}
	b, err := MarshalInput(nil, &seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		var in core.Input
		if err := DecodeInput(data, &in); err != nil {
			return
		}
		e := core.NewEngine()
		var out core.Output
		e.Step(&in, &out)
		e.Step(&core.Input{Now: in.Now + 10_000}, &out)
		enc, err := EncodeOutput(nil, &out)
		if err != nil {
			t.Fatal(err)
		}
		var back core.Output
		if _, err := UnmarshalOutput(enc, &back); err != nil {
			t.Fatal(err)
		}
		if again, _ := EncodeOutput(nil, &back); !bytes.Equal(again, enc) {
			t.Fatal("output does not round-trip")
		}
	})
}
