package main

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep/ui"
)

func runUI(ctx context.Context, args []string, out io.Writer) error {
	fs, db := newDBFlagSet("ui")
	addr := fs.String("addr", "127.0.0.1:8080", "serve the dashboard on this address (a non-loopback address needs --basic-auth-file)")
	uf := addUIFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := db.validate(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := uf.check("--addr", *addr); err != nil {
		return err
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
	h, err := uf.handler(pool, db.schema, *addr, ln, logger)
	if err != nil {
		ln.Close()
		return err
	}
	defer serveHTTP(ln, h, logger)()
	fmt.Fprintf(out, "pgsweep ui: serving the dashboard of schema %s on http://%s/\n", db.schema, ln.Addr())
	<-ctx.Done()
	return nil
}

// uiFlags are the dashboard's flags, shared by `pgsweep ui` and
// `pgsweep run --ui`.
type uiFlags struct {
	readOnly *bool
	authFile *string
	hosts    stringList
	auth     func(user, password string) bool // read from authFile by check
}

func addUIFlags(fs *flag.FlagSet) *uiFlags {
	f := &uiFlags{
		readOnly: fs.Bool("read-only", false, "show no action on the dashboard, whatever the database role may do"),
		authFile: fs.String("basic-auth-file", "", "require HTTP basic auth for the dashboard: a file of user:password lines (put TLS in front of it)"),
	}
	fs.Var(&f.hosts, "host", "a name (host or host:port) the dashboard is reached by, besides the loopback names; repeat for several")
	return f
}

// check reads the basic auth file and refuses an address other machines
// reach without it (flag names the address's flag in the error).
func (f *uiFlags) check(flagName, addr string) error {
	if *f.authFile != "" {
		check, err := readBasicAuth(*f.authFile)
		if err != nil {
			return fmt.Errorf("%w: --basic-auth-file: %v", errUsage, err)
		}
		f.auth = check
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errUsage, flagName, err)
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" && f.auth == nil {
		return fmt.Errorf("%w: %s %s is reachable from other machines: give --basic-auth-file (and put TLS in front), or bind to 127.0.0.1", errUsage, flagName, addr)
	}
	return nil
}

// handler builds the dashboard for the listener ln opened on addr (after check).
func (f *uiFlags) handler(pool *pgxpool.Pool, schema, addr string, ln net.Listener, logger *slog.Logger) (http.Handler, error) {
	o := ui.Options{Schema: schema, ReadOnly: *f.readOnly, Logger: logger, BasicAuth: f.auth}
	// Only the names it is reached by: a page whose name an attacker points
	// at 127.0.0.1 (DNS rebinding) is refused, not served same-origin.
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	_, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return nil, err
	}
	o.AllowedHosts = append([]string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("localhost", port), net.JoinHostPort("::1", port)}, f.hosts...)
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() { // the name or address it was given
		o.AllowedHosts = append(o.AllowedHosts, net.JoinHostPort(host, port))
	}
	return ui.NewHandler(pool, o)
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
