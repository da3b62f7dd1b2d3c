// The tracing tests (make test): tests only, a module of their own so that the OpenTelemetry SDK stays out of the library's go.mod.
module github.com/pgsweep/pgsweep/internal/tracingtest

go 1.26.0

replace github.com/pgsweep/pgsweep => ../..

replace github.com/pgsweep/pgsweep/runner => ../../runner

replace github.com/pgsweep/pgsweep/relay => ../../relay

replace github.com/pgsweep/pgsweep/relay/nats => ../../relay/nats

replace github.com/pgsweep/pgsweep/relay/amqp => ../../relay/amqp

require (
	github.com/pgsweep/pgsweep/runner v0.0.0-00010101000000-000000000000
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
)

require (
	dario.cat/mergo v1.0.2 // indirect
	github.com/Masterminds/goutils v1.1.1 // indirect
	github.com/Masterminds/semver/v3 v3.3.0 // indirect
	github.com/Masterminds/sprig/v3 v3.3.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/huandu/xstrings v1.5.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jackc/tern/v2 v2.3.4 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/shopspring/decimal v1.4.0 // indirect
	github.com/spf13/cast v1.7.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgx/v5 v5.10.0
	github.com/nats-io/nats.go v1.55.0
	github.com/pgsweep/pgsweep v0.0.0-00010101000000-000000000000
	github.com/pgsweep/pgsweep/relay v0.0.0-00010101000000-000000000000
	github.com/pgsweep/pgsweep/relay/amqp v0.0.0-00010101000000-000000000000
	github.com/pgsweep/pgsweep/relay/nats v0.0.0-00010101000000-000000000000
	github.com/rabbitmq/amqp091-go v1.16.0
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
