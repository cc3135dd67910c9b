package core

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// findMember must answer as slices.BinarySearchFunc does.
func TestFindMember(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		var ms []member
		for range r.IntN(9) {
			ms = append(ms, member{id: strconv.Itoa(r.IntN(20))})
		}
		slices.SortFunc(ms, func(a, b member) int { return strings.Compare(a.id, b.id) })
		ms = slices.CompactFunc(ms, func(a, b member) bool { return a.id == b.id })
		id := strconv.Itoa(r.IntN(20))
		i, ok := findMember(ms, id)
		wi, wok := slices.BinarySearchFunc(ms, id, func(m member, id string) int { return strings.Compare(m.id, id) })
		if i != wi || ok != wok {
			t.Fatalf("findMember(%v, %q) = %d, %v; want %d, %v", ms, id, i, ok, wi, wok)
		}
	}
}
