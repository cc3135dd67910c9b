package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport/nats"
	"github.com/electcore/electcore/transport/natstest"
	"github.com/electcore/electcore/transport/transporttest"
)

// manyStatus is an agent's GET /status with several groups.
func (p *agentProc) manyStatus() (manyStatusJSON, error) {
	var s manyStatusJSON
	return s, p.getJSON("/status", &s)
}

// bestOf is the member of live that ranks first in group by the balanced
// priorities (core.RendezvousPriority).
func bestOf(group string, live []string) string {
	best := ""
	for _, id := range live {
		if best == "" || core.RendezvousPriority(group, id) > core.RendezvousPriority(group, best) {
			best = id
		}
	}
	return best
}

// waitBalanced waits until, in every group, every live agent names the same
// leader, at one term, that leader says it leads, every live agent calls the
// group ready, and the leader is the best live member by the balanced
// priorities (a first winner that is not hands over to it). It returns each
// group's leader and term.
func (c *cluster) waitBalanced(groups, live []string, within time.Duration) (map[string]string, map[string]uint64) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var why string
	for time.Now().Before(deadline) {
		leaders, terms := map[string]string{}, map[string]uint64{}
		roles := map[string]string{} // group/id → role
		ok := true
		why = ""
		for _, id := range live {
			s, err := c.proc(id).manyStatus()
			if err != nil {
				ok, why = false, id+": "+err.Error()
				break
			}
			for _, l := range s.List {
				roles[l.Group+"/"+id] = l.Role
				if !l.Ready {
					ok, why = false, fmt.Sprintf("%s: %s not ready: %s", id, l.Group, l.ReadyReason)
				}
				if prev, seen := leaders[l.Group]; seen && (prev != l.Leader || terms[l.Group] != l.Term) {
					ok, why = false, fmt.Sprintf("%s: %s led by %s at %d, another agent says %s at %d", id, l.Group, l.Leader, l.Term, prev, terms[l.Group])
				}
				leaders[l.Group], terms[l.Group] = l.Leader, l.Term
			}
		}
		for _, g := range groups {
			if want := bestOf(g, live); ok && (leaders[g] != want || roles[g+"/"+want] != "leader") {
				ok, why = false, fmt.Sprintf("%s led by %q, not (yet) by its best live member %s", g, leaders[g], want)
			}
		}
		if ok {
			return leaders, terms
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("the groups did not settle on their best live members within %v: %s", within, why)
	return nil, nil
}

// TestE2EManyGroups: three `electhost run` processes over the embedded NATS
// server, each joining six groups (one --group and a --groups-file): every
// group is led by the best of the three by the balanced priorities, two
// groups each; each group's leader runs the leader-only command
// with ELECT_GROUP naming that group (each group's commands lock a directory
// of their own, chosen by ELECT_GROUP, and never overlap); /readyz, /status
// and /metrics answer for all groups and for one (?group=G), with no metric
// series per group; after kill -9 of the agent leading the most groups, its
// groups go to the best survivor of each, whose command then runs.
func TestE2EManyGroups(t *testing.T) {
	t.Parallel()
	url, _ := natstest.Start(t)
	// Six groups and their commands per process: twice the single-group
	// tests' timings, so that a loaded runner (or -race) keeps the leases.
	c := newCluster(t, 3, []string{"--transport", "nats", "--broker", url}, []string{"ELECTHOST_TEST_PER_GROUP=1"},
		200*time.Millisecond, 1200*time.Millisecond, 20*time.Millisecond)
	// By the balanced priorities each of a1, a2, a3 ranks first in two.
	groups := []string{c.group, "orders", "billing", "mail", "queue", "index"}
	file := filepath.Join(c.root, "groups")
	os.WriteFile(file, []byte("# the groups besides --group\n"+strings.Join(groups[1:], "\n")+"\n\n"), 0o644)
	for _, id := range c.ids {
		c.startWith(id, c.ids, "--groups-file", file)
	}
	leaders, terms := c.waitBalanced(groups, c.ids, time.Minute)
	perAgent := map[string][]string{}
	for _, g := range groups {
		perAgent[leaders[g]] = append(perAgent[leaders[g]], g)
		c.waitCommandIn(filepath.Join(c.shared, g), leaders[g], terms[g], time.Minute)
	}
	t.Logf("leaders: %v", perAgent)
	if len(perAgent) != len(c.ids) {
		t.Fatalf("not every agent leads a group: %v", perAgent)
	}

	p := c.proc(c.ids[0])
	if code, body, err := p.get("/readyz"); err != nil || code != 200 || !strings.Contains(body, "6 groups") {
		t.Fatalf("/readyz: %d %v %q", code, err, body)
	}
	if code, body, err := p.get("/readyz?group=orders"); err != nil || code != 200 || !strings.Contains(body, "orders") {
		t.Fatalf("/readyz?group=orders: %d %v %q", code, err, body)
	}
	if code, _, err := p.get("/readyz?group=nosuch"); err != nil || code != 404 {
		t.Fatalf("/readyz?group=nosuch: %d %v, want 404", code, err)
	}
	var one statusJSON
	if code, body, err := p.get("/status?group=billing"); err != nil || code != 200 || json.Unmarshal([]byte(body), &one) != nil ||
		one.Group != "billing" || one.Leader != leaders["billing"] || one.Priority != core.RendezvousPriority("billing", c.ids[0]) {
		t.Fatalf("/status?group=billing: %d %v %+v", code, err, one)
	}
	code, metricsBody, err := p.get("/metrics")
	if err != nil || code != 200 || !strings.Contains(metricsBody, `electcore_groups{id="a1"} 6`) ||
		!strings.Contains(metricsBody, fmt.Sprintf(`electcore_groups_led{id="a1"} %d`, len(perAgent["a1"]))) ||
		strings.Contains(metricsBody, `group="`) {
		t.Fatalf("/metrics: %d %v: want electcore_groups 6, groups_led %d and no group label:\n%s", code, err, len(perAgent["a1"]), metricsBody)
	}

	// kill -9 the agent leading the most groups.
	victim := c.ids[0]
	for _, id := range c.ids {
		if len(perAgent[id]) > len(perAgent[victim]) {
			victim = id
		}
	}
	c.signal(victim, syscall.SIGKILL)
	c.waitExit(victim, time.Minute)
	live := slices.DeleteFunc(slices.Clone(c.ids), func(id string) bool { return id == victim })
	t0 := time.Now()
	after, afterTerms := c.waitBalanced(groups, live, time.Minute)
	t.Logf("kill -9 %s (leading %v): its groups led again by their best survivors after %v: %v", victim, perAgent[victim], time.Since(t0).Round(time.Millisecond), after)
	for _, g := range perAgent[victim] {
		if afterTerms[g] <= terms[g] {
			t.Fatalf("%s: led by %s at term %d after the kill, not above %d", g, after[g], afterTerms[g], terms[g])
		}
		c.waitCommandIn(filepath.Join(c.shared, g), after[g], afterTerms[g], time.Minute)
	}

	for _, id := range live {
		c.signal(id, syscall.SIGTERM)
	}
	for _, id := range live {
		if code := c.waitExit(id, time.Minute); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", id, code)
		}
	}
	for _, g := range groups {
		c.checkCommandLogIn(filepath.Join(c.shared, g))
	}
	// Every command found its group's directory by ELECT_GROUP: none ran
	// without it, in the shared directory.
	if lines := readLines(filepath.Join(c.shared, "log")); len(lines) > 0 {
		t.Fatalf("commands ran without ELECT_GROUP:\n%s", strings.Join(lines, "\n"))
	}
}

