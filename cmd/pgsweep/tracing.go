package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pgsweep/pgsweep"
)

// Tracing in the long-running commands (pgsweep run, pgsweep relay):
// OTLP/HTTP export of their spans, configured by the standard OpenTelemetry
// environment variables and off unless an endpoint is set
// (docs/operations.md, "Tracing"). The exporter itself reads the other
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, TLS, compression), the
// SDK reads OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_*. The provider becomes
// the global one, which the runner, the relay and the client use when no
// TracerProvider is given to them.

// The environment variables read here.
const (
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envExporter       = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envSampler        = "OTEL_TRACES_SAMPLER"
	envSamplerArg     = "OTEL_TRACES_SAMPLER_ARG"
	envResourceAttrs  = "OTEL_RESOURCE_ATTRIBUTES"
	envServiceName    = "OTEL_SERVICE_NAME"
)

// tracingShutdownTimeout bounds the flush of the spans still buffered at exit.
const tracingShutdownTimeout = 5 * time.Second

// exportSettings is what the environment asks of the trace export.
type exportSettings struct {
	on     bool
	reason string // why it is off
	url    string // where spans go (OTLP/HTTP)
	from   string // the variable that named it
}

// readExportSettings checks the variables pgsweep interprets itself: a value
// it cannot honour is an error naming the variable.
func readExportSettings(getenv func(string) string) (exportSettings, error) {
	if v := strings.TrimSpace(getenv(envSDKDisabled)); strings.EqualFold(v, "true") {
		return exportSettings{reason: envSDKDisabled + "=true"}, nil
	}
	switch v := strings.TrimSpace(getenv(envExporter)); v {
	case "", "otlp":
	case "none":
		return exportSettings{reason: envExporter + "=none"}, nil
	default:
		return exportSettings{}, fmt.Errorf("%s=%q: pgsweep exports traces with otlp only (or none: no export)", envExporter, v)
	}
	var s exportSettings
	for _, name := range []string{envEndpoint, envTracesEndpoint} {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil {
			return exportSettings{}, fmt.Errorf("%s: want an http:// or https:// URL with a host (OTLP/HTTP), got a value that is not a URL", name)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return exportSettings{}, fmt.Errorf("%s: want an http:// or https:// URL with a host (OTLP/HTTP), got %q", name, u.Redacted())
		}
		// The per-signal variable wins; it is the URL itself, the general
		// one the base of /v1/traces (as the exporter reads them).
		s.on, s.from = true, name
		if name == envEndpoint {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		} else if u.Path == "" {
			u.Path = "/"
		}
		s.url = u.Redacted()
	}
	if !s.on {
		return exportSettings{reason: "neither " + envEndpoint + " nor " + envTracesEndpoint + " is set"}, nil
	}
	proto, protoVar := getenv(envTracesProtocol), envTracesProtocol
	if proto == "" {
		proto, protoVar = getenv(envProtocol), envProtocol
	}
	if p := strings.TrimSpace(proto); p != "" && p != "http/protobuf" {
		return exportSettings{}, fmt.Errorf("%s=%q: pgsweep exports OTLP over HTTP only: set it to http/protobuf, or unset it", protoVar, p)
	}
	if err := checkSampler(getenv); err != nil {
		return exportSettings{}, err
	}
	return s, nil
}

// checkSampler refuses a sampler the SDK would ignore (it logs the error and
// samples everything).
func checkSampler(getenv func(string) string) error {
	sampler := strings.ToLower(strings.TrimSpace(getenv(envSampler)))
	switch sampler {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return nil
	case "traceidratio", "parentbased_traceidratio":
		arg := strings.TrimSpace(getenv(envSamplerArg))
		if arg == "" {
			return nil
		}
		if r, err := strconv.ParseFloat(arg, 64); err != nil || r < 0 || r > 1 {
			return fmt.Errorf("%s=%q: want a ratio between 0 and 1", envSamplerArg, arg)
		}
		return nil
	default:
		return fmt.Errorf("%s=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", envSampler, sampler)
	}
}

// setupTracing starts the export of the command's spans when the
// environment asks for it (readExportSettings) and makes its provider the
// global one; service is service.name unless OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) names it. stop flushes the spans still
// buffered (at most tracingShutdownTimeout) and ends the export; it does
// nothing when the export is off.
func setupTracing(ctx context.Context, service string, logger *slog.Logger) (stop func(), err error) {
	s, err := readExportSettings(os.Getenv)
	if err != nil {
		return nil, err
	}
	if !s.on {
		logger.Info("tracing export off", "reason", s.reason)
		return func() {}, nil
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", pgsweep.Version)),
		resource.WithFromEnv()) // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	if err != nil {
		return nil, fmt.Errorf("%s or %s: %w", envResourceAttrs, envServiceName, err)
	}
	exp, err := otlptracehttp.New(ctx) // reads OTEL_EXPORTER_OTLP_*
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("tracing export", "error", err) }))
	name, _ := res.Set().Value("service.name")
	logger.Info("tracing export on", "endpoint", s.url, "from", s.from, "protocol", "http/protobuf", "service", name.AsString())
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Warn("tracing: could not flush the last spans", "error", err)
			return
		}
		logger.Debug("tracing: spans flushed")
	}, nil
}
