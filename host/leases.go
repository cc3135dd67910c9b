package host

// leaseQueue orders the lease ends of the elections this agent leads, so
// that the loop finds the next one to end without visiting every group.
// Each lease change pushes an entry; an entry whose election has since
// renewed, lost or left its lease is stale and is dropped when it comes to
// the front (by then its time has passed, so the queue holds at most the
// renewals of about one lease length). Owned by the loop goroutine. A
// binary heap of its own, not container/heap's: that one boxes every
// entry pushed and popped in an interface, an allocation each, and a
// leader in thousands of groups renews thousands of leases a second.
type leaseQueue []leaseEnd

type leaseEnd struct {
	until int64
	el    *Election
}

// track records that el's lease now ends at until.
func (q *leaseQueue) track(el *Election, until int64) {
	if until <= 0 {
		return
	}
	h := append(*q, leaseEnd{until, el})
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p].until <= h[i].until {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	*q = h
}

// pop removes the earliest entry.
func (q *leaseQueue) pop() leaseEnd {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = leaseEnd{}
	h = h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].until < h[c].until {
			c++
		}
		if h[i].until <= h[c].until {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	*q = h
	return top
}

// live reports whether e is still the lease end of a running leadership.
func (e leaseEnd) live() bool { return e.el.leading && e.el.leaseUntil == e.until }

// next is the earliest live lease end (0: none), dropping stale entries.
func (q *leaseQueue) next() int64 {
	for len(*q) > 0 {
		if e := (*q)[0]; e.live() {
			return e.until
		}
		q.pop()
	}
	return 0
}

// expired removes and returns the elections whose lease ended by now.
func (q *leaseQueue) expired(now int64) []*Election {
	var out []*Election
	for len(*q) > 0 && (*q)[0].until <= now {
		if e := q.pop(); e.live() {
			out = append(out, e.el)
		}
	}
	return out
}
