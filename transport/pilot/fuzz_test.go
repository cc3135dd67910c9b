package pilot

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzPilotLine feeds arbitrary subscribe output lines to the NDJSON parser:
// never a panic; what it accepts is an event on the subscribed topic whose
// payload is exactly the line's data string.
func FuzzPilotLine(f *testing.F) {
	for _, s := range []string{
		`{"bytes":29,"data":"{\"type\":\"heartbeat\"}","topic":"election:g"}`,
		`{"bytes":1,"data":"x","topic":"other"}`,
		`{"data":5,"topic":"election:g"}`, `{"status":"error","code":"connection_failed","message":"recv: EOF"}`,
		`not json`, ``, `   `, `{"data":"\u0000","topic":"election:g"}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, line []byte, wildcard bool) {
		s := &pilotSub{t: &Transport{opts: Options{MaxLineBytes: 1 << 16}}, topic: "election:g"}
		if wildcard {
			s.topic = "*"
		}
		topic, payload, err := s.parse(line, false)
		if err != nil || payload == nil {
			return
		}
		if !wildcard && topic != "election:g" {
			t.Fatalf("accepted topic %q on a subscription to election:g", topic)
		}
		if !bytes.Contains(line, []byte(`"data"`)) {
			t.Fatalf("accepted %q without a data field", line)
		}
	})
}

// FuzzPilotError maps arbitrary pilotctl stderr to an error: always a
// *Error, never a panic.
func FuzzPilotError(f *testing.F) {
	f.Add([]byte(`{"status":"error","code":"not_found","message":"no such host","hint":"check"}`))
	f.Add([]byte("garbage\n{\"code\":\"timeout\"}\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, stderr []byte) {
		var pe *Error
		if err := parsePilotError("publish", "h", stderr, errors.New("exit status 1")); !errors.As(err, &pe) || pe.Code == "" {
			t.Fatalf("stderr %q gave %v", stderr, err)
		}
	})
}
