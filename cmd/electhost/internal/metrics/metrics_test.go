package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestExposition(t *testing.T) {
	var scrapes atomic.Int32
	m := New("g1", "a", func() Snapshot {
		scrapes.Add(1)
		return Snapshot{Elections: 3, Term: 9, IsLeader: true, MessagesIn: 100, MessagesOut: 50, Rejected: 2, Traps: 1, DuplicateIDs: 4, Dropped: 11, DroppedFromMembers: 6, TransportDropped: 13, Superseded: 14, Thinned: 15,
			ConfIndex: 7, ConfMembers: 5, ConfCommitted: true, Voter: true, Drained: true, Checked: true}
	})
	m.LeaderChanged()
	m.LeaderChanged()
	m.ObserveFailover(1500 * time.Millisecond)

	text := scrape(t, m)
	for _, want := range []string{
		`electcore_elections_total{group="g1",id="a"} 3`,
		`electcore_term{group="g1",id="a"} 9`,
		`electcore_is_leader{group="g1",id="a"} 1`,
		`electcore_messages_received_total{group="g1",id="a"} 100`,
		`electcore_messages_published_total{group="g1",id="a"} 50`,
		`electcore_messages_rejected_total{group="g1",id="a"} 2`,
		`electcore_wasm_traps_total{group="g1",id="a"} 1`,
		`electcore_duplicate_ids_total{group="g1",id="a"} 4`,
		`electcore_messages_dropped_total{group="g1",id="a"} 11`,
		`electcore_member_messages_dropped_total{group="g1",id="a"} 6`,
		`electcore_transport_messages_dropped_total{group="g1",id="a"} 13`,
		`electcore_messages_superseded_total{group="g1",id="a"} 14`,
		`electcore_acks_thinned_total{group="g1",id="a"} 15`,
		`electcore_config_index{group="g1",id="a"} 7`,
		`electcore_config_members{group="g1",id="a"} 5`,
		`electcore_config_committed{group="g1",id="a"} 1`,
		`electcore_voter{group="g1",id="a"} 1`,
		`electcore_drained{group="g1",id="a"} 1`,
		`electcore_unhealthy{group="g1",id="a"} 1`,
		`electcore_term_spent{group="g1",id="a"} 0`,
		`electcore_leader_changes_total{group="g1",id="a"} 2`,
		`electcore_failover_seconds_bucket{group="g1",id="a",le="2"} 1`,
		`electcore_failover_seconds_count{group="g1",id="a"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if scrapes.Load() != 1 {
		t.Errorf("source called %d times in one scrape, want 1", scrapes.Load())
	}
	if n, err := testutil.GatherAndCount(m.Registry(), "electcore_is_leader"); err != nil || n != 1 {
		t.Errorf("GatherAndCount: %d, %v", n, err)
	}
}

func TestNilSourceAndLint(t *testing.T) {
	m := New("g", "b", nil)
	problems, err := testutil.GatherAndLint(m.Registry(), "electcore_term", "electcore_failover_seconds", "electcore_elections_total")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// scrape fetches m's exposition over HTTP.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}