// TestRunManyGroupsErrors: a bad --groups-file or --group list, and the
// flags that serve one group only, are refused with one error line (exit 2)
// before anything is touched: the state directory is not created.
func TestRunManyGroupsErrors(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(tmp, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	good := file("good", "g1\ng2\n")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no such file", []string{"--groups-file", filepath.Join(tmp, "absent")}, "--groups-file"},
		{"a directory", []string{"--groups-file", tmp}, "--groups-file"},
		{"bad name", []string{"--groups-file", file("bad", "# ok\ng1\nno spaces allowed\n")}, "line 3"},
		{"group twice in the file", []string{"--groups-file", file("twice", "g1\ng2\ng1\n")}, `group "g1" is given twice (first at --groups-file ` + tmp + `/twice line 1)`},
		{"group in flag and file", []string{"--group", "g2", "--groups-file", good}, `"g2" is given twice (first at --group)`},
		{"group flag twice", []string{"--group", "g1", "--group", "g1"}, "given twice"},
		{"empty file", []string{"--groups-file", file("empty", "# nothing\n\n")}, "names no group"},
		{"no group at all", nil, "--group is required"},
		{"once with several", []string{"--groups-file", good, "--once", "--", "true"}, "--once is for an agent of one group"},
		{"join with several", []string{"--groups-file", good, "--join"}, "--join is for an agent of one group"},
		{"check with several", []string{"--groups-file", good, "--check", "true"}, "--check is for an agent of one group"},
	}
	// A group that an agent of it alone ran keeps its state in a
	// directory of its own (defaultStateDir): joining it with several
	// groups elsewhere would forget its term and vote.
	xdg := filepath.Join(tmp, "xdg")
	stateFile, _ := statestore.FileName(host.StateName("a", "g2"))
	own := filepath.Join(xdg, "electcore", "a", "g2")
	os.MkdirAll(own, 0o700)
	os.WriteFile(filepath.Join(own, stateFile), []byte("{}"), 0o600)
	env := []string{"XDG_STATE_HOME=" + xdg}
	t.Run("state of one group elsewhere", func(t *testing.T) {
		state := filepath.Join(tmp, "state-elsewhere")
		code, _, stderr := runCLI(t, 30*time.Second, env, "run", "--id", "a", "--members", "a,b,c", "--state-dir", state, "--broker", "nats://127.0.0.1:1", "--groups-file", good)
		if code != exitConfig {
			t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitConfig, stderr)
		}
		oneErrorLine(t, stderr, "group g2's state (term and vote) is in "+own)
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Fatalf("the state directory exists after a refusal (%v)", err)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state := filepath.Join(tmp, "state-"+strings.ReplaceAll(c.name, " ", "-"))
			args := append([]string{"run", "--id", "a", "--members", "a,b,c", "--state-dir", state, "--broker", "nats://127.0.0.1:1"}, c.args...)
			code, _, stderr := runCLI(t, 30*time.Second, nil, args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			oneErrorLine(t, stderr, c.want)
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Fatalf("the state directory exists after a refusal (%v)", err)
			}
		})
	}
}

