package nats

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/electcore/electcore/transport"
)

// Options configures New.
type Options struct {
	// URL of the NATS server(s): "nats://127.0.0.1:4222", comma-separated
	// for several. Default nats.DefaultURL.
	URL string
	// Name is the client connection name shown by the server.
	Name string
	// ConnectTimeout bounds each dial of the initial connect (and of every
	// reconnect attempt). Default 5 s. Once connected, the transport
	// reconnects forever.
	ConnectTimeout time.Duration
	// ReconnectWait and ReconnectJitter set the back-off between reconnect
	// attempts. Defaults 250 ms and 250 ms.
	ReconnectWait, ReconnectJitter time.Duration
	// PingInterval detects a dead server (defaults 5 s; 2 missed pings).
	PingInterval time.Duration
	// PublishTimeout bounds the flush that makes a new subscription known to
	// the server. Default 5 s.
	PublishTimeout time.Duration
	// PendingLimit is how many undelivered messages the transport buffers,
	// over all its subscriptions, before dropping (slow consumer). Default
	// 65536.
	PendingLimit int
	// OnGap, if set, is called for every active subscription when the
	// connection is lost (messages published until the reconnect are missed).
	// host is the server URL (redacted). Called from nats.go's callback goroutine.
	OnGap func(topic, host string, err error)
	// NoEcho: the server does not deliver this connection's publishes to
	// its own subscriptions (nats.NoEcho). For a transport one agent uses
	// alone: in a swarm of three a third of what an agent received was its
	// own publishes, which it only recognised and dropped (host/echo.go).
	// Leave it off when several agents share the transport: they would not
	// hear each other.
	NoEcho bool
	// Extra are appended to the nats.go options (credentials, TLS, ...).
	Extra  []nats.Option
	Logger *slog.Logger // nil: silent
}

// Transport is a transport.Transport over core NATS (github.com/nats-io/nats.go).
//
// Topics map to subjects with Subject. Echo is on unless Options.NoEcho,
// so a node receives its own publishes. Subscriptions survive server restarts: nats.go
// reconnects forever and re-subscribes; each reconnect adds the number of
// active subscriptions to Resubscribes, each loss of the connection counts in
// Disconnects. Core NATS stores nothing: messages published while a
// subscriber is disconnected are lost (as on pilot).
type Transport struct {
	nc     *nats.Conn
	url    string // redacted, for messages
	opts   Options
	logger *slog.Logger
	c      transport.Counters

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	subs   map[*natsSub]struct{}
	bySub  map[*nats.Subscription]*natsSub
	wg     sync.WaitGroup
	// in receives every subscription's messages: one goroutine delivers
	// them all, so ten thousand subscriptions cost no goroutine each.
	in chan *nats.Msg
}

var (
	_ transport.Transport       = (*Transport)(nil)
	_ transport.BatchSubscriber = (*Transport)(nil)
	_ transport.BatchPublisher  = (*Transport)(nil)
)

