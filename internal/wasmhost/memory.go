package wasmhost

import (
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// The bound of an instance's linear memory follows the groups it hosts:
// MemoryLimitPages for a few groups, and memoryPerGroup more for each group
// beyond what memoryBase leaves room for. Measured in the start storm of
// three agents (host/BENCHMARKS.md, "The module's memory follows its
// groups"): the module's live data is about 2–3 KB a group, and Go's
// collector lets the heap grow to about twice that before it collects,
// plus the runtime's own structures: a 64 MiB bound held 3,000 groups but
// not 10,000 (out of memory at 61.6 MB in use). Linear memory grows only as
// the module asks for it, so a large bound costs nothing until it is used.
var (
	memoryBase     uint64 = 16 << 20
	memoryPerGroup uint64 = 16 << 10 // variables for tests only
)

// maxMemoryBytes is what a 32-bit linear memory can address.
const maxMemoryBytes = 65536 * 65536

// memoryBound is the bound of an instance hosting groups groups whose
// runtime was configured with minPages: at least minPages × 64 KiB, else
// memoryBase + memoryPerGroup × groups, in whole 64 KiB pages, at most
// 4 GiB.
func memoryBound(minPages uint32, groups int) uint64 {
	b := uint64(minPages) * 65536
	if g := memoryBase + uint64(max(groups, 0))*memoryPerGroup; g > b {
		b = (g + 65535) &^ 65535
	}
	return min(b, maxMemoryBytes)
}

// goMemLimit is the soft memory limit the module's Go runtime gets (at
// start as GOMEMLIMIT, later through ec_memory_limit) for a linear memory
// bound of bound bytes: the bound less a quarter of it, and at least 4 MiB,
// for what is not heap (the module's data, stacks). Without it Go's
// collector lets the heap grow to about twice its live data before it
// collects, whatever the bound; with it the collector works harder as the
// heap nears the bound, and only live data beyond it still traps.
func goMemLimit(bound uint64) uint64 {
	reserve := max(bound/4, 4<<20)
	if bound <= reserve {
		return bound / 2
	}
	return bound - reserve
}

// boundedMemory backs an instance's linear memory (a wazero
// experimental.LinearMemory): a buffer that grows up to limit, which the
// instance raises as it joins groups; a growth past it fails, which the
// module's Go runtime reports as out of memory (a trap). The buffer is
// allocated with room for the bound of its time (as wazero's
// WithMemoryCapacityFromMax does: only the pages touched cost RAM) and
// copied only when a raised bound is reached.
type boundedMemory struct {
	limit atomic.Uint64 // bytes
	buf   []byte
}

func newBoundedMemory(limit uint64) *boundedMemory {
	m := &boundedMemory{}
	m.limit.Store(limit)
	return m
}

// Allocate implements experimental.MemoryAllocator: wazero calls it once,
// when it instantiates the module.
func (m *boundedMemory) Allocate(_, _ uint64) experimental.LinearMemory {
	m.buf = make([]byte, 0, m.limit.Load())
	return m
}

// Reallocate implements experimental.LinearMemory.
func (m *boundedMemory) Reallocate(size uint64) []byte {
	limit := m.limit.Load()
	if size > limit {
		return nil
	}
	if size > uint64(cap(m.buf)) {
		b := make([]byte, size, limit)
		copy(b, m.buf)
		m.buf = b
	}
	m.buf = m.buf[:size]
	return m.buf
}

// Free implements experimental.LinearMemory.
func (m *boundedMemory) Free() { m.buf = nil }
