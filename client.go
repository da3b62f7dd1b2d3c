package pgsweep

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// Client calls pgsweep's SQL functions in one schema. It holds no state but
// the schema's quoted name; it is safe for concurrent use when its DBTX is.
type Client struct {
	db     DBTX
	schema string
	q      string       // quoted schema, ready to prefix a function name
	tracer trace.Tracer // nil: the global provider's, looked up at each send
}

// ClientOptions configures a Client. The zero value is valid.
type ClientOptions struct {
	// Schema pgsweep was installed into; DefaultSchema when empty.
	Schema string
	// TracerProvider receives the spans of Send and SendBatch
	// (docs/tracing.md); nil: the global provider (otel.GetTracerProvider),
	// a no-op until the application sets one.
	TracerProvider trace.TracerProvider
}

// NewClient returns a Client that runs its SQL on db.
func NewClient(db DBTX, opts *ClientOptions) (*Client, error) {
	schema := DefaultSchema
	if opts != nil && opts.Schema != "" {
		schema = opts.Schema
	}
	if err := ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("pgsweep: new client: %w", err)
	}
	if db == nil {
		return nil, fmt.Errorf("pgsweep: new client: db is nil")
	}
	var tp trace.TracerProvider
	if opts != nil {
		tp = opts.TracerProvider
	}
	return &Client{db: db, schema: schema, q: pgx.Identifier{schema}.Sanitize(), tracer: newTracer(tp)}, nil
}

// Schema returns the schema the client calls into.
func (c *Client) Schema() string { return c.schema }

// WithDB returns a client on the same schema that runs its SQL on db, for
// example inside the application's transaction.
func (c *Client) WithDB(db DBTX) *Client {
	cp := *c
	cp.db = db
	return &cp
}

// fn returns the schema-qualified name of a pgsweep function.
func (c *Client) fn(name string) string { return c.q + "." + name }

// tr returns the client's tracer (a zero Client's: the global provider's).
func (c *Client) tr() trace.Tracer {
	if c.tracer != nil {
		return c.tracer
	}
	return newTracer(nil)
}
