package wasmhost

import (
	"bytes"
	"context"
	"fmt"

	"github.com/tetratelabs/wazero/api"
)

// HostFuncs are the functions a host-driven module (the
// -tags electcore_hostdriven build, see wasm/ABI.md) imports from the
// "electcore" module. host.Agent is not itself host-driven (it uses the raw
// ABI); HostFuncs exist so tests can drive that build the way a skill runner
// would. A nil field acts as a no-op (Now returns 0).
type HostFuncs struct {
	Now     func() int64
	Publish func(topic string, payload []byte) error
	Persist func(group string, state []byte) error
	Event   func(eventJSON []byte)
	Log     func(level int32, msg string)
}

// SetHostFuncs installs the functions the host-driven exports call.
func (i *Instance) SetHostFuncs(h *HostFuncs) { i.hd.Store(h) }

func funcsOf(ctx context.Context) *HostFuncs {
	if i, ok := ctx.Value(instanceKey{}).(*Instance); ok {
		if h := i.hd.Load(); h != nil {
			return h
		}
	}
	return &HostFuncs{}
}

func readString(m api.Module, ptr, n uint64) string {
	b, ok := m.Memory().Read(uint32(ptr), uint32(n))
	if !ok {
		panic(fmt.Sprintf("electcore host: read %d bytes at %#x outside memory", n, ptr))
	}
	return string(b)
}

func readBytes(m api.Module, ptr, n uint64) []byte {
	b, ok := m.Memory().Read(uint32(ptr), uint32(n))
	if !ok {
		panic(fmt.Sprintf("electcore host: read %d bytes at %#x outside memory", n, ptr))
	}
	return append([]byte(nil), b...)
}

func hostDrivenImport(name string) api.GoModuleFunction {
	switch name {
	case "now":
		return api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			var now int64
			if f := funcsOf(ctx).Now; f != nil {
				now = f()
			}
			stack[0] = uint64(now)
		})
	case "publish":
		return api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			topic, payload := readString(m, stack[0], stack[1]), readBytes(m, stack[2], stack[3])
			rc := uint64(0)
			if f := funcsOf(ctx).Publish; f != nil && f(topic, payload) != nil {
				rc = 1
			}
			stack[0] = rc
		})
	case "persist":
		return api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			group, state := readString(m, stack[0], stack[1]), readBytes(m, stack[2], stack[3])
			rc := uint64(0)
			if f := funcsOf(ctx).Persist; f != nil && f(group, state) != nil {
				rc = 1
			}
			stack[0] = rc
		})
	case "event":
		return api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			if f := funcsOf(ctx).Event; f != nil {
				f(readBytes(m, stack[0], stack[1]))
			}
		})
	case "log":
		return api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			if f := funcsOf(ctx).Log; f != nil {
				f(int32(stack[0]), readString(m, stack[1], stack[2]))
			}
		})
	}
	return nil
}

// HD calls a host-driven export (hd_join, hd_deliver, hd_command, hd_tick)
// after writing in to the input buffer, and returns its result: the delay in
// ms until hd_tick is due (1<<31: no timer). See wasm/ABI.md.
func (i *Instance) HD(name string, in []byte, args ...uint64) (int64, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	f := i.mod.ExportedFunction(name)
	if f == nil {
		return 0, fmt.Errorf("host: module has no export %q (build it with -tags electcore_hostdriven)", name)
	}
	if len(in) > 0 {
		if err := i.write(name, in); err != nil {
			return 0, err
		}
	}
	r, err := i.call(name, f, args...)
	if err != nil {
		return 0, err
	}
	if int64(r) < 0 {
		_, err := i.result(name, r)
		return 0, err
	}
	return int64(r), nil
}

// HDStatus returns the JSON status of group from a host-driven module
// (hd_status; keys as core.Status's msgp tags). See wasm/ABI.md.
func (i *Instance) HDStatus(group string) ([]byte, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	f := i.mod.ExportedFunction("hd_status")
	if f == nil {
		return nil, fmt.Errorf("host: module has no export %q (build it with -tags electcore_hostdriven)", "hd_status")
	}
	if err := i.write("hd_status", []byte(group)); err != nil {
		return nil, err
	}
	r, err := i.call("hd_status", f, uint64(len(group)))
	if err != nil {
		return nil, err
	}
	b, err := i.result("hd_status", r)
	return bytes.Clone(b), err
}
