package main

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/pgsweep/pgsweep/ui"
)

func runUI(ctx context.Context, args []string, out io.Writer) error {
	fs, db := newDBFlagSet("ui")
	addr := fs.String("addr", "127.0.0.1:8080", "serve the dashboard on this address (a non-loopback address needs --basic-auth-file)")
	readOnly := fs.Bool("read-only", false, "show no action, whatever the database role may do")
	authFile := fs.String("basic-auth-file", "", "require HTTP basic auth: a file of user:password lines (put TLS in front of it)")
	var hosts stringList
	fs.Var(&hosts, "host", "a name (host or host:port) the dashboard is reached by, besides the loopback names; repeat for several")
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
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("%w: --addr: %v", errUsage, err)
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" && o.BasicAuth == nil {
		return fmt.Errorf("%w: --addr %s is reachable from other machines: give --basic-auth-file (and put TLS in front), or bind to 127.0.0.1", errUsage, *addr)
	}
	pool, err := db.pool(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	// Only the names it is reached by: a page whose name an attacker points
	// at 127.0.0.1 (DNS rebinding) is refused, not served same-origin.
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	o.AllowedHosts = append([]string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("localhost", port), net.JoinHostPort("::1", port)}, hosts...)
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() { // the name or address it was given
		o.AllowedHosts = append(o.AllowedHosts, net.JoinHostPort(host, port))
	}
	h, err := ui.NewHandler(pool, o)
	if err != nil {
		ln.Close()
		return err
	}
	defer serveHTTP(ln, h, o.Logger)()
	fmt.Fprintf(out, "pgsweep ui: serving the dashboard of schema %s on http://%s/\n", db.schema, ln.Addr())
	<-ctx.Done()
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

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
