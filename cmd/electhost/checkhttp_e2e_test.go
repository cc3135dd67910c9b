package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestE2ECheckHTTPHandsOver: --check-http against a real HTTP server that
// the test turns to failing for the leader. Every agent checks its own URL
// every 100 ms, unhealthy after 3 failures; a1 is the best member. When
// a1's URL answers 503, a1 logs the failing check and leadership moves to
// a2 by one hand-off (term + 1, no election in between); the time from the
// flip to a2 leading is logged (threshold × interval + one hand-off). When
// it answers 200 again, leadership stays at a2 through the calm and comes
// back to a1 by priority once, after it: terms T, T+1, T+2 and no other.
func TestE2ECheckHTTPHandsOver(t *testing.T) {
	t.Parallel()
	// 200 ms / 1.2 s, as TestE2ETransferDrainStay and for its reason.
	hb, et := 200*time.Millisecond, 1200*time.Millisecond
	interval, failures := 100*time.Millisecond, 3
	var mu sync.Mutex
	sick := map[string]bool{}
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/health/")
		mu.Lock()
		bad := sick[id]
		hits[id]++
		mu.Unlock()
		if bad {
			http.Error(w, "sick", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	setSick := func(id string, on bool) {
		mu.Lock()
		sick[id] = on
		mu.Unlock()
	}

	c, _ := newNATSCluster(t, hb, et)
	c.group = "e2e-checkhttp"
	prio := map[string]string{"a1": "30", "a2": "20", "a3": "10"}
	for _, id := range c.ids {
		c.startWith(id, c.ids, "--priority", prio[id], "--check-http", srv.URL+"/health/"+id,
			"--check-interval", interval.String(), "--check-failures", "3", "--check-timeout", "1s")
	}
	c.waitLeads("a1", 2*time.Minute) // the first start may compile the module

	// A round whose terms a lease lost to load (or a starved member's
	// campaign) moved on runs again; one with more terms and no such loss
	// fails.
	logged := func(what string) int { return len(c.proc("a1").logLines(what)) }
	for try := 1; ; try++ {
		again := func(problem string) {
			t.Helper()
			if try == stepTries {
				t.Fatalf("%s, in each of %d rounds", problem, try)
			}
			t.Logf("%s: again", problem)
			setSick("a1", false)
		}
		term := c.waitLeads("a1", time.Minute)
		failing, passed := logged("health check failing"), logged("health check passed")
		setSick("a1", true)
		t0 := time.Now()
		waitFor(t, time.Minute, "a1 logs its check failing", func() (bool, string) { return logged("health check failing") > failing, "" })
		if got := c.waitLeads("a2", time.Minute); got != term+1 {
			lost := c.lostSince(t0)
			if lost == "" {
				t.Fatalf("a2 leads term %d after a1's check failed, want %d: not one hand-off", got, term+1)
			}
			again(fmt.Sprintf("a2 leads term %d, not %d: %s", got, term+1, lost))
			continue
		}
		moved := time.Since(t0)
		t.Logf("a1's /health answering 503: a2 leads term %d after %v (%d failures at %v, then one hand-off)", term+1, moved.Round(time.Millisecond), failures, interval)
		p := c.proc("a1")
		waitFor(t, time.Minute, "a1's /status and /readyz say it is unhealthy", func() (bool, string) {
			s, err := p.status()
			if err != nil || s.Health == nil || s.Health.Healthy || !strings.Contains(s.Health.Reason, "503") {
				return false, "status: " + s.ReadyReason
			}
			_, body, err := p.get("/readyz")
			return err == nil && strings.Contains(body, "unhealthy"), "/readyz: " + body
		})

		setSick("a1", false)
		recovered := time.Now()
		waitFor(t, time.Minute, "a1 logs its check passing", func() (bool, string) { return logged("health check passed") > passed, "" })
		got := c.waitLeads("a1", time.Minute)
		if _, _, why := c.cameBy("a1", got, t0); got != term+2 || why != "resigned" {
			lost := c.lostSince(t0)
			if lost == "" {
				t.Fatalf("a1 leads term %d after recovering (%q), want %d by a2's hand-off: leadership changed more than once", got, why, term+2)
			}
			again(fmt.Sprintf("a1 leads term %d, not %d: %s", got, term+2, lost))
			continue
		}
		back := time.Since(recovered)
		t.Logf("a1's /health answering 200 again: a1 leads term %d %v later (after the calm of 10 election timeouts from the hand-off)", term+2, back.Round(time.Millisecond))
		if since := time.Since(t0); since < 8*et {
			t.Fatalf("leadership came back to a1 %v after it handed over, within the calm (%v): churn", since, 10*et)
		}
		break
	}
	mu.Lock()
	n := hits["a1"]
	mu.Unlock()
	if n < failures {
		t.Fatalf("a1's URL was asked %d times", n)
	}
	c.checkCommandLog()
}
