package host

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/transport/mem"
)

// TestWrongKeyWarnsOncePerElectionTimeout: an agent whose HMAC key differs
// from the group's refuses every message of the others; it warns naming a
// sender and the likely cause, at most once per election timeout, and
// Election.AuthFailure reports the last one.
func TestWrongKeyWarnsOncePerElectionTimeout(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{Seed: 5, DelayMin: time.Millisecond, DelayMax: 3 * time.Millisecond})
	r := testRuntime(t)
	ids := []string{"a", "b", "c"}
	var logs syncBuffer
	els := map[string]*Election{}
	for _, id := range ids {
		key := []byte("the group's sixteen+ byte key")
		logger := discardLogger()
		if id == "b" {
			key, logger = []byte("another sixteen+ byte key"), slog.New(slog.NewTextHandler(&logs, nil))
		}
		ag, err := r.NewAgent(ctx, AgentConfig{Transport: bus.Transport(id), Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ag.Close(ctx) })
		cfg := fastConfig(id, "g", ids)
		cfg.Auth, cfg.Key = core.AuthHMAC, key
		if els[id], err = ag.Join(ctx, cfg, Callbacks{}); err != nil {
			t.Fatal(err)
		}
	}
	et := 100 * time.Millisecond
	var first time.Time
	deadline := time.Now().Add(time.Minute)
	for {
		f, ok := els["b"].AuthFailure()
		if ok && first.IsZero() {
			first = time.Now()
		}
		if ok && f.Count >= 100 {
			if f.From != "a" && f.From != "c" || !strings.Contains(f.Cause, "signs with a different group key") {
				t.Fatalf("b's last failure: %+v", f)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b refused only %d messages in a minute", f.Count)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Read the warnings after the count: each was logged before it.
	warnings := strings.Count(logs.String(), "messages fail authentication")
	if most := int(time.Since(first)/et) + 2; warnings == 0 || warnings > most {
		t.Fatalf("%d warnings for 100 refusals in %v (at most one per election timeout, %v: %d):\n%s", warnings, time.Since(first), et, most, logs.String())
	}
	if _, ok := els["a"].AuthFailure(); !ok {
		t.Fatal("a, which hears b's refused messages, reports no authentication failure")
	}
}
