//go:build linux

package supervise

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"
)

// BenchmarkShimStopLateness measures how late the shim sends SIGTERM after
// the lease deadline it holds, and SIGKILL after deadline+grace, with its
// supervisor doing nothing (a stop by deadline alone). Run it on a loaded
// machine to see the margin the lease needs, e.g. with 8 busy loops:
//
//	for i in $(seq 8); do (while :; do :; done) & done
//	go test ./cmd/electhost/internal/supervise -run '^$' -bench ShimStopLateness -benchtime 20x
func BenchmarkShimStopLateness(b *testing.B) {
	h := &attrHandler{}
	var s *Supervisor
	s, err := New(Options{Path: "sh", Args: []string{"-c", `trap "" TERM; sleep 1000`}, Grace: 100 * time.Millisecond,
		Shim: os.Args[0], Logger: slog.New(h), BackoffMin: time.Hour, BackoffMax: time.Hour,
		// The deadline is set once the shim runs: its start-up is not
		// part of what is measured.
		OnStart: func(int) { s.SetDeadline(time.Now().Add(300 * time.Millisecond)) }})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, exited, err := s.RunOnce(context.Background()); err != nil || exited {
			b.Fatalf("exited %v err %v: want a stop at the deadline", exited, err)
		}
		s.SetDeadline(time.Time{}) // the next start gets its own
	}
	report := func(name string, vs []slog.Value) {
		if len(vs) == 0 {
			return
		}
		var d []time.Duration
		for _, v := range vs {
			d = append(d, v.Duration())
		}
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1e3, name+"-p50-ms")
		b.ReportMetric(float64(d[len(d)-1].Microseconds())/1e3, name+"-max-ms")
	}
	report("sigterm-late", h.values("sigterm_late"))
	report("sigkill-late", h.values("sigkill_late"))
	c, _ := s.Containment()
	b.Logf("containment %s, %d stops", c, len(h.values("sigkill_late")))
}
