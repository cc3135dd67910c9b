package main

import (
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2EWrongKeyWarns: a member started with another HMAC group key than
// the others never joins; every agent says so at info level, naming the
// sender and the likely cause, at most once per election timeout, and
// /readyz says it too.
func TestE2EWrongKeyWarns(t *testing.T) {
	t.Parallel()
	// 200 ms / 1.2 s: the warnings' pace is checked against the election
	// timeout, whatever it is, and at 100 ms / 600 ms a loaded runner loses
	// leases.
	c, _ := newNATSCluster(t, 200*time.Millisecond, 1200*time.Millisecond)
	c.group = "e2e-wrongkey"
	dir := t.TempDir()
	keyFile := func(name string) string {
		k := make([]byte, 32)
		rand.Read(k)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(k)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	group, wrong := keyFile("group.key"), keyFile("wrong.key")
	a1, a2, a3 := c.ids[0], c.ids[1], c.ids[2]
	c.startWith(a1, c.ids, "--key", group, "--log-level", "info")
	c.startWith(a2, c.ids, "--key", group, "--log-level", "info")
	c.startWith(a3, c.ids, "--key", wrong, "--log-level", "info")

	const what = "messages fail authentication"
	first := c.waitLog(a1, what, time.Minute)
	if first["from"] != a3 || !strings.Contains(first["msg"].(string), a3+" signs with a different group key") {
		t.Fatalf("a1's warning does not name a3 and the cause: %v", first)
	}
	w3 := c.waitLog(a3, what, time.Minute)
	if from := w3["from"]; from != a1 && from != a2 {
		t.Fatalf("a3's warning names %v, want a1 or a2", w3)
	}

	// /readyz of a member that hears a3's refused messages, and of a3.
	for _, id := range []string{a1, a3} {
		waitFor(t, time.Minute, id+"'s /readyz names the authentication failure", func() (bool, string) {
			_, body, err := c.proc(id).get("/readyz")
			return err == nil && strings.Contains(body, "fail authentication") && strings.Contains(body, "check --key"), body
		})
	}

	// At most one warning per election timeout at a3, which refuses every
	// heartbeat and acknowledgement of the others (tens per timeout).
	w3At := time.Now()
	total := func() (n int, refused float64) {
		ls := c.proc(a3).logLines(what)
		for _, l := range ls {
			r, _ := l["refused"].(float64)
			refused += r
		}
		return len(ls), refused
	}
	waitFor(t, time.Minute, "a3 refuses 30 messages", func() (bool, string) {
		n, refused := total()
		return refused >= 30 && n >= 2, ""
	})
	n, refused := total()
	if most := int(time.Since(w3At)/c.et) + 2; n > most {
		t.Fatalf("a3 warned %d times (%v refusals) in %v: more than once per election timeout (%v)", n, refused, time.Since(w3At), c.et)
	}
	c.waitAgreement(a3, 1, time.Minute) // a1 and a2 elect a leader
}
