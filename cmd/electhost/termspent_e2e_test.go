package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/internal/abi"
	"github.com/electcore/electcore/statestore"
)

// TestE2ETermSpentRecovery: a group whose every member is at MaxTerm (state
// files an older version let a flood of forged messages write) says so —
// a log line, /readyz, a metric — and comes back with the documented
// recovery: stop every agent, reset-state each, start them again.
func TestE2ETermSpentRecovery(t *testing.T) {
	t.Parallel()
	// 200 ms / 1.2 s: nothing here is a timing promise, and at 100 ms /
	// 600 ms a loaded runner loses leases.
	c, _ := newNATSCluster(t, 200*time.Millisecond, 1200*time.Millisecond)
	for _, id := range c.ids {
		store, err := statestore.Open(c.stateDir(id))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := abi.MarshalState(nil, &core.GroupState{Group: c.group, Term: core.MaxTerm})
		if err := store.Save(host.StateName(id, c.group), b); err != nil {
			t.Fatal(err)
		}
		store.Close()
		c.start(id)
	}
	for _, id := range c.ids {
		c.waitLog(id, "term space spent", time.Minute)
		waitFor(t, time.Minute, id+" /readyz names reset-state", func() (bool, string) {
			code, body, err := c.proc(id).get("/readyz")
			return err == nil && code == 503 && strings.Contains(body, "reset-state"), body
		})
		if _, body, err := c.proc(id).get("/metrics"); err != nil || !strings.Contains(body, `electcore_term_spent{group="e2e",id="`+id+`"} 1`) {
			t.Fatalf("%s /metrics: %v\n%s", id, err, body)
		}
	}
	for _, id := range c.ids {
		c.signal(id, syscall.SIGTERM)
		c.waitExit(id, time.Minute)
		if code, out, stderr := runCLI(t, 30*time.Second, nil, "reset-state", "--group", c.group, "--id", id, "--state-dir", c.stateDir(id)); code != 0 {
			t.Fatalf("reset-state %s: exit %d\n%s%s", id, code, out, stderr)
		}
	}
	c.startAll()
	leader, term, took := c.waitAgreement("", 1, time.Minute)
	t.Logf("after reset-state: %s leads term %d, %v after the restart", leader, term, took)
}