// New connects to NATS. The initial connect is bounded: when no
// server answers it fails with "cannot reach NATS at <url>: ..." (matching
// ErrConnectionFailed). After that the connection is kept up forever.
func New(opts Options) (*Transport, error) {
	if opts.URL == "" {
		opts.URL = nats.DefaultURL
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 5 * time.Second
	}
	if opts.ReconnectWait <= 0 {
		opts.ReconnectWait = 250 * time.Millisecond
	}
	if opts.ReconnectJitter <= 0 {
		opts.ReconnectJitter = 250 * time.Millisecond
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 5 * time.Second
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = 5 * time.Second
	}
	if opts.PendingLimit <= 0 {
		opts.PendingLimit = 65536
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		url:    redactURLs(opts.URL),
		opts:   opts,
		logger: logger.With("transport", "nats"),
		ctx:    ctx,
		cancel: cancel,
		subs:   map[*natsSub]struct{}{},
		bySub:  map[*nats.Subscription]*natsSub{},
		in:     make(chan *nats.Msg, opts.PendingLimit),
	}
	nopts := []nats.Option{
		nats.Name(opts.Name),
		nats.Timeout(opts.ConnectTimeout),
		nats.RetryOnFailedConnect(false),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(opts.ReconnectWait),
		nats.ReconnectJitter(opts.ReconnectJitter, opts.ReconnectJitter),
		nats.PingInterval(opts.PingInterval),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(t.onDisconnect),
		nats.ReconnectHandler(t.onReconnect),
		nats.ErrorHandler(t.onError),
	}
	if opts.NoEcho {
		nopts = append(nopts, nats.NoEcho())
	}
	nc, err := nats.Connect(opts.URL, append(nopts, opts.Extra...)...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cannot reach NATS at %s: %w (%w)", t.url, err, transport.ErrConnectionFailed)
	}
	t.nc = nc
	t.wg.Add(1)
	go t.dispatch()
	return t, nil
}

// dispatch hands each received message to its subscription's deliver, in
// the order the connection read them, until the transport closes.
func (t *Transport) dispatch() {
	defer t.wg.Done()
	for {
		select {
		case m := <-t.in:
			t.mu.Lock()
			s := t.bySub[m.Sub]
			t.mu.Unlock()
			if s != nil {
				s.handle(t, m)
			}
		case <-t.ctx.Done():
			return
		}
	}
}

func redactURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

const natsEncodedPrefix = "electcore.enc."

// Subject maps a topic to the NATS subject it travels on. Topics made
// only of ASCII letters, digits, '_', '-', ':' and '.' (no empty tokens) are
// used as they are: "election:g1" is the subject "election:g1" (NATS allows
// ':'; only whitespace, '.', '*', '>' are special), so other NATS tools see
// the same name. Any other topic (wildcards, spaces, '$', non-ASCII, a
// leading/trailing/double '.') and any topic starting with "electcore.enc."
// becomes "electcore.enc." + base64url(topic), so the mapping is
// deterministic and injective, and a topic never acts as a wildcard.
func Subject(topic string) string {
	if natsPlain(topic) {
		return topic
	}
	return natsEncodedPrefix + base64.RawURLEncoding.EncodeToString([]byte(topic))
}

func natsPlain(topic string) bool {
	if topic == "" || strings.HasPrefix(topic, natsEncodedPrefix) ||
		topic[0] == '.' || topic[len(topic)-1] == '.' || strings.Contains(topic, "..") {
		return false
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':' || c == '.') {
			return false
		}
	}
	return true
}

func (t *Transport) onDisconnect(nc *nats.Conn, err error) {
	t.mu.Lock()
	closed := t.closed
	subs := make([]*natsSub, 0, len(t.subs))
	for s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	if closed {
		return
	}
	t.c.Disconnects.Add(1)
	if err == nil {
		err = errors.New("disconnected")
	}
	t.logger.Warn("NATS connection lost; reconnecting (messages in the gap are lost)", "url", t.url, "err", err)
	if t.opts.OnGap != nil {
		for _, s := range subs {
			t.opts.OnGap(s.topic, t.url, fmt.Errorf("%w: %w", transport.ErrConnectionFailed, err))
		}
	}
}

func (t *Transport) onReconnect(nc *nats.Conn) {
	t.mu.Lock()
	n := len(t.subs)
	t.mu.Unlock()
	t.c.Resubscribes.Add(uint64(n))
	t.logger.Info("NATS reconnected; subscriptions restored", "url", nc.ConnectedUrlRedacted(), "subscriptions", n)
}

func (t *Transport) onError(nc *nats.Conn, sub *nats.Subscription, err error) {
	subject := ""
	if sub != nil {
		subject = sub.Subject
	}
	t.logger.Warn("NATS async error", "subject", subject, "err", err)
}

func (t *Transport) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

