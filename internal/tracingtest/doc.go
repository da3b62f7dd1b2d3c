// Package tracingtest holds the tracing tests (docs/tracing.md): the
// spans and headers of Send, the Worker, the relay and the runner, caught
// by an in-memory exporter (the OpenTelemetry SDK's tracetest), on a real
// PostgreSQL and real brokers. A module of its own so that the SDK stays
// out of the library's go.mod.
package tracingtest
