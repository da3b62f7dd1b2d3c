package relaytest

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream is a JetStream stream of a test's own on the shared NATS server.
type Stream struct {
	Base    string // the server's URL (NATS)
	Name    string // the stream's name
	Subject string // its one subject
	Conn    *natsgo.Conn
	JS      jetstream.JetStream
	Stream  jetstream.Stream
}

// NewStream makes a file-backed stream named name on subject, with a
// duplicate window of 2 minutes (the relay's replays are dropped by it);
// the stream is deleted and the connection closed when the test ends.
func NewStream(t testing.TB, name, subject string) *Stream {
	t.Helper()
	s := &Stream{Base: NATS(t), Name: name, Subject: subject}
	var err error
	if s.Conn, err = natsgo.Connect(s.Base); err != nil {
		t.Fatalf("nats: %v", err)
	}
	t.Cleanup(s.Conn.Close)
	if s.JS, err = jetstream.New(s.Conn); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.Stream, err = s.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Duplicates: 2 * time.Minute,
		Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.JS.DeleteStream(ctx, name)
	})
	return s
}