// Publish sends payload on Subject(topic): nats.go's flusher writes it to
// the connection at once. It does not wait for the server's PONG: that
// answer comes on the same connection as every message delivered to this
// client, so under a flood on a subscribed subject each publish waited
// behind the whole backlog, and a leader's heartbeats and its followers'
// acks (published one after another) with it: the lease lapsed. While the
// connection is down it fails at once with an error matching
// ErrConnectionFailed rather than buffering stale messages.
func (t *Transport) Publish(ctx context.Context, topic string, payload []byte) error {
	err := t.publish(ctx, topic, payload)
	if err != nil {
		t.c.PublishErrors.Add(1)
		return err
	}
	t.c.Published.Add(1)
	return nil
}

func (t *Transport) publish(ctx context.Context, topic string, payload []byte) error {
	if !t.enter() {
		return transport.ErrClosed
	}
	defer t.wg.Done()
	if err := ctx.Err(); err != nil {
		return err
	}
	if topic == "" {
		return fmt.Errorf("transport: empty topic: %w", transport.ErrInvalidArgument)
	}
	if st := t.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("nats publish: %w (%s, %s)", transport.ErrConnectionFailed, st, t.url)
	}
	if err := t.nc.Publish(Subject(topic), payload); err != nil {
		return fmt.Errorf("nats publish: %w (%w)", err, transport.ErrConnectionFailed)
	}
	return nil
}

