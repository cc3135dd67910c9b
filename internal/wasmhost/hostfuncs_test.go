package wasmhost

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
	"github.com/electcore/electcore/internal/testwasm"
)

// TestHostDriven drives the host-driven build the way a skill runner would:
// it supplies now/publish/persist/event/log and calls hd_join, hd_deliver and
// hd_tick; three such nodes elect one leader, persisting before publishing,
// then add a fourth member with hd_command (add-member): the config events
// and hd_status carry the configuration.
func TestHostDriven(t *testing.T) {
	ctx := context.Background()
	r, err := NewRuntime(ctx, Config{WasmPath: testwasm.HostDriven(t), CacheDir: testwasm.CacheDir(), Logger: testwasm.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if !r.HostDriven() {
		t.Fatal("module does not import the electcore functions")
	}
	ids := []string{"h1", "h2", "h3"}
	type msg struct {
		to             int
		topic, payload string
	}
	var (
		now     int64
		queue   []msg
		leaders = map[string]uint64{}
		configs = map[string]string{} // node -> its last committed config event
	)
	type node struct {
		inst      *Instance
		due       int64
		persisted map[string][]byte
		published int
	}
	nodes := make([]*node, len(ids))
	var step func()
	for i, id := range ids {
		inst, err := r.NewInstance(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close(ctx)
		n := &node{inst: inst, persisted: map[string][]byte{}}
		nodes[i] = n
		inst.SetHostFuncs(&HostFuncs{
			Now: func() int64 { return now },
			Publish: func(topic string, payload []byte) error {
				n.published++
				for to := range ids {
					if to != i {
						queue = append(queue, msg{to, topic, string(payload)})
					}
				}
				return nil
			},
			Persist: func(group string, state []byte) error {
				if n.published > 0 && group == "" {
					t.Error("persist without a group")
				}
				n.persisted[group] = state
				return nil
			},
			Event: func(b []byte) {
				var ev struct {
					Kind      string   `json:"kind"`
					Group     string   `json:"group"`
					Term      uint64   `json:"term"`
					Reason    string   `json:"reason"`
					Members   []string `json:"members"`
					ConfIndex uint64   `json:"conf_index"`
				}
				if err := json.Unmarshal(b, &ev); err != nil {
					t.Errorf("event %s: %v", b, err)
				}
				if ev.Kind == "became-leader" {
					leaders[id] = ev.Term
				}
				if ev.Kind == "config" && ev.Reason == "committed" && ev.ConfIndex > 0 {
					configs[id] = fmt.Sprint(ev.Members)
				}
			},
			Log: func(level int32, m string) { t.Logf("%s log %d: %s", id, level, m) },
		})
		cfg, _ := abi.MarshalConfig(nil, &core.Config{ID: id, Group: "hg", Members: ids, HeartbeatMs: 20, ElectionTimeoutMs: 100})
		d, err := inst.HD("hd_join", cfg, uint64(len(cfg)), 0)
		if err != nil {
			t.Fatal(err)
		}
		n.due = now + d
	}
	run := func(until int64, done func() bool) {
		for ; now < until && !done(); now += 5 {
			step()
		}
	}
	step = func() {
		q := queue
		queue = nil
		for _, m := range q {
			in := append([]byte(m.topic), m.payload...)
			d, err := nodes[m.to].inst.HD("hd_deliver", in, uint64(len(m.topic)), uint64(len(m.payload)))
			if err != nil {
				t.Fatal(err)
			}
			nodes[m.to].due = now + d
		}
		for _, n := range nodes {
			if n.due <= now {
				d, err := n.inst.HD("hd_tick", nil)
				if err != nil {
					t.Fatal(err)
				}
				n.due = now + d
			}
		}
	}
	run(2000, func() bool { return len(leaders) > 0 })
	if len(leaders) != 1 {
		t.Fatalf("leaders %v", leaders)
	}
	var leader int
	for i, id := range ids {
		if _, ok := leaders[id]; ok {
			leader = i
		}
	}
	cmd := func(kind uint64, target string) error {
		in := append([]byte("hg"), target...)
		d, err := nodes[leader].inst.HD("hd_command", in, kind, 2, uint64(len(target)))
		nodes[leader].due = now + d
		return err
	}
	if err := cmd(uint64(core.CmdAddMember), "h5 not-base64!"); err == nil {
		t.Fatal("hd_command add-member with a bad key: no error")
	}
	if err := cmd(uint64(core.CmdAddMember), "h4"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]string{"h1", "h2", "h3", "h4"})
	run(now+2000, func() bool {
		return len(configs) == 3 && configs["h1"] == want && configs["h2"] == want && configs["h3"] == want
	})
	if len(configs) != 3 || configs["h1"] != want || configs["h2"] != want || configs["h3"] != want {
		t.Fatalf("committed config events %v, want %s everywhere", configs, want)
	}
	for i, n := range nodes {
		b, err := n.inst.HDStatus("hg")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			ID      string `json:"id"`
			Role    string `json:"role"`
			Leader  string `json:"leader"`
			Term    uint64 `json:"term"`
			Members []struct {
				ID string `json:"id"`
			} `json:"members"`
			ConfIndex     uint64 `json:"conf_index"`
			ConfCommitted bool   `json:"conf_committed"`
			Voter         bool   `json:"voter"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("hd_status %s: %v", b, err)
		}
		if st.ID != ids[i] || st.Term == 0 || len(st.Members) != len(ids)+1 || st.ConfIndex < 2 || !st.ConfCommitted || !st.Voter ||
			(st.Role == "leader") != (st.Leader == ids[i]) {
			t.Fatalf("hd_status of %s: %s", ids[i], b)
		}
	}
	if _, err := nodes[0].inst.HDStatus("nope"); err == nil {
		t.Fatal("hd_status of a group not joined: no error")
	}
	for i, n := range nodes {
		var st core.GroupState
		if _, err := abi.UnmarshalState(n.persisted["hg"], &st); err != nil || st.Term == 0 {
			t.Fatalf("%s persisted %+v %v", ids[i], st, err)
		}
	}
	t.Logf("host-driven: leader %v after %d ms", leaders, now)
}
