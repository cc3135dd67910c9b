// Package natstest starts real, embedded NATS servers (nats-server) on
// loopback for tests: Start for a fresh server on a random port, Restart to
// bring one back on the same port (to test reconnects).
package natstest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start runs an embedded nats-server on 127.0.0.1 and a random port. It
// returns the client URL ("nats://127.0.0.1:PORT") and an idempotent stop
// function, also called by t.Cleanup.
func Start(t testing.TB) (url string, stop func()) {
	t.Helper()
	return StartOnPort(t, server.RANDOM_PORT)
}

// StartOnPort is Start on a given port (-1: random).
func StartOnPort(t testing.TB, port int) (url string, stop func()) {
	t.Helper()
	opts := &server.Options{
		Host:   "127.0.0.1",
		Port:   port,
		NoLog:  true,
		NoSigs: true,
		// No HTTP monitoring, no cluster, no JetStream: plain core NATS.
	}
	if port > 0 {
		// The port of a just-stopped server may take a moment to free up.
		for attempt := 0; ; attempt++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err == nil {
				ln.Close()
				break
			}
			if attempt >= 50 {
				t.Fatalf("natstest: port %d stays busy: %v", port, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		t.Fatalf("natstest: nats-server did not start on port %d", port)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
	}
	t.Cleanup(stop)
	addr := s.Addr().(*net.TCPAddr)
	return fmt.Sprintf("nats://127.0.0.1:%d", addr.Port), stop
}

// Restart starts a new server on the port of serverURL (after the old one
// was stopped), returning its stop function.
func Restart(t testing.TB, serverURL string) (stop func()) {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("natstest: bad URL %q: %v", serverURL, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("natstest: no port in %q", serverURL)
	}
	_, stop = StartOnPort(t, port)
	return stop
}

// PingCounter is a TCP proxy in front of a NATS server that counts the
// PINGs its clients send: each flush of a nats.go connection (Flush,
// FlushWithContext) is one PING and one round trip to the server.
type PingCounter struct {
	URL   string // the proxy's client URL
	mu    sync.Mutex
	pings int
}

// Pings returns the PINGs counted so far, over every connection.
func (p *PingCounter) Pings() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pings
}

// CountPings starts a PingCounter in front of serverURL, stopped by
// t.Cleanup. It counts the lines its clients send that are exactly
// "PING": a published payload holding such a line would count too.
func CountPings(t testing.TB, serverURL string) *PingCounter {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("natstest: bad URL %q: %v", serverURL, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	p := &PingCounter{URL: "nats://" + ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() { // server to client, as it is
				defer wg.Done()
				io.Copy(c, s)
				c.Close()
			}()
			go func() { // client to server, line by line, counting PINGs
				defer wg.Done()
				defer s.Close()
				r := bufio.NewReaderSize(c, 64<<10)
				for {
					line, err := r.ReadSlice('\n')
					if bytes.Equal(line, []byte("PING\r\n")) {
						p.mu.Lock()
						p.pings++
						p.mu.Unlock()
					}
					if len(line) > 0 {
						if _, werr := s.Write(line); werr != nil {
							return
						}
					}
					if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
						return
					}
				}
			}()
		}
	}()
	return p
}
