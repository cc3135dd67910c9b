package core

import "testing"

// The expected values are what `printf '%s' "$id" | cksum` printed (GNU
// coreutils 9.1), the seed skill's default priority.
func TestCksumMatchesPOSIX(t *testing.T) {
	for id, want := range map[string]uint32{
		"":            4294967295,
		"a":           1220704766,
		"agent-1":     3074249056,
		"node-42":     1946599111,
		"hello world": 1135714720,
	} {
		if got := Cksum([]byte(id)); got != want {
			t.Errorf("Cksum(%q) = %d, cksum(1) says %d", id, got, want)
		}
	}
}

func TestDefaultPriorityIsCksum(t *testing.T) {
	c, err := Config{ID: "agent-1", Group: "g", Mode: ModeBully}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if c.Priority != 3074249056 {
		t.Fatalf("default priority %d, want cksum 3074249056", c.Priority)
	}
}
