package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
)

// Trace is everything each node's engine was given and gave back, in order:
// enough to replay a run against another implementation and compare it byte
// for byte (see Replay).
type Trace struct {
	Nodes []NodeTrace `json:"nodes"`
}

// NodeTrace is one node's steps over all its lives.
type NodeTrace struct {
	ID    string      `json:"id"`
	Steps []TraceStep `json:"steps"`
}

// TraceStep is one Stepper.Step call.
type TraceStep struct {
	AtMs int64 `json:"at_ms"` // real (simulated) time
	// Fresh: a new Stepper was made for this step (first start or restart);
	// the Input then carries the Join with the persisted state.
	Fresh  bool       `json:"fresh"`
	Input  core.Input `json:"input"`
	Output []byte     `json:"output"` // msgp-encoded core.Output
}

func (t *Trace) add(node int, at int64, fresh bool, in *core.Input, out []byte) {
	cp := core.Input{Now: in.Now, Wall: in.Wall, Join: slices.Clone(in.Join),
		Inbound: slices.Clone(in.Inbound), Commands: slices.Clone(in.Commands)}
	nt := &t.Nodes[node]
	nt.Steps = append(nt.Steps, TraceStep{AtMs: at, Fresh: fresh, Input: cp, Output: slices.Clone(out)})
}

// Hash is the TraceHash of the trace: SHA-256 over every output in the
// order the simulator produced them (by time, then node).
func (t *Trace) Hash() string {
	type ref struct {
		at   int64
		node int
		i    int
	}
	var all []ref
	for n, nt := range t.Nodes {
		for i, s := range nt.Steps {
			all = append(all, ref{s.AtMs, n, i})
		}
	}
	slices.SortStableFunc(all, func(a, b ref) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.node - b.node
	})
	h := sha256.New()
	for _, r := range all {
		writeStep(h, r.node, t.Nodes[r.node].Steps[r.i].Output)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeStep(h hash.Hash, node int, out []byte) {
	var hdr [8]byte
	hdr[0], hdr[1], hdr[2], hdr[3] = byte(node), byte(node>>8), byte(node>>16), byte(node>>24)
	l := len(out)
	hdr[4], hdr[5], hdr[6], hdr[7] = byte(l), byte(l>>8), byte(l>>16), byte(l>>24)
	h.Write(hdr[:])
	h.Write(out)
}

// Replay feeds every node's recorded inputs to engines made by newStepper (a
// fresh one at every Fresh step) and compares each output, msgp-encoded, with
// the recorded bytes. It returns the first difference.
func (t *Trace) Replay(newStepper func(id string) (Stepper, error)) error {
	for _, nt := range t.Nodes {
		var st Stepper
		for i := range nt.Steps {
			s := &nt.Steps[i]
			if s.Fresh || st == nil {
				closeStepper(st)
				var err error
				if st, err = newStepper(nt.ID); err != nil {
					return err
				}
			}
			in := s.Input
			var out core.Output
			if err := st.Step(&in, &out); err != nil {
				closeStepper(st)
				return fmt.Errorf("replay %s step %d (t=%d): %w", nt.ID, i, s.AtMs, err)
			}
			got, _ := abi.EncodeOutput(nil, &out)
			if !bytes.Equal(got, s.Output) {
				closeStepper(st)
				var want core.Output
				abi.UnmarshalOutput(s.Output, &want)
				return fmt.Errorf("replay %s step %d (t=%d): output differs\n input: %s\n  want: %s\n   got: %s",
					nt.ID, i, s.AtMs, FormatInput(&s.Input), FormatOutput(&want), FormatOutput(&out))
			}
		}
		closeStepper(st)
	}
	return nil
}

func closeStepper(st Stepper) {
	if c, ok := st.(interface{ Close() error }); ok {
		c.Close()
	}
}

// excerpt renders the steps of the given nodes between from and to (real
// ms), at most max lines (the last ones).
func (t *Trace) excerpt(ids []string, from, to int64, max int) string {
	type line struct {
		at   int64
		node int
		s    string
	}
	var lines []line
	for n, nt := range t.Nodes {
		if len(ids) > 0 && !slices.Contains(ids, nt.ID) {
			continue
		}
		for _, s := range nt.Steps {
			if s.AtMs < from || s.AtMs > to {
				continue
			}
			var out core.Output
			abi.UnmarshalOutput(s.Output, &out)
			txt := fmt.Sprintf("%7d %s now=%d %s → %s", s.AtMs, nt.ID, s.Input.Now, FormatInput(&s.Input), FormatOutput(&out))
			lines = append(lines, line{s.AtMs, n, txt})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.node - b.node
	})
	if len(lines) > max {
		lines = lines[len(lines)-max:]
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.s)
		b.WriteByte('\n')
	}
	return b.String()
}

// FormatInput renders an Input on one line.
func FormatInput(in *core.Input) string {
	var parts []string
	for _, j := range in.Join {
		parts = append(parts, fmt.Sprintf("join(term=%d vote=%q)", j.State.Term, j.State.Vote))
	}
	for _, m := range in.Inbound {
		parts = append(parts, "in "+string(m.Payload))
	}
	for _, c := range in.Commands {
		s := "cmd " + c.Kind.String()
		if c.Target != "" {
			s += " to " + c.Target
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "tick"
	}
	return strings.Join(parts, " ")
}

// FormatOutput renders an Output on one line.
func FormatOutput(out *core.Output) string {
	var parts []string
	for _, p := range out.Persist {
		parts = append(parts, fmt.Sprintf("persist(term=%d vote=%q)", p.Term, p.Vote))
	}
	for _, p := range out.Publishes {
		parts = append(parts, "pub "+string(p.Payload))
	}
	for _, e := range out.Events {
		s := "ev " + e.Kind.String() + " term=" + uitoa(e.Term)
		if e.Leader != "" {
			s += " leader=" + e.Leader
		}
		if e.LeaseUntil != 0 {
			s += " lease=" + itoa(e.LeaseUntil)
		}
		if e.Reason != "" {
			s += " (" + e.Reason + ")"
		}
		parts = append(parts, s)
	}
	if out.WakeAt != 0 {
		parts = append(parts, "wake "+itoa(out.WakeAt))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func uitoa(v uint64) string { return strconv.FormatUint(v, 10) }
func itoa(v int64) string   { return strconv.FormatInt(v, 10) }

// chain hashes a sequence of hex hashes.
type chain struct{ h hash.Hash }

func newChain() chain          { return chain{sha256.New()} }
func (c chain) add(hex string) { c.h.Write([]byte(hex)) }
func (c chain) sum() string    { return hex.EncodeToString(c.h.Sum(nil)) }
