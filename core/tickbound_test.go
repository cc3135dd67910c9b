package core

import (
	"strconv"
	"strings"
	"testing"
)

// joinCohort joins groups g-first .. g-(first+n-1) on e as id, at now.
func joinCohort(t *testing.T, e *Engine, id string, prio uint32, first, n int, now int64) {
	t.Helper()
	in := Input{Now: now}
	for i := first; i < first+n; i++ {
		in.Join = append(in.Join, GroupSpec{Config: Config{ID: id, Priority: prio, Group: "g-" + strconv.Itoa(i), Members: []string{"a", "b", "c"}}})
	}
	var out Output
	e.Step(&in, &out)
	for _, ev := range out.Events {
		if ev.Kind == EventRejected {
			t.Fatalf("join refused: %s", ev.Reason)
		}
	}
}

// groupsPublishing is the set of group numbers with a publish in out.
func groupsPublishing(out *Output) map[int]bool {
	seen := map[int]bool{}
	for _, m := range out.Publishes {
		n, err := strconv.Atoi(strings.TrimPrefix(string(m.Topic), Topic("g-")))
		if err == nil {
			seen[n] = true
		}
	}
	return seen
}

// After a stall every group's timer can be due at once; one Step runs the
// oldest maxTicksPerStep of them and asks to be called again at once for the
// rest, so no single Step grows with the number of groups.
func TestStepRunsAtMostMaxTicksDueTimers(t *testing.T) {
	e := NewEngine()
	e.maxCampaigns = 1 << 30 // the bound on ticks alone (admission bounds campaigns further)
	et := int64(DefaultElectionTimeoutMs)
	// Two cohorts, joined half an election timeout apart (the second before
	// any timer of the first is due): every deadline of the first comes
	// before every deadline of the second.
	joinCohort(t, e, "b", 0, 0, maxTicksPerStep, 1)
	joinCohort(t, e, "b", 0, maxTicksPerStep, 2000, 1+et/2)

	now := 1 + 20*et // every campaign long due
	var ticked []int
	for step := 0; ; step++ {
		var out Output
		e.Step(&Input{Now: now}, &out)
		got := groupsPublishing(&out)
		if len(got) == 0 {
			if out.WakeAt <= now {
				t.Fatalf("step %d: nothing ran, yet WakeAt %d is not after now %d", step, out.WakeAt, now)
			}
			break
		}
		if len(got) > maxTicksPerStep {
			t.Fatalf("step %d ran %d timers, more than %d", step, len(got), maxTicksPerStep)
		}
		if left := maxTicksPerStep + 2000 - len(ticked) - len(got); left > 0 && out.WakeAt > now {
			t.Fatalf("step %d left %d timers due but WakeAt %d is after now %d", step, left, out.WakeAt, now)
		}
		if step == 0 {
			for g := range got {
				if g >= maxTicksPerStep {
					t.Fatalf("first step ran group %d of the later cohort before the older one finished", g)
				}
			}
		}
		for g := range got {
			ticked = append(ticked, g)
		}
	}
	if len(ticked) != maxTicksPerStep+2000 {
		t.Fatalf("%d groups campaigned over the steps, want %d", len(ticked), maxTicksPerStep+2000)
	}
}

// The bound is on timers, not on leases (Ongaro's thesis §6.4.1: a leader
// must stop acting when its lease ends): a leader of more groups than two
// bounded passes reach, stalled past its leases, steps down in every group
// in its first Step back.
func TestStalledLeaderOfManyGroupsStepsDownInOneStep(t *testing.T) {
	const n = 2*maxTicksPerStep + 500
	ids := []string{"a", "b", "c"}
	engines := map[string]*Engine{}
	for i, id := range ids {
		engines[id] = NewEngine()
		joinCohort(t, engines[id], id, uint32(3-i), 0, n, 1)
	}
	leads := map[string]bool{}
	var pending []Message
	now := int64(1)
	for len(leads) < n {
		if now > 60_000 {
			t.Fatalf("a leads %d of %d groups after 60 s", len(leads), n)
		}
		now += 10
		var next []Message
		for _, id := range ids {
			var out Output
			e := engines[id]
			e.Step(&Input{Now: now, Inbound: pending}, &out)
			next = append(next, out.Publishes...)
			if id != "a" {
				continue
			}
			for _, ev := range out.Events {
				switch ev.Kind {
				case EventLease:
					leads[ev.Group] = true
				case EventSteppedDown:
					delete(leads, ev.Group)
				}
			}
		}
		pending = next
	}
	// a stalls (no Step) well past every lease, then steps once.
	var out Output
	engines["a"].Step(&Input{Now: now + 10*int64(DefaultElectionTimeoutMs)}, &out)
	down := 0
	for _, ev := range out.Events {
		if ev.Kind == EventSteppedDown {
			down++
		}
	}
	if down != n {
		t.Fatalf("a stepped down in %d of %d groups in its first Step after the stall", down, n)
	}
}
