package main

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/pgsweep/pgsweep/ui"
)

func runUI(ctx context.Context, args []string, out io.Writer) error {
	fs, db := newDBFlagSet("ui")
	addr := fs.String("addr", "127.0.0.1:8080", "serve the dashboard on this address (another host than 127.0.0.1 exposes it: use --basic-auth-file)")
	readOnly := fs.Bool("read-only", false, "show no action, whatever the database role may do")
	authFile := fs.String("basic-auth-file", "", "require HTTP basic auth: a file of user:password lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := db.validate(); err != nil {
		return err
	}
	o := ui.Options{Schema: db.schema, ReadOnly: *readOnly, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	if *authFile != "" {
		check, err := readBasicAuth(*authFile)
		if err != nil {
			return fmt.Errorf("%w: --basic-auth-file: %v", errUsage, err)
		}
		o.BasicAuth = check
	}
	pool, err := db.pool(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	h, err := ui.NewHandler(pool, o)
	if err != nil {
		return err
	}
	a, stop, err := startHTTP(*addr, h, o.Logger)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	defer stop()
	fmt.Fprintf(out, "pgsweep ui: serving the dashboard of schema %s on http://%s/\n", db.schema, a)
	<-ctx.Done()
	return nil
}

// readBasicAuth reads user:password lines (blank lines and # comments
// aside) and returns the check of a request's credentials, in constant
// time per entry.
func readBasicAuth(path string) (func(user, password string) bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type entry struct{ user, password []byte }
	var es []entry
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		u, p, ok := strings.Cut(line, ":")
		if !ok || u == "" || p == "" {
			return nil, fmt.Errorf("line %d: want user:password", n)
		}
		es = append(es, entry{[]byte(u), []byte(p)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(es) == 0 {
		return nil, errors.New("no user:password line")
	}
	return func(user, password string) bool {
		ok := 0
		for _, e := range es {
			ok |= subtle.ConstantTimeCompare(e.user, []byte(user)) & subtle.ConstantTimeCompare(e.password, []byte(password))
		}
		return ok == 1
	}, nil
}