// Agents in 16 groups or more send their heartbeats in envelopes on the
// peer topic: status hears no leader on the group's topic alone, and hears
// it with --members.
func TestE2EStatusHearsCoalescedHeartbeats(t *testing.T) {
	t.Parallel()
	url, _ := natstest.Start(t)
	ctx := context.Background()
	ids := []string{"a1", "a2", "a3"}
	var agents []*host.Agent
	for _, id := range ids {
		tr, err := nats.New(nats.Options{URL: url, Name: id})
		if err != nil {
			t.Fatal(err)
		}
		ag, err := host.NewNativeAgent(ctx, host.AgentConfig{Transport: tr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ag.Close(ctx); tr.Close() })
		specs := make([]host.JoinSpec, 16)
		for i := range specs {
			specs[i] = host.JoinSpec{Config: core.Config{ID: id, Group: fmt.Sprintf("c%02d", i), Members: ids, HeartbeatMs: 200, ElectionTimeoutMs: 1200}}
		}
		if _, errs := ag.JoinAll(ctx, specs); errs[0] != nil {
			t.Fatal(errs[0])
		}
		agents = append(agents, ag)
	}
	transporttest.WaitFor(t, "every agent sends heartbeats or acks in envelopes", func() bool {
		for _, ag := range agents {
			if ag.Stats().Coalesced < 100 {
				return false
			}
		}
		return true
	})
	base := []string{"status", "--group", "c00", "--heartbeat", "200ms", "--wait", "1s", "--transport", "nats", "--broker", url}
	// An election on a loaded machine announces its leader on the group's
	// topic: a window that hears one is tried again. Heartbeats on the
	// group's topic would be heard in every window.
	var outs []string
	for range 5 {
		code, out, _ := runCLI(t, 30*time.Second, nil, base...)
		if code == 1 {
			break
		}
		outs = append(outs, fmt.Sprintf("exit %d:\n%s", code, out))
	}
	if len(outs) == 5 {
		t.Fatalf("status on the group's topic alone heard a leader in 5 windows of 1 s, want none (exit 1):\n%s", strings.Join(outs, "\n"))
	}
	code, out, errOut := runCLI(t, 30*time.Second, nil, append(base, "--members", strings.Join(ids, ","))...)
	if code != 0 || !strings.Contains(out, "leader") {
		t.Fatalf("status --members: exit %d, want 0 (a leader heard):\n%s\n%s", code, out, errOut)
	}
}
