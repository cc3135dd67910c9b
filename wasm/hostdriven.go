//go:build wasip1 && electcore_hostdriven

package main

// Host-driven mode, for skill runners that only supply functions: each hd_*
// call reads the clock through the imported now(), steps the engine, and
// applies the Output through the imported persist(), publish() and event(),
// in the core's order (persist before publish). Built only with
// -tags electcore_hostdriven, because a module that imports "electcore"
// functions no longer loads unchanged in an Extism SDK (see ABI.md).

import (
	"encoding/base64"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
)

// core.Driver may hold a group's publishes across calls (until its state is
// saved), so their payloads must stay.
const reusePayloads = false

//go:wasmimport electcore now
func hostNow() int64

//go:wasmimport electcore publish
func hostPublish(topicPtr, topicLen, payloadPtr, payloadLen uint32) int32

//go:wasmimport electcore persist
func hostPersist(groupPtr, groupLen, statePtr, stateLen uint32) int32

//go:wasmimport electcore event
func hostEvent(ptr, n uint32)

//go:wasmimport electcore log
func hostLog(level int32, ptr, n uint32)

const noTimer = 1 << 31

func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
func saddr(s string) uint32 {
	return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s))))
}

var (
	stateBuf, eventBuf []byte
	driver             = core.Driver{Save: hdSave, Publish: hdPublish, Event: hdEvent}
)

func hdSave(p core.GroupState) error {
	var err error
	if stateBuf, err = abi.MarshalState(stateBuf[:0], &p); err != nil {
		return err
	}
	rc := hostPersist(saddr(p.Group), uint32(len(p.Group)), addr(stateBuf), uint32(len(stateBuf)))
	runtime.KeepAlive(p.Group)
	if rc != 0 {
		return errors.New("persist " + strconv.Quote(p.Group) + " failed (" + strconv.Itoa(int(rc)) + ")")
	}
	return nil
}

func hdPublish(m core.Message) {
	if rc := hostPublish(saddr(m.Topic), uint32(len(m.Topic)), addr(m.Payload), uint32(len(m.Payload))); rc != 0 {
		hdLog(2, "publish on "+m.Topic+" failed")
	}
	runtime.KeepAlive(m)
}

func hdEvent(ev core.Event) {
	eventBuf = appendEvent(eventBuf[:0], &ev)
	hostEvent(addr(eventBuf), uint32(len(eventBuf)))
}

// hdRun steps the engine with in (Now read from the host) and applies the
// output through the imports. It returns the delay (ms) until hd_tick is due,
// noTimer if no group has a timer, or a negative error code.
func hdRun(fill func() error) int64 {
	var delay int64
	err := guard(func() error {
		in = core.Input{Join: in.Join[:0], Inbound: in.Inbound[:0], Commands: in.Commands[:0]}
		if err := fill(); err != nil {
			return err
		}
		in.Now = hostNow()
		out.Reset()
		engine.Step(&in, &out)
		// core.Driver applies the output in the core's order: a group whose
		// state persist() could not save publishes nothing, now or later,
		// until it succeeds (offered again on every call); a leadership the
		// same output revokes is never reported.
		held, perr := driver.Apply(&out)
		if perr != nil {
			hdLog(3, perr.Error()+": "+itoa(held)+" publishes held until persist() succeeds")
		}
		delay = noTimer
		if out.WakeAt > 0 {
			delay = max(0, out.WakeAt-in.Now)
		}
		letCollectorRun()
		return nil
	})
	if err != nil {
		hdLog(3, err.Error())
		return setError(err)
	}
	return delay
}

func hdLog(level int32, msg string) {
	hostLog(level, saddr(msg), uint32(len(msg)))
	runtime.KeepAlive(msg)
}

// split returns the input buffer's first a bytes and the b bytes after them.
func split(a, b uint32) ([]byte, []byte, error) {
	if uint64(a)+uint64(b) > uint64(len(inBuf)) {
		return nil, nil, fail(errTooLarge, "input buffer holds "+itoa(len(inBuf))+" bytes, "+utoa(a)+"+"+utoa(b)+" requested (call ec_input first)")
	}
	return inBuf[:a], inBuf[a : a+b], nil
}

