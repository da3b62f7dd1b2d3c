package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
)

// serviceFlags are the flags that pgsweep run and pgsweep relay, the
// long-running commands, share: where they serve /metrics and /healthz and
// how they log.
type serviceFlags struct {
	httpAddr  *string
	logFormat *string
	verbose   *bool
}

// addServiceFlags registers the service flags on fs: --http-addr with its
// default address, --log-format, and --verbose with what it adds.
func addServiceFlags(fs *flag.FlagSet, httpAddr, verboseUsage string) *serviceFlags {
	return &serviceFlags{
		httpAddr:  fs.String("http-addr", httpAddr, "serve /metrics and /healthz on this address (empty: no HTTP server)"),
		logFormat: fs.String("log-format", "text", "log format: text or json"),
		verbose:   fs.Bool("verbose", false, verboseUsage),
	}
}

// logger is the command's logger on stderr, at debug level with --verbose.
func (s *serviceFlags) logger() (*slog.Logger, error) {
	level := slog.LevelInfo
	if *s.verbose {
		level = slog.LevelDebug
	}
	return newLogger(os.Stderr, *s.logFormat, level)
}

// serve serves h (the command's /metrics and /healthz) on --http-addr in
// the background (serveHTTP) until stop is called; with --http-addr empty
// it serves nothing.
func (s *serviceFlags) serve(h http.Handler, logger *slog.Logger) (stop func(), err error) {
	return s.serveWith(logger, func(net.Listener) (http.Handler, error) { return h, nil })
}

// serveWith is serve with the handler made for the listener (the
// dashboard needs the port it is reached on).
func (s *serviceFlags) serveWith(logger *slog.Logger, handler func(net.Listener) (http.Handler, error)) (stop func(), err error) {
	if *s.httpAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", *s.httpAddr)
	if err != nil {
		return nil, fmt.Errorf("--http-addr: %w", err)
	}
	h, err := handler(ln)
	if err != nil {
		ln.Close()
		return nil, err
	}
	stop = serveHTTP(ln, h, logger)
	logger.Info("serving /metrics and /healthz", "addr", ln.Addr().String())
	return stop, nil
}
