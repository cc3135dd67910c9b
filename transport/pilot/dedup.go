package pilot

import (
	"hash/maphash"
	"time"
)

// dedup remembers the last DedupSize distinct payloads delivered (by a
// 64-bit hash of topic and payload) and which sources sent a copy since.
type dedup struct {
	window time.Duration
	seed   maphash.Seed
	seen   map[uint64]*dedupEntry
	ring   []uint64 // insertion order, for eviction
	next   int
}

type dedupEntry struct {
	at      time.Time
	sources uint64 // bit i: source i sent a copy since the delivery
	slot    int    // its place in ring
}

func newDedup(size int, window time.Duration) *dedup {
	return &dedup{window: window, seed: maphash.MakeSeed(), seen: make(map[uint64]*dedupEntry, size), ring: make([]uint64, 0, size)}
}

// fresh reports whether a copy from source should be delivered: it is not
// a copy of a payload delivered within the window from another source. A
// payload that the same source sends again is a genuine repeat (pilot
// brokers do not duplicate), delivered again.
func (d *dedup) fresh(source int, topic string, payload []byte, now time.Time) bool {
	var h maphash.Hash
	h.SetSeed(d.seed)
	h.WriteString(topic)
	h.WriteByte(0)
	h.Write(payload)
	key := h.Sum64()
	bit := uint64(1) << source
	if e := d.seen[key]; e != nil && now.Sub(e.at) <= d.window && e.sources&bit == 0 {
		e.sources |= bit
		return false
	}
	if e := d.seen[key]; e != nil { // a repeat: move it to the newest slot
		d.ring[e.slot] = 0
		delete(d.seen, key)
	}
	slot := len(d.ring)
	if slot < cap(d.ring) {
		d.ring = append(d.ring, key)
	} else {
		slot = d.next
		d.next = (d.next + 1) % cap(d.ring)
		if old, e := d.ring[slot], d.seen[d.ring[slot]]; e != nil && e.slot == slot {
			delete(d.seen, old)
		}
		d.ring[slot] = key
	}
	d.seen[key] = &dedupEntry{at: now, sources: bit, slot: slot}
	return true
}