// PublishBatch publishes ms in order (transport.BatchPublisher): the
// connection's state is checked once, and nats.go's flusher writes what the
// batch buffered together instead of being woken for every message by a
// separate Publish call.
func (t *Transport) PublishBatch(ctx context.Context, ms []transport.Message) (sent int, err error) {
	if !t.enter() {
		t.c.PublishErrors.Add(1)
		return 0, transport.ErrClosed
	}
	defer t.wg.Done()
	fail := func(err error) (int, error) {
		t.c.Published.Add(uint64(sent))
		t.c.PublishErrors.Add(1)
		return sent, err
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if st := t.nc.Status(); st != nats.CONNECTED {
		return fail(fmt.Errorf("nats publish: %w (%s, %s)", transport.ErrConnectionFailed, st, t.url))
	}
	for _, m := range ms {
		if m.Topic == "" {
			return fail(fmt.Errorf("transport: empty topic: %w", transport.ErrInvalidArgument))
		}
		if err := t.nc.Publish(Subject(m.Topic), m.Payload); err != nil {
			return fail(fmt.Errorf("nats publish: %w (%w)", err, transport.ErrConnectionFailed))
		}
		sent++
	}
	t.c.Published.Add(uint64(sent))
	return sent, nil
}

type natsSub struct {
	topic    string
	sub      *nats.Subscription // set before it is listed in t.subs
	deliver  func(transport.Message)
	mu       sync.Mutex // held while delivering; stopped set under it
	stopped  bool
	stopOnce sync.Once
	after    func() bool // stops the context.AfterFunc that ends it
}

func (s *natsSub) handle(t *Transport, m *nats.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	t.c.Received.Add(1)
	s.deliver(transport.Message{Topic: s.topic, Payload: m.Data})
}

// stop ends the subscription once: no deliver call runs after it returns.
func (t *Transport) stop(s *natsSub) {
	s.stopOnce.Do(func() {
		t.mu.Lock()
		if n, err := s.sub.Dropped(); err == nil {
			t.c.Dropped.Add(uint64(n)) // counted from here on (Stats)
		}
		delete(t.subs, s)
		delete(t.bySub, s.sub)
		t.mu.Unlock()
		s.sub.Unsubscribe()
		s.mu.Lock()
		s.stopped = true
		after := s.after
		s.mu.Unlock()
		if after != nil {
			after() // releases the context.AfterFunc
		}
		t.wg.Done()
	})
}

// Subscribe subscribes to Subject(topic); the subscription is live on the
// server when Subscribe returns (it flushes). deliver runs on the
// transport's delivering goroutine, one message at a time, and never after
// ctx ends or Close returns. A subscription costs no goroutine of its own.
func (t *Transport) Subscribe(ctx context.Context, topic string, deliver func(transport.Message)) error {
	if err := t.subscribe(ctx, topic, deliver); err != nil {
		return err
	}
	t.flushInterest(ctx, topic)
	return nil
}

// SubscribeBatch is Subscribe for every one of subs
// (transport.BatchSubscriber), with one flush for all: joining ten
// thousand groups costs one round trip to the server, not ten thousand.
func (t *Transport) SubscribeBatch(ctx context.Context, subs []transport.Subscription) []error {
	errs := make([]error, len(subs))
	made := 0
	for i, s := range subs {
		if errs[i] = ctx.Err(); errs[i] != nil {
			continue
		}
		if errs[i] = t.subscribe(s.Ctx, s.Topic, s.Deliver); errs[i] == nil {
			made++
		}
	}
	if made > 0 {
		t.flushInterest(ctx, fmt.Sprintf("%d topics", made))
	}
	return errs
}

// subscribe registers the subscription with nats.go, which sends the
// server its interest with the next write (flushInterest waits for it).
func (t *Transport) subscribe(ctx context.Context, topic string, deliver func(transport.Message)) error {
	if topic == "" {
		return fmt.Errorf("transport: empty topic: %w", transport.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !t.enter() {
		return transport.ErrClosed
	}
	s := &natsSub{topic: topic, deliver: deliver}
	// Listed before a message can arrive for it, unless Close came first.
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Done()
		return transport.ErrClosed
	}
	sub, err := t.nc.ChanSubscribe(Subject(topic), t.in)
	if err != nil {
		t.mu.Unlock()
		t.wg.Done()
		return fmt.Errorf("nats subscribe %s: %w", topic, err)
	}
	s.sub = sub
	t.subs[s] = struct{}{}
	t.bySub[sub] = s
	t.mu.Unlock()
	after := context.AfterFunc(ctx, func() { t.stop(s) })
	s.mu.Lock()
	s.after = after
	stopped := s.stopped
	s.mu.Unlock()
	if stopped { // Close stopped it meanwhile
		after()
	}
	return nil
}

// flushInterest makes the interest registered so far known to the server
// now if connected (a round trip); if not, nats.go sends it on reconnect.
func (t *Transport) flushInterest(ctx context.Context, what string) {
	if t.nc.IsConnected() {
		fctx, cancel := context.WithTimeout(ctx, t.opts.PublishTimeout)
		if err := t.nc.FlushWithContext(fctx); err != nil {
			t.logger.Debug("NATS subscribe: flush failed; interest is sent on reconnect", "topic", what, "err", err)
		}
		cancel()
	}
}

// Stats returns the transport's counters. Dropped counts the messages
// nats.go dropped because a subscription's pending buffer was full (a slow
// consumer: deliver could not keep up), of live and ended subscriptions.
func (t *Transport) Stats() transport.Stats {
	s := t.c.Snapshot()
	t.mu.Lock()
	for ns := range t.subs {
		if n, err := ns.sub.Dropped(); err == nil {
			s.Dropped += uint64(n)
		}
	}
	t.mu.Unlock()
	return s
}

// Conn exposes the underlying connection (for diagnostics).
func (t *Transport) Conn() *nats.Conn { return t.nc }

// Close ends every subscription (no deliver call is running or will run
// once it returns) and closes the connection. Idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	already := t.closed
	t.closed = true
	t.mu.Unlock()
	t.cancel()
	t.mu.Lock()
	subs := make([]*natsSub, 0, len(t.subs)) // len under the lock: subscriptions end on their own too
	for s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, s := range subs {
		t.stop(s)
	}
	t.wg.Wait()
	if !already {
		t.nc.Close()
	}
	return nil
}
