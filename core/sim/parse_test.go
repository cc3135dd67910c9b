package sim

import (
	"reflect"
	"testing"

	"github.com/electcore/electcore/core"
)

// TestParsePubFastMatchesSlow: the one-pass reader of published payloads
// reads what the key-searching one does, on every payload some seeds of
// each mode publish and on payloads the core never writes (which it must
// leave to the slow reader or read the same).
func TestParsePubFastMatchesSlow(t *testing.T) {
	payloads := [][]byte{
		[]byte(`{}`), []byte(`{"type":"vote"}`), []byte(` {"type":"vote"}`), []byte(`{"type":"vote","term":}`),
		[]byte(`{"type":"vote","term":"5"}`), []byte(`{"type":"vote","term":5.5}`), []byte(`{"type":"vote","term":-1}`),
		[]byte(`{"type":"vote","term":99999999999999999999}`), []byte(`{"type":"vote","term":18446744073709551615}`),
		[]byte(`{"type":"vote","term":007,"pre":true,"granted":false}`), []byte(`{"type":"vote","pre":tru}`),
		[]byte(`{"type":"config","members":[]}`), []byte(`{"type":"config","members":[""]}`),
		[]byte(`{"type":"config","members":["a","b"],"term":3}`), []byte(`{"type":"config","members":["a,b"]}`),
		[]byte(`{"type":"config","members":["a]"]}`), []byte(`{"type":"config","members":[1]}`),
		[]byte(`{"type":"vote","type":"ack"}`), []byte(`{"type":"x\"y"}`), []byte(`{"type":"vote","x":{"term":3}}`),
		[]byte(`{"type":"vote","to":5}`), []byte(`{"type":"vote","x":null}`), []byte(`{"term":3}`), []byte(`{"type":"vote",}`),
		[]byte(`{"type":"resign","to":"n2","candidate":"n1","term":4,"conf_term":2,"conf_index":7}`),
	}
	for _, o := range []Options{{Mode: core.ModeQuorum, Targeted: true}, {Mode: core.ModeQuorum}, {Mode: core.ModeBully},
		{Mode: core.ModeQuorum, Adversary: true}, {Mode: core.ModeQuorum, Drain: true}} {
		for _, seed := range Seeds(1, 4) {
			o.Seed, o.Record = seed, true
			res, err := Run(o)
			if err != nil {
				t.Fatal(err)
			}
			for _, nt := range res.Trace.Nodes {
				for _, st := range nt.Steps {
					for _, m := range st.Input.Inbound {
						payloads = append(payloads, m.Payload)
					}
				}
			}
		}
	}
	fast := 0
	for _, p := range payloads {
		want, wantOK := parsePubSlow(p)
		got, gotOK := parsePub(p)
		if _, _, done := parsePubFast(p); done {
			fast++
		}
		if gotOK != wantOK || wantOK && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: read %+v %v, the key search reads %+v %v", p, got, gotOK, want, wantOK)
		}
	}
	if fast < len(payloads)*9/10 {
		t.Errorf("only %d of %d payloads read in one pass", fast, len(payloads))
	}
	t.Logf("%d payloads, %d read in one pass", len(payloads), fast)
}
