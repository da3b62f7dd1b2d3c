// Package relaytest finds the real brokers the relay's tests publish to.
//
// The brokers are the ones scripts/brokers.sh started (`make brokers`;
// `make test` starts them and passes NATS_URL and AMQP_URL): NATS_URL and
// AMQP_URL first, then the state scripts/brokers.sh keeps. A test that
// needs a broker that is not there fails when CI is set and is skipped, with
// a message saying how to start it, otherwise: CI never passes without the
// brokers. Tests that stop and restart a broker start a private one
// (Private), so they never disturb the tests that share the others.
package relaytest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// NATS returns the URL of the shared NATS server (JetStream enabled).
func NATS(t testing.TB) string {
	t.Helper()
	return find(t, "NATS_URL", "nats")
}

// AMQP returns the URL of the shared RabbitMQ broker.
func AMQP(t testing.TB) string {
	t.Helper()
	return find(t, "AMQP_URL", "rabbitmq")
}

func find(t testing.TB, env, which string) string {
	t.Helper()
	u := os.Getenv(env)
	var why string
	if u == "" {
		out, err := script(nil, "url", which)
		if err == nil {
			u = strings.TrimSpace(out)
		} else {
			why = fmt.Sprintf("%s is not set and scripts/brokers.sh has no running %s (%v)", env, which, err)
		}
	}
	if u != "" {
		if err := reachable(u); err != nil {
			why = fmt.Sprintf("%s at %s does not answer: %v", which, redact(u), err)
			u = ""
		}
	}
	if u == "" {
		if ci := os.Getenv("CI"); ci != "" {
			t.Fatalf("no %s broker (CI=%s requires one): %s", which, ci, why)
		}
		t.Skipf("no %s broker: %s; start it with `make brokers` (scripts/brokers.sh start)", which, why)
	}
	return u
}

// Broker is a private broker a test stops and starts at will.
type Broker struct {
	t     testing.TB
	dir   string
	which string
	URL   string
}

// Private starts a broker of its own ("nats" or "rabbitmq") in a temporary
// directory, on free ports, and stops it when the test ends. It fails or
// skips like NATS and AMQP when the broker cannot be started.
func Private(t testing.TB, which string) *Broker {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgsweep-broker-")
	if err != nil {
		t.Fatal(err)
	}
	b := &Broker{t: t, dir: dir, which: which}
	t.Cleanup(func() {
		_, _ = script([]string{"PGSWEEP_BROKERS_DIR=" + dir}, "stop", which)
		_ = os.RemoveAll(dir)
	})
	out, err := script([]string{"PGSWEEP_BROKERS_DIR=" + dir}, "start", which)
	if err != nil {
		if ci := os.Getenv("CI"); ci != "" {
			t.Fatalf("cannot start a private %s (CI=%s requires it): %v\n%s", which, ci, err, out)
		}
		t.Skipf("cannot start a private %s: %v\n%s", which, err, out)
	}
	b.URL = strings.TrimSpace(out)
	return b
}

// Stop stops the broker (its data stays).
func (b *Broker) Stop() {
	b.t.Helper()
	if out, err := script([]string{"PGSWEEP_BROKERS_DIR=" + b.dir}, "stop", b.which); err != nil {
		b.t.Fatalf("stop %s: %v\n%s", b.which, err, out)
	}
}

// Start starts it again, on the same port.
func (b *Broker) Start() {
	b.t.Helper()
	if out, err := script([]string{"PGSWEEP_BROKERS_DIR=" + b.dir}, "start", b.which); err != nil {
		b.t.Fatalf("start %s: %v\n%s", b.which, err, out)
	}
}

// script runs scripts/brokers.sh with args; stdout is returned, stderr is
// part of the error.
func script(env []string, args ...string) (string, error) {
	root, err := pgtest.RepoRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "brokers.sh"), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// the brokers outlive this process: do not wait for their inherited pipes
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// reachable: something accepts TCP connections at the URL's host.
func reachable(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
