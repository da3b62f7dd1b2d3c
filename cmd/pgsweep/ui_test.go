package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// pgsweep ui serves the dashboard of the install on the address it prints
// (behind basic auth when given a file), never prints the DSN, and stops
// when its context ends; bad usage exits 2 and serves nothing.
func TestUICommand(t *testing.T) {
	db := pgtest.NewQueue(t, 2, "orders", pgsweep.Outbox, 1)
	auth := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(auth, []byte("# operators\nops:s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := run(ctx, []string{"ui", "--database-url", db.URL, "--schema", db.Schema, "--addr", "127.0.0.1:0", "--basic-auth-file", auth}, pw, io.Discard)
		pw.Close()
		done <- code
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if strings.Contains(line, db.URL) || !strings.Contains(line, "http://127.0.0.1:") {
		t.Fatalf("first line %q: want the address, never the DSN", line)
	}
	url := strings.TrimSpace(line[strings.Index(line, "http://"):])
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without credentials: %d, want 401", res.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.SetBasicAuth("ops", "s3cret")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "orders") {
		t.Fatalf("with credentials: %d\n%s", res.StatusCode, body)
	}
	// DNS rebinding: the same server under another name is refused
	req, _ = http.NewRequest(http.MethodGet, url, nil)
	req.Host = "evil.example:80"
	req.SetBasicAuth("ops", "s3cret")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("another Host: %d, want 421", res.StatusCode)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after the context ended, want 0", code)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("# nobody\nno-colon\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"ui", "--schema", "Bad-Name", "--database-url", db.URL},
		{"ui", "--basic-auth-file", empty, "--database-url", db.URL},
		{"ui", "--basic-auth-file", filepath.Join(t.TempDir(), "missing"), "--database-url", db.URL},
		{"ui", "extra-arg"},
		{"ui", "--addr", "0.0.0.0:0", "--database-url", db.URL}, // reachable from elsewhere without auth
		{"ui", "--addr", "no-port", "--database-url", db.URL},
	} {
		if _, errOut, code := runCLI(t, args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with a message", args, code, errOut)
		}
	}
}
