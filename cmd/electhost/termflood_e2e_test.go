package main

import (
	"testing"
	"time"

	"github.com/electcore/electcore/core"
)

// TestE2ETermFlood: acks addressed to each member, forged far ahead, once
// moved a term 2^32 per message (about 6 million brought a group to MaxTerm
// for good). Now those are refused; the most a flood can do — each message
// as far ahead as is accepted — moves terms by about 16 a message, and the
// group elects again after it.
func TestE2ETermFlood(t *testing.T) {
	t.Parallel()
	// 200 ms / 1.2 s: the bound below is on terms, not time, and at 100 ms
	// / 600 ms a loaded runner loses leases.
	c, url := newNATSCluster(t, 200*time.Millisecond, 1200*time.Millisecond)
	c.group = "e2e-term-flood"
	f := newForger(t, url, c.group)
	c.startAll()
	_, term, _ := c.waitAgreement("", 1, 2*time.Minute)
	ack := func(i int, ahead uint64) []byte {
		to, from := c.ids[i%3], c.ids[(i+1)%3]
		return f.forge(map[string]any{"type": "ack", "from": from, "leader": to, "term": term + ahead, "priority": 1})
	}
	const big = 3000
	took := f.flood(big, func(i int) []byte { return ack(i, uint64(i/3+1)<<32) })
	t.Logf("%d acks 2^32 apart in %v", big, took)
	const small = 30_000
	t0 := time.Now()
	took = f.flood(small, func(i int) []byte { return ack(i, uint64(i/3+1)*core.MaxTermStep) })
	t.Logf("%d acks %d apart in %v", small, core.MaxTermStep, took)
	leader, after, took := c.waitAgreement("", term, 2*time.Minute)
	bound := term + uint64(small)*(core.MaxTermStep+1) + uint64(time.Since(t0).Milliseconds()) + 1000
	if after > bound {
		t.Fatalf("after %d + %d forged acks the group is at term %d, beyond %d", big, small, after, bound)
	}
	t.Logf("%s leads term %d after the floods (from term %d), agreed %v after them", leader, after, term, took)
}
