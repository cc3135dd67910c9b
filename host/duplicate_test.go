package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/transport/mem"
)

// TestDuplicateIDReported: a second agent started with an ID already in use
// is reported to both through OnDuplicateID and counted.
func TestDuplicateIDReported(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	rt := testRuntime(t)
	reasons := make(chan string, 16)
	members := []string{"a", "b", "c"}
	var agents []*Agent
	for i, id := range []string{"a", "b", "a"} {
		ag, err := rt.NewAgent(ctx, AgentConfig{Transport: bus.Transport(id + string(rune('0'+i))), Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer ag.Close(ctx)
		agents = append(agents, ag)
		cb := Callbacks{OnDuplicateID: func(dup, r string) {
			if dup != "a" {
				r = "wrong id " + dup + ": " + r
			}
			reasons <- r
		}}
		if _, err := ag.Join(ctx, fastConfig(id, "g", members), cb); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case r := <-reasons:
		if !strings.Contains(r, `another process speaks as "a"`) && !strings.Contains(r, `member "a"`) {
			t.Fatalf("reason %q", r)
		}
	case <-time.After(time.Minute):
		t.Fatal("no duplicate-id report")
	}
	// The report may come from b, which sees two processes speak as member
	// "a" (the second reason above): each agent counts its own reports.
	var n uint64
	for _, ag := range agents {
		n += ag.Stats().DuplicateIDs
	}
	if n == 0 {
		t.Fatal("not counted")
	}
}
