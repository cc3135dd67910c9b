//go:build wasip1 && electcore_hostdriven

package main

import (
	"strconv"
	"unicode/utf8"

	"github.com/electcore/electcore/core"
)

// The host-driven mode hands events and status to the host as JSON, the
// easiest format for a skill runner in any language. They are written by
// hand: encoding/json would add ~400 KB to a module with a 4 MB budget.

// appendEvent writes {"kind","group","term"[,"leader"][,"lease_until"][,"reason"]}.
func appendEvent(b []byte, ev *core.Event) []byte {
	b = appendStr(append(b, '{'), "kind", ev.Kind.String())
	b = appendStr(append(b, ','), "group", ev.Group)
	b = appendUint(append(b, ','), "term", ev.Term)
	if ev.Leader != "" {
		b = appendStr(append(b, ','), "leader", ev.Leader)
	}
	if ev.LeaseUntil != 0 {
		b = appendInt(append(b, ','), "lease_until", ev.LeaseUntil)
	}
	if ev.Reason != "" {
		b = appendStr(append(b, ','), "reason", ev.Reason)
	}
	if ev.Request != 0 {
		b = appendUint(append(b, ','), "request", ev.Request)
	}
	if ev.Member != "" {
		b = appendStr(append(b, ','), "member", ev.Member)
	}
	if ev.Kind == core.EventConfig {
		b = appendStrs(append(b, ','), "members", ev.Members)
		b = appendUint(append(b, ','), "conf_index", ev.ConfIndex)
	}
	if ev.Kind == core.EventValue {
		b = appendStr(append(b, ','), "value", ev.Value)
	}
	return append(b, '}')
}

// appendStatus writes the status with the same keys as its msgp encoding
// (core.Status's tags); role, mode and auth as their names.
func appendStatus(b []byte, s *core.Status) []byte {
	b = appendStr(append(b, '{'), "group", s.Group)
	b = appendStr(append(b, ','), "id", s.ID)
	b = appendStr(append(b, ','), "mode", string(s.Mode))
	b = appendStr(append(b, ','), "role", s.Role.String())
	b = appendStr(append(b, ','), "leader", s.Leader)
	b = appendUint(append(b, ','), "term", s.Term)
	b = appendStr(append(b, ','), "vote", s.Vote)
	b = appendInt(append(b, ','), "lease_until", s.LeaseUntil)
	b = appendUint(append(b, ','), "priority", uint64(s.Priority))
	b = append(b, `,"members":[`...)
	for i, m := range s.Members {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendStr(append(b, '{'), "id", m.ID)
		b = appendUint(append(b, ','), "priority", uint64(m.Priority))
		b = appendInt(append(b, ','), "last_heard", m.LastHeard)
		b = append(b, '}')
	}
	b = append(b, ']')
	b = appendUint(append(b, ','), "conf_term", s.ConfTerm)
	b = appendUint(append(b, ','), "conf_index", s.ConfIndex)
	b = appendBool(append(b, ','), "conf_committed", s.ConfCommitted)
	b = appendBool(append(b, ','), "voter", s.Voter)
	b = appendUint(append(b, ','), "elections", s.Elections)
	b = appendUint(append(b, ','), "received", s.Received)
	b = appendUint(append(b, ','), "rejected", s.Rejected)
	b = appendStr(append(b, ','), "auth", string(s.Auth))
	b = appendUint(append(b, ','), "epoch", s.Epoch)
	b = appendUint(append(b, ','), "unsigned", s.Unsigned)
	b = appendUint(append(b, ','), "forged", s.Forged)
	b = appendUint(append(b, ','), "replayed", s.Replayed)
	if s.ValueVersion > 0 {
		b = appendStr(append(b, ','), "value", s.Value)
		b = appendUint(append(b, ','), "value_ver", s.ValueVersion)
	}
	return append(b, '}')
}

func appendKey(b []byte, key string) []byte {
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

func appendBool(b []byte, key string, v bool) []byte {
	return strconv.AppendBool(appendKey(b, key), v)
}

// appendStrs writes a JSON array of strings.
func appendStrs(b []byte, key string, vs []string) []byte {
	b = append(appendKey(b, key), '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendQuoted(b, v)
	}
	return append(b, ']')
}

func appendUint(b []byte, key string, v uint64) []byte {
	return strconv.AppendUint(appendKey(b, key), v, 10)
}

func appendInt(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(appendKey(b, key), v, 10)
}

// appendStr writes a key and a JSON string: quotes, backslashes and control bytes
// escaped, invalid UTF-8 (a rejection reason may quote a cut-off input) as
// U+FFFD.
func appendStr(b []byte, key, s string) []byte {
	return appendQuoted(appendKey(b, key), s)
}

func appendQuoted(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n
			continue
		}
		i++
	}
	return append(b, '"')
}
