package core

import (
	"fmt"
	"testing"
)

// TestRendezvousPrioritySpreads: over many groups with the same members, the
// balanced default ranks each member first in about an equal share of them
// (the cksum ranks one member first in all), and without the first, each
// group's next is spread about evenly over the others.
func TestRendezvousPrioritySpreads(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("agent-%d", i)
		}
		const groups = 6000
		first := make([]int, n)
		second := make([][]int, n) // second[f][s]: groups first led by f, next by s
		for i := range second {
			second[i] = make([]int, n)
		}
		for g := range groups {
			group := fmt.Sprintf("bench-%05d", g)
			best, next := -1, -1
			for i, id := range ids {
				p := RendezvousPriority(group, id)
				if p == 0 {
					t.Fatalf("RendezvousPriority(%q, %q) = 0, the value meaning \"default\"", group, id)
				}
				switch {
				case best < 0 || outranks(p, id, RendezvousPriority(group, ids[best]), ids[best]):
					best, next = i, best
				case next < 0 || outranks(p, id, RendezvousPriority(group, ids[next]), ids[next]):
					next = i
				}
			}
			first[best]++
			second[best][next]++
		}
		// Each share within 15% of even: a binomial count's standard
		// deviation is under 2% of its mean here, so this fails only for a
		// skewed hash.
		even := groups / n
		for i, c := range first {
			if c < even*85/100 || c > even*115/100 {
				t.Errorf("%d members: %s ranks first in %d of %d groups, want about %d", n, ids[i], c, groups, even)
			}
			for j, s := range second[i] {
				if j == i {
					continue
				}
				if want := c / (n - 1); s < want*80/100 || s > want*120/100 {
					t.Errorf("%d members: of %s's %d groups, %d go next to %s, want about %d", n, ids[i], c, s, ids[j], want)
				}
			}
		}
	}
}

// TestBalancedPriorityDefault: BalancedPriority changes only the default: a
// zero Priority becomes the rendezvous priority, an explicit one stays, and
// without it the default is the seed-compatible cksum.
func TestBalancedPriorityDefault(t *testing.T) {
	c := Config{ID: "b", Group: "g", Members: []string{"a", "b", "c"}}
	n, err := c.normalize()
	if err != nil || n.Priority != Cksum([]byte("b")) {
		t.Fatalf("default priority %d (%v), want the cksum %d", n.Priority, err, Cksum([]byte("b")))
	}
	c.BalancedPriority = true
	if n, _ = c.normalize(); n.Priority != RendezvousPriority("g", "b") {
		t.Fatalf("balanced default priority %d, want %d", n.Priority, RendezvousPriority("g", "b"))
	}
	c.Priority = 7
	if n, _ = c.normalize(); n.Priority != 7 {
		t.Fatalf("explicit priority became %d with BalancedPriority", n.Priority)
	}
}
