package host_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/host/wasmrt"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/nats"
)

// Example_readme is the README's "Embed it in Go" snippet, compiled (go vet
// and go test build it; TestReadmeSnippet keeps the two identical). It is
// not run: it needs a NATS server and runs until interrupted.
func Example_readme() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rt, err := wasmrt.NewRuntime(ctx, wasmrt.Config{}) // the module built into the program (or $ELECTCORE_WASM); compiles once, caches
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(context.Background())
	tr, err := nats.New(nats.Options{URL: "nats://127.0.0.1:4222"})
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	store, err := statestore.Open("/var/lib/myagent/election")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	// Logger: the library is silent unless given one.
	agent, err := rt.NewAgent(ctx, host.AgentConfig{Transport: tr, Store: store, Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	defer agent.Close(context.Background()) // resigns (hand-off) and leaves
	_, err = agent.Join(ctx, core.Config{ID: "a", Group: "jobs", Members: []string{"a", "b", "c"}}, host.Callbacks{
		OnStartedLeading: func(ctx context.Context, term uint64) { /* lead until ctx is done; tag every action with term */ },
		OnStoppedLeading: func(term uint64, reason string) {},
		OnNewLeader:      func(leader string, term uint64) {},
	})
	if err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
}

// TestReadmeSnippet: the README's Go snippet is Example_readme's body,
// verbatim, so what the README shows compiles.
func TestReadmeSnippet(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "## Embed it in Go\n\n```go\n")
	if !ok {
		t.Fatal("README.md: no ```go block under \"## Embed it in Go\"")
	}
	block, _, _ = strings.Cut(block, "```\n")
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := strings.Cut(string(src), "func Example_readme() {\n")
	body, _, _ = strings.Cut(body, "\n}\n")
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	if want := strings.Join(lines, "\n") + "\n"; block != want {
		t.Fatalf("README.md's snippet differs from Example_readme (host/example_test.go); make them identical.\nREADME:\n%s\nexample:\n%s", block, want)
	}
}

// ExampleElection_AddMember grows a group of three by a fourth agent that
// started outside the configuration (AwaitConfig), on the native core and an
// in-memory bus.
func ExampleElection_AddMember() {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	founders := []string{"a", "b", "c"}
	els := map[string]*host.Election{}
	for _, id := range []string{"a", "b", "c", "d"} {
		agent, err := host.NewNativeAgent(ctx, host.AgentConfig{Transport: bus.Transport(id)})
		if err != nil {
			log.Fatal(err)
		}
		defer agent.Close(ctx)
		// Leases of about a second, which a busy machine keeps: a leader
		// lost to scheduling would refuse the change ("no leader known").
		cfg := core.Config{ID: id, Group: "jobs", Members: founders, HeartbeatMs: 100, ElectionTimeoutMs: 1000,
			AwaitConfig: id == "d"} // d learns the configuration from a, b and c
		if els[id], err = agent.Join(ctx, cfg, host.Callbacks{}); err != nil {
			log.Fatal(err)
		}
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute) // a give-up
	defer cancel()
	// Any member may ask; it waits for a leader, then for the commit.
	if err := els["a"].AddMember(wait, "d", nil); err != nil {
		log.Fatal(err)
	}
	st := els["a"].Status()
	var members []string
	for _, m := range st.Members {
		members = append(members, m.ID)
	}
	fmt.Println("members:", strings.Join(members, ","), "committed:", st.ConfCommitted)
	// Output: members: a,b,c,d committed: true
}
