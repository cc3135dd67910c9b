package host

import (
	"hash/maphash"
)

// echoes remembers what this agent published lately, so that the copies
// the bus echoes back (NATS, pilot and mem all deliver a node's publishes
// to its own subscriptions) are dropped on arrival instead of being queued,
// unwrapped and decoded: the core ignores a message in its own name and
// incarnation anyway. A copy is recognised only if it is byte for byte
// what was sent, so a second process speaking with this agent's id (whose
// messages carry another incarnation) still reaches the core and is
// reported. In a swarm of three, a third of what each agent receives is
// its own. It is plain data; the agent holds it under its mutex.
type echoes struct {
	seed  maphash.Seed
	sent  map[uint64]int64 // hash of topic and payload → when sent (agent clock ms)
	swept int64            // when entries older than echoMs were last removed
}

const (
	// echoMs: a publish whose echo has not come back by then is forgotten
	// (a lost echo is harmless: a late one is decoded as before).
	echoMs = 10_000
	// maxEchoes bounds the publishes remembered (about 20 bytes each in
	// the map): past it, publishes are not remembered until the next sweep.
	maxEchoes = 1 << 18
)

func newEchoes() *echoes {
	return &echoes{seed: maphash.MakeSeed(), sent: map[uint64]int64{}}
}

func (e *echoes) hash(topic string, payload []byte) uint64 {
	return maphash.String(e.seed, topic)*31 ^ maphash.Bytes(e.seed, payload)
}

// sending records a publish about to go out.
func (e *echoes) sending(now int64, topic string, payload []byte) {
	if now-e.swept >= echoMs/2 {
		for h, at := range e.sent {
			if now-at >= echoMs {
				delete(e.sent, h)
			}
		}
		e.swept = now
	}
	if len(e.sent) < maxEchoes {
		e.sent[e.hash(topic, payload)] = now
	}
}

// echoed reports whether the message with hash h (echoes.hash) is the copy
// of one this agent sent, and forgets that publish: a second copy (a bus
// that duplicates) goes to the core, which ignores it as before.
func (e *echoes) echoed(h uint64) bool {
	if _, ok := e.sent[h]; ok {
		delete(e.sent, h)
		return true
	}
	return false
}
