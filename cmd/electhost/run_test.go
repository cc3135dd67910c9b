package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
)

func TestDeriveTiming(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name                 string
		mode                 core.Mode
		hb, et, lease, grace time.Duration
		cmd                  bool
		wantLease            int64
		wantGrace            time.Duration
		wantErr              string
	}{
		// ET 2000, drift 1%: max lease 2000×0.99/1.01−1 = 1959 ms.
		{name: "defaults, no command", mode: core.ModeQuorum, hb: 500 * ms, wantLease: 0, wantGrace: 500 * ms},
		{name: "defaults, command", mode: core.ModeQuorum, hb: 500 * ms, cmd: true, wantLease: 1959 - 500 - 50, wantGrace: 500 * ms},
		{name: "test timings, command", mode: core.ModeQuorum, hb: 100 * ms, et: 600 * ms, cmd: true, wantLease: 587 - 150 - 50, wantGrace: 150 * ms},
		{name: "grace given", mode: core.ModeQuorum, hb: 100 * ms, et: 600 * ms, grace: 300 * ms, cmd: true, wantLease: 587 - 300 - 50, wantGrace: 300 * ms},
		{name: "lease given", mode: core.ModeQuorum, hb: 100 * ms, et: 600 * ms, lease: 200 * ms, cmd: true, wantLease: 200, wantGrace: 337 * ms},
		{name: "both given, fit", mode: core.ModeQuorum, hb: 100 * ms, et: 600 * ms, lease: 200 * ms, grace: 300 * ms, cmd: true, wantLease: 200, wantGrace: 300 * ms},
		{name: "both given, too long", mode: core.ModeQuorum, hb: 100 * ms, et: 600 * ms, lease: 300 * ms, grace: 300 * ms, cmd: true, wantErr: "--lease 300ms: want 2×--heartbeat (200ms)..237ms"},
		{name: "grace leaves lease below heartbeat", mode: core.ModeQuorum, hb: 100 * ms, et: 600 * ms, grace: 450 * ms, cmd: true, wantErr: "--grace 450ms: want at most 337ms"},
		{name: "lease leaves no grace", mode: core.ModeQuorum, hb: 100 * ms, et: 600 * ms, lease: 587 * ms, cmd: true, wantErr: "leaves no time"},
		{name: "bully keeps no lease", mode: core.ModeBully, hb: 100 * ms, et: 600 * ms, cmd: true, wantLease: 0, wantGrace: 150 * ms},
		{name: "et below 3 heartbeats", mode: core.ModeQuorum, hb: 500 * ms, et: time.Second, wantErr: "--election-timeout 1s: want 3×--heartbeat (1.5s)"},
		{name: "no heartbeat", mode: core.ModeQuorum, wantErr: "--heartbeat"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm, err := deriveTiming(c.mode, c.hb, c.et, c.lease, c.grace, c.cmd)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tm.leaseMs != c.wantLease || tm.grace != c.wantGrace {
				t.Fatalf("lease %d ms, grace %v; want %d ms, %v", tm.leaseMs, tm.grace, c.wantLease, c.wantGrace)
			}
			if c.cmd && c.mode == core.ModeQuorum {
				// The derived config is valid for the core.
				cfg := core.Config{ID: "a", Group: "g", Members: []string{"a"}, HeartbeatMs: tm.heartbeatMs, ElectionTimeoutMs: tm.electionTimeoutMs, LeaseMs: tm.leaseMs}
				if err := cfg.Validate(); err != nil {
					t.Fatalf("core rejects the derived timing: %v", err)
				}
			}
		})
	}
}

func TestDefaultID(t *testing.T) {
	id := defaultID()
	if err := (core.Config{ID: id, Group: "g", Mode: core.ModeBully}).Validate(); err != nil {
		t.Fatalf("default id %q is not a valid id: %v", id, err)
	}
}

func TestExecuteExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"version"}, 0},
		{[]string{"nope"}, exitUsage},
		{[]string{"sim", "--mode", "paxos"}, exitUsage},
		{[]string{"status", "--group", "g", "--transport", "smoke"}, exitUsage},
	} {
		var out, errb bytes.Buffer
		if got := execute(context.Background(), c.args, &out, &errb); got != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, got, c.code, errb.String())
		}
	}
}

func TestObserver(t *testing.T) {
	o := newObserver("g")
	for _, p := range []string{
		`{"type":"election","candidate":"b","priority":7,"term":3}`,
		`{"type":"leader","leader":"b","term":3,"elected_at":"x"}`,
		`{"type":"heartbeat","leader":"b","term":3,"timestamp":"1"}`,
		`{"type":"ack","group":"g","from":"a","term":3}`,
		`{"type":"heartbeat","group":"other","leader":"z","term":9}`,
		`not json`,
	} {
		o.deliver(msg(p))
	}
	r := o.report(time.Second)
	if r.Leader != "b" || r.Term != 3 || len(r.Members) != 2 || r.Rejected != 2 || r.Messages != 4 {
		t.Fatalf("report %+v", r)
	}
	if r.Members[1].Priority == nil || *r.Members[1].Priority != 7 {
		t.Fatalf("priority of b not kept: %+v", r.Members[1])
	}
	var b bytes.Buffer
	r.print(&b)
	if !strings.Contains(b.String(), "b (term 3)") || r.Config != nil {
		t.Fatalf("print:\n%s\nconfig %+v", b.String(), r.Config)
	}

	// A quorum leader's heartbeats carry the configuration's version; its
	// member set comes from the config message of that version.
	o.deliver(msg(`{"type":"config","group":"g","from":"b","inc":1,"conf_term":3,"conf_index":4,"members":["a","b","c","d"]}`))
	o.deliver(msg(`{"type":"heartbeat","group":"g","from":"b","leader":"b","term":3,"seq":9,"conf_term":3,"conf_index":4,"committed":true}`))
	r = o.report(time.Second)
	if c := r.Config; c == nil || c.ConfIndex != 4 || c.ConfTerm != 3 || !c.Committed || len(c.Members) != 4 {
		t.Fatalf("config %+v", r.Config)
	}
	b.Reset()
	r.print(&b)
	if !strings.Contains(b.String(), "config   4 (term 3), committed; members a,b,c,d") {
		t.Fatalf("print:\n%s", b.String())
	}
}

func msg(p string) transport.Message {
	return transport.Message{Topic: "election:g", Payload: []byte(p)}
}

// TestDefaultStateDirPerGroup: the default state directory is per id and
// group, except for a group whose state an agent saved in the per-id
// directory before, which keeps it (its term and vote must not be lost).
func TestDefaultStateDirPerGroup(t *testing.T) {
	base := t.TempDir()
	t.Setenv("XDG_STATE_HOME", base)
	perID := filepath.Join(base, "electcore", "a")
	if got, want := defaultStateDir("a", "g"), filepath.Join(perID, "g"); got != want {
		t.Fatalf("defaultStateDir = %s, want %s", got, want)
	}
	if got, want := defaultStateDir("x/y", "p/q"), filepath.Join(base, "electcore", "x_y", "p_q"); got != want {
		t.Fatalf("defaultStateDir = %s, want %s", got, want)
	}
	file, err := statestore.FileName(host.StateName("a", "old"))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(perID, 0o700)
	if err := os.WriteFile(filepath.Join(perID, file), []byte("state"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := defaultStateDir("a", "old"); got != perID {
		t.Fatalf("defaultStateDir of a group saved per id = %s, want %s", got, perID)
	}
	if got, want := defaultStateDir("a", "new"), filepath.Join(perID, "new"); got != want {
		t.Fatalf("defaultStateDir = %s, want %s", got, want)
	}
}
