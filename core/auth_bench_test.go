package core

import (
	"fmt"
	"testing"
)

// BenchmarkVerify is the per-message cost of authentication on receipt,
// natively: decode a signed heartbeat, check its replay window, verify its
// signature and record it (internal/wasmhost BenchmarkVerifyWasm measures the module).
// BenchmarkSeal is the cost of signing one publish.
func BenchmarkVerify(b *testing.B) {
	for _, am := range []AuthMode{AuthHMAC, AuthEd25519} {
		b.Run(string(am), func(b *testing.B) {
			c := Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}}
			authConfig(&c, am, c.Members)
			cfg, err := c.normalize()
			if err != nil {
				b.Fatal(err)
			}
			g := newGroup(cfg, GroupState{}, 0) // its configuration carries the members' keys
			g.initAuth()
			key := []byte(testPriv("b"))
			if am == AuthHMAC {
				key = testGroupKey()
			}
			const n = 4096
			msgs := make([][]byte, n)
			epoch := uint64(1)
			sign := func() {
				for i := range msgs {
					p := fmt.Appendf(nil, `{"type":"heartbeat","group":"g","from":"b","leader":"b","priority":7,"term":3,"seq":%d}`, i+1)
					if msgs[i], err = Seal(am, key, "g", p, epoch, uint64(i+1)); err != nil {
						b.Fatal(err)
					}
				}
				epoch++
			}
			sign()
			var m wireMsg
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if i > 0 && i%n == 0 {
					b.StopTimer()
					sign()
					b.StartTimer()
				}
				if err := decodeWire(msgs[i%n], &m); err != nil {
					b.Fatal(err)
				}
				if r := g.auth.verify("g", &m); r != "" {
					b.Fatal(r)
				}
			}
		})
	}
}

func BenchmarkSeal(b *testing.B) {
	for _, am := range []AuthMode{AuthHMAC, AuthEd25519} {
		b.Run(string(am), func(b *testing.B) {
			c := Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}}
			authConfig(&c, am, c.Members)
			cfg, _ := c.normalize()
			g := newGroup(cfg, GroupState{}, 0) // its configuration carries the members' keys
			g.initAuth()
			p := []byte(`{"type":"heartbeat","group":"g","from":"a","leader":"a","priority":7,"term":3,"seq":1}`)
			b.ReportAllocs()
			for b.Loop() {
				g.auth.seal("g", p)
			}
		})
	}
}