// hd_join joins a group: the input buffer holds a msgp core.Config (config_len
// bytes) followed by the state bytes last handed to persist() for this group
// (state_len bytes; 0 for a first start).
//
//go:wasmexport hd_join
func hdJoin(configLen, stateLen uint32) int64 {
	return hdRun(func() error {
		cb, sb, err := split(configLen, stateLen)
		if err != nil {
			return err
		}
		var spec core.GroupSpec
		if _, err := abi.UnmarshalConfig(cb, &spec.Config); err != nil {
			return fail(errDecode, "hd_join: decode config: "+err.Error())
		}
		if len(sb) > 0 {
			if _, err := abi.UnmarshalState(sb, &spec.State); err != nil {
				return fail(errDecode, "hd_join: decode state: "+err.Error())
			}
		}
		if err := spec.Config.Validate(); err != nil {
			return fail(errRejected, "hd_join: "+err.Error())
		}
		if _, ok := engine.Status(spec.Config.Group); ok {
			return fail(errRejected, "hd_join: group "+strconv.Quote(spec.Config.Group)+" already joined")
		}
		in.Join = append(in.Join, spec)
		return nil
	})
}

// hd_deliver hands one received message to the core: the input buffer holds
// the topic (topic_len bytes) followed by the payload (payload_len bytes).
//
//go:wasmexport hd_deliver
func hdDeliver(topicLen, payloadLen uint32) int64 {
	return hdRun(func() error {
		tb, pb, err := split(topicLen, payloadLen)
		if err != nil {
			return err
		}
		in.Inbound = append(in.Inbound, core.Message{Topic: string(tb), Payload: append([]byte(nil), pb...)})
		return nil
	})
}

// hd_command applies a command (kind: 1 campaign, 2 resign, 3 transfer,
// 4 leave, 5 add-member, 6 remove-member, 7 drain, 8 undrain, 9 proclaim):
// the input buffer holds the group name (group_len bytes) followed by the
// target (target_len bytes: the transfer target, the member to add or
// remove, or the value to proclaim, else 0 bytes). For
// add-member in a group that uses ed25519 the target is "ID KEY": the
// member, one space, and its public key in base64 (standard or URL
// alphabet, padded or not); member ids never contain a space.
//
//go:wasmexport hd_command
func hdCommand(kind, groupLen, targetLen uint32) int64 {
	return hdRun(func() error {
		gb, tb, err := split(groupLen, targetLen)
		if err != nil {
			return err
		}
		c := core.Command{Kind: core.CommandKind(kind), Group: string(gb), Target: string(tb)}
		if id, key, ok := strings.Cut(c.Target, " "); ok && c.Kind == core.CmdAddMember {
			k := strings.NewReplacer("+", "-", "/", "_").Replace(strings.TrimRight(key, "="))
			if c.Key, err = base64.RawURLEncoding.DecodeString(k); err != nil {
				return fail(errDecode, "hd_command: the key of "+strconv.Quote(id)+" is not base64: "+err.Error())
			}
			c.Target = id
		}
		if c.Kind == core.CmdProclaim {
			c.Value, c.Target = c.Target, ""
		}
		in.Commands = append(in.Commands, c)
		return nil
	})
}

// hd_tick runs the timers that are due. Call it when the delay returned by
// the last hd_* call has elapsed.
//
//go:wasmexport hd_tick
func hdTick() int64 { return hdRun(func() error { return nil }) }

// hd_status returns ptr<<32|len of the JSON status of the group whose name
// (n bytes) is in the input buffer, or -3 if it is not joined.
//
//go:wasmexport hd_status
func hdStatus(n uint32) int64 {
	err := guard(func() error {
		b, _, err := split(n, 0)
		if err != nil {
			return err
		}
		st, ok := engine.Status(string(b))
		if !ok {
			return fail(errNotFound, "group "+strconv.Quote(string(b))+" not joined")
		}
		outBuf = appendStatus(outBuf[:0], &st)
		return nil
	})
	if err != nil {
		return setError(err)
	}
	return pack(outBuf)
}
