// Package mem is an in-process publish/subscribe bus implementing
// transport.Transport, with fault injection: loss, duplication,
// delay/reordering, one-way or two-way partitions, all decided by a seeded
// random source. NewBus makes a bus; Bus.Transport(node) is one node's view
// of it. Use it for demos (electhost demo --transport mem) and tests.
package mem
