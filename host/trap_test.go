package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/testwasm"
	"github.com/electcore/electcore/internal/wasmhost"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/mem"
)

// TestTrapMidElection makes the module trap again and again while a quorum
// group elects (campaigns are forced so that traps land mid-election): each
// trap is a real one (the call is aborted by its deadline and wazero closes
// the module). The host must replace the instance from the persisted state
// every time with no term regression on any node and no vote given twice in
// one term, and the group must still converge on one leader.
func TestTrapMidElection(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{Seed: 7, DelayMin: time.Millisecond, DelayMax: 4 * time.Millisecond})
	t.Cleanup(func() { bus.Close() })
	ids := []string{"t1", "t2", "t3"}

	// A spy on the bus records every granted vote: (voter, term) -> candidate.
	var (
		vmu        sync.Mutex
		votes      = map[string]string{}
		doubleVote []string
	)
	spyCtx, stopSpy := context.WithCancel(ctx)
	defer stopSpy()
	if err := bus.Transport("spy").Subscribe(spyCtx, core.Topic("g"), func(m transport.Message) {
		var v struct {
			Type, From, Candidate string
			Term                  uint64
			Pre, Granted          bool
		}
		if json.Unmarshal(m.Payload, &v) != nil || v.Type != "vote" || !v.Granted || v.Pre {
			return
		}
		key := fmt.Sprintf("%s@%d", v.From, v.Term)
		vmu.Lock()
		if prev, ok := votes[key]; ok && prev != v.Candidate {
			doubleVote = append(doubleVote, fmt.Sprintf("%s voted for %s and %s", key, prev, v.Candidate))
		}
		votes[key] = v.Candidate
		vmu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}

	r := testRuntime(t)
	var trapsSeen atomic.Int64
	var tas []*testAgent
	for _, id := range ids {
		store, err := statestore.Open(filepath.Join(t.TempDir(), id), statestore.Options{Logger: testwasm.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		ta := &testAgent{id: id, tr: bus.Transport(id), rec: &recorder{id: id, leading: map[uint64]bool{}}}
		ta.ag, err = r.NewAgent(ctx, AgentConfig{Transport: ta.tr, Store: store, Logger: discardLogger(),
			OnTrap: func(err error) {
				if !errors.Is(err, ErrTrap) || !errors.Is(err, wasmhost.ErrDeadline) {
					t.Errorf("OnTrap: %v", err)
				}
				trapsSeen.Add(1)
			}})
		if err != nil {
			t.Fatal(err)
		}
		if ta.el, err = ta.ag.Join(ctx, fastConfig(id, "g", ids), ta.rec.callbacks()); err != nil {
			t.Fatal(err)
		}
		tas = append(tas, ta)
		t.Cleanup(func() { ta.ag.Close(ctx) })
	}

	// Watch every node's term: it must never go down.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var regress []string
	var rmu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		maxTerm := map[string]uint64{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			for _, ta := range tas {
				st, ok, err := ta.ag.eng.Status("g")
				if err != nil || !ok {
					continue
				}
				if st.Term < maxTerm[ta.id] {
					rmu.Lock()
					regress = append(regress, fmt.Sprintf("%s: term %d after %d", ta.id, st.Term, maxTerm[ta.id]))
					rmu.Unlock()
				}
				maxTerm[ta.id] = max(maxTerm[ta.id], st.Term)
			}
		}
	}()

	// Chaos: traps and forced campaigns for 2 s.
	rng := rand.New(rand.NewPCG(1, 2))
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) {
		ta := tas[rng.IntN(len(tas))]
		if rng.IntN(2) == 0 {
			_ = tas[rng.IntN(len(tas))].el.Campaign(ctx)
		}
		time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond) // paces the chaos, waits for nothing
		ta.ag.eng.(*wasmhost.Engine).InjectTrap()
		time.Sleep(time.Duration(10+rng.IntN(30)) * time.Millisecond) // likewise
	}
	leader := waitLeader(t, tas, nil, "")
	close(stop)
	wg.Wait()

	var traps uint64
	for _, ta := range tas {
		traps += ta.ag.Stats().Traps
	}
	if traps == 0 || trapsSeen.Load() != int64(traps) {
		t.Fatalf("traps: stats %d, OnTrap %d", traps, trapsSeen.Load())
	}
	vmu.Lock()
	defer vmu.Unlock()
	if len(doubleVote) > 0 {
		t.Fatalf("double votes: %v", doubleVote)
	}
	if len(regress) > 0 {
		t.Fatalf("term regressions: %v", regress)
	}
	t.Logf("%d traps recovered; %d votes observed; leader %s at term %d", traps, len(votes), leader.id, leader.el.Status().Term)
}
