package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/scratch"
)

// The demo is a user's first contact: it must converge and pass its own
// verification on a small run.
func TestDemoConvergesAndVerifies(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	var out bytes.Buffer
	err := Run(context.Background(), Options{DB: scratch.DB{URL: url, Schema: schema},
		Messages: 600, CapRows: 5000, Timeout: 90 * time.Second}, &out)
	if err != nil || !strings.Contains(out.String(), "all checks passed") || strings.Contains(out.String(), "FAIL") {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	var comment string
	if err := pgtest.Conn(t, url).QueryRow(context.Background(),
		"SELECT obj_description($1::regnamespace, 'pg_namespace')", schema).Scan(&comment); err != nil || comment != scratch.Marker("demo") {
		t.Fatalf("the demo's schema is not marked as its scratch schema: %q %v", comment, err)
	}
}
