package host

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/electcore/electcore/transport/mem"
	"go.uber.org/goleak"
)

// leadAlone starts an agent alone in group g and returns once cb's
// OnStartedLeading was called (it must close started).
func leadAlone(t *testing.T, bus *mem.Bus, cb Callbacks, started <-chan struct{}) *Agent {
	t.Helper()
	ctx := context.Background()
	ag, err := testRuntime(t).NewAgent(ctx, AgentConfig{Transport: bus.Transport("a"), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ag.Join(ctx, fastConfig("a", "g", []string{"a"}), cb); err != nil {
		t.Fatal(err)
	}
	<-started
	return ag
}

// TestCloseNeverSucceedsWhileACallbackRuns: an OnStartedLeading that has
// not returned when Close's ctx ends makes Close fail, saying so; a later
// Close waits for it. Before, Close returned nil and the callback went on.
func TestCloseNeverSucceedsWhileACallbackRuns(t *testing.T) {
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	closeCtx, cancelClose := context.WithCancel(context.Background())
	defer cancelClose()
	started, release := make(chan struct{}), make(chan struct{})
	var closed, ranAfterClose, finished atomic.Bool
	ag := leadAlone(t, bus, Callbacks{OnStartedLeading: func(lctx context.Context, term uint64) {
		close(started)
		<-lctx.Done()
		cancelClose() // Close has ended the leadership: now its own ctx ends too
		<-release
		ranAfterClose.Store(closed.Load())
		finished.Store(true)
	}}, started)

	err := ag.Close(closeCtx)
	closed.Store(true)
	close(release)
	if err == nil {
		t.Fatal("Close returned nil while OnStartedLeading was still running")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v, want an error wrapping its ctx's", err)
	}
	if err := ag.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !finished.Load() {
		t.Fatal("the second Close returned before OnStartedLeading did")
	}
	if !ranAfterClose.Load() {
		t.Fatal("the callback was released only after the first Close returned, yet saw it not returned")
	}
}

// TestCloseOutlastsEveryCallback: when Close returns, OnStartedLeading has
// returned, OnStoppedLeading has been called, no callback
// runs later, and none of the agent's goroutines is left, the transport
// still open.
func TestCloseOutlastsEveryCallback(t *testing.T) {
	before := goleak.IgnoreCurrent()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	started := make(chan struct{})
	var closed atomic.Bool
	var mu sync.Mutex
	var seen []string
	note := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		if closed.Load() {
			what += " after Close returned"
		}
		seen = append(seen, what)
	}
	stopped := make(chan struct{})
	ag := leadAlone(t, bus, Callbacks{
		OnStartedLeading: func(lctx context.Context, term uint64) {
			close(started)
			<-lctx.Done()
			<-stopped // returns only after OnStoppedLeading ran
			note("OnStartedLeading returned")
		},
		OnStoppedLeading: func(term uint64, reason string) {
			note("OnStoppedLeading") // "resigned": Close resigns first
			close(stopped)
		},
	}, started)
	if err := ag.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed.Store(true)
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	want := []string{"OnStoppedLeading", "OnStartedLeading returned"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("callbacks seen by the time Close returned: %q, want %q", got, want)
	}
	// The bus is still open: what is left would be the agent's (the
	// subscription the agent cancelled ends on its own, promptly).
	goleak.VerifyNone(t, before)
}

// TestJoinAfterCloseStartsNothing: a Join after (or racing) Close is
// refused without leaving the election's callback goroutine behind.
func TestJoinAfterCloseStartsNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	ag, err := NewNativeAgent(context.Background(), AgentConfig{Transport: bus.Transport("a")})
	if err != nil {
		t.Fatal(err)
	}
	if err := ag.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := ag.Join(context.Background(), fastConfig("a", "g", []string{"a"}), Callbacks{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Join after Close: %v, want ErrClosed", err)
	}
}
