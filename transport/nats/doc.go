// Package nats is a transport.Transport over core NATS (nats.go). Topic
// "election:<group>" is used as the subject as is (':' is legal in NATS
// subjects); other topics are mapped by Subject. Subscriptions survive
// server restarts. Package transport/natstest starts a real embedded
// nats-server for tests.
package nats
