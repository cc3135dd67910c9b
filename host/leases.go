package host

import "container/heap"

// leaseQueue orders the lease ends of the elections this agent leads, so
// that the loop finds the next one to end without visiting every group.
// Each lease change pushes an entry; an entry whose election has since
// renewed, lost or left its lease is stale and is dropped when it comes to
// the front (by then its time has passed, so the queue holds at most the
// renewals of about one lease length). Owned by the loop goroutine.
type leaseQueue []leaseEnd

type leaseEnd struct {
	until int64
	el    *Election
}

func (q leaseQueue) Len() int           { return len(q) }
func (q leaseQueue) Less(i, j int) bool { return q[i].until < q[j].until }
func (q leaseQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *leaseQueue) Push(x any)        { *q = append(*q, x.(leaseEnd)) }
func (q *leaseQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = leaseEnd{}
	*q = old[:len(old)-1]
	return e
}

// track records that el's lease now ends at until.
func (q *leaseQueue) track(el *Election, until int64) {
	if until > 0 {
		heap.Push(q, leaseEnd{until, el})
	}
}

// live reports whether e is still the lease end of a running leadership.
func (e leaseEnd) live() bool { return e.el.leading && e.el.leaseUntil == e.until }

// next is the earliest live lease end (0: none), dropping stale entries.
func (q *leaseQueue) next() int64 {
	for q.Len() > 0 {
		if e := (*q)[0]; e.live() {
			return e.until
		}
		heap.Pop(q)
	}
	return 0
}

// expired removes and returns the elections whose lease ended by now.
func (q *leaseQueue) expired(now int64) []*Election {
	var out []*Election
	for q.Len() > 0 && (*q)[0].until <= now {
		if e := heap.Pop(q).(leaseEnd); e.live() {
			out = append(out, e.el)
		}
	}
	return out
}
