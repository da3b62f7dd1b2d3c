package pgsweep_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/runner"
)

// Connections pgsweep opens pin search_path to pg_catalog, pg_temp, even
// when the connection string asks for another one: PinSearchPath, and the
// runner's connections, which go through it.
func TestPinSearchPath(t *testing.T) {
	ctx := context.Background()
	url := pgtest.WithParam(pgtest.URL(t), "search_path", "public")
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	show := func(t *testing.T, c interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		t.Helper()
		var v string
		if err := c.QueryRow(ctx, "SELECT pg_catalog.current_setting('search_path')").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Run("control: the connection string's search_path", func(t *testing.T) {
		conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if got := show(t, conn); got != "public" {
			t.Fatalf("search_path %q, want the connection string's public", got)
		}
	})
	t.Run("PinSearchPath", func(t *testing.T) {
		c := cfg.Copy()
		pgsweep.PinSearchPath(c)
		conn, err := pgx.ConnectConfig(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if got := show(t, conn); got != pgsweep.SafeSearchPath {
			t.Fatalf("search_path %q, want %q", got, pgsweep.SafeSearchPath)
		}
		// RESET (tern runs RESET ALL) returns to the startup value.
		if _, err := conn.Exec(ctx, "SET search_path = public; RESET ALL"); err != nil {
			t.Fatal(err)
		}
		if got := show(t, conn); got != pgsweep.SafeSearchPath {
			t.Fatalf("after RESET ALL: search_path %q, want %q", got, pgsweep.SafeSearchPath)
		}
	})
	t.Run("runner", func(t *testing.T) {
		conn, err := runner.ConnectConfig(cfg, "search-path-test")(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if got := show(t, conn); got != pgsweep.SafeSearchPath {
			t.Fatalf("runner connection: search_path %q, want %q", got, pgsweep.SafeSearchPath)
		}
	})
}

// TestGoStatementsQualified is the static half of the rule the shadow suite
// proves at run time (docs/security.md, "Go statements and search_path"):
// in the SQL string literals of pgsweep's Go code -- the root package,
// runner, relay and the CLI -- no operator is written bare (=, <>, <, <=,
// >, >=, ||, +: OPERATOR(pg_catalog.=) instead) and no function is called
// by a bare name (pg_catalog.now(), or pgsweep's through Client.fn). It
// also reaches statements no test runs.
func TestGoStatementsQualified(t *testing.T) {
	sqlStart := regexp.MustCompile(`(?s)^\s*(SELECT|CALL|WITH|INSERT|UPDATE|DELETE|FROM|WHERE|AND|OR|LOCK|CREATE TABLE)\b`)
	quoted := regexp.MustCompile(`'[^']*'`)
	assign := regexp.MustCompile(`(?i)\bSET\s+(LOCAL\s+)?\w+\s*=`)
	bareOp := regexp.MustCompile(`\s(=|<>|!=|<=|>=|<|>|\|\||\+)\s`)
	call := regexp.MustCompile(`(^|[^.\w"])([A-Za-z_][A-Za-z0-9_]*)\s*\(`)
	grammar := map[string]bool{ // SQL keywords and grammar that look nothing up, and aliases with column lists
		"coalesce": true, "exists": true, "extract": true, "any": true, "all": true, "in": true, "values": true,
		"filter": true, "nullif": true, "greatest": true, "least": true, "cast": true, "row": true, "array": true,
		"over": true, "not": true, "operator": true, "and": true, "or": true, "as": true, "on": true, "using": true, "ordinality": true,
		"select": true, "from": true, "where": true, "t": true, "x": true,
	}
	var files []string
	for _, dir := range []string{".", "runner", "relay", "relay/nats", "relay/amqp", "cmd/pgsweep"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if !strings.HasSuffix(f, "_test.go") {
				files = append(files, f)
			}
		}
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		// A literal is SQL when it starts like a statement or a clause, or
		// when it is concatenated (+) with one that does: the middle and the
		// tail of a statement built from pieces are checked too.
		inSQLChain := map[*ast.BasicLit]bool{}
		ast.Inspect(file, func(n ast.Node) bool {
			be, ok := n.(*ast.BinaryExpr)
			if !ok || be.Op != token.ADD {
				return true
			}
			lits := chainLiterals(be)
			for _, bl := range lits {
				if s, err := strconv.Unquote(bl.Value); err == nil && sqlStart.MatchString(s) {
					for _, l := range lits {
						inSQLChain[l] = true
					}
					break
				}
			}
			return true
		})
		ast.Inspect(file, func(n ast.Node) bool {
			bl, ok := n.(*ast.BasicLit)
			if !ok || bl.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(bl.Value)
			if err != nil || !(sqlStart.MatchString(s) || inSQLChain[bl]) || strings.Contains(s, "%") {
				return true
			}
			checked++
			body := assign.ReplaceAllString(quoted.ReplaceAllString(s, "''"), "SET x")
			if m := bareOp.FindStringSubmatch(body); m != nil {
				t.Errorf("%s: operator %s written bare (OPERATOR(pg_catalog.%s)): %s", fset.Position(bl.Pos()), m[1], m[1], s)
			}
			for _, m := range call.FindAllStringSubmatch(body, -1) {
				if !grammar[strings.ToLower(m[2])] {
					t.Errorf("%s: function %s( called by a bare name (pg_catalog.%s, or Client.fn): %s", fset.Position(bl.Pos()), m[2], m[2], s)
				}
			}
			return true
		})
	}
	t.Logf("%d SQL literals checked", checked)
	if checked < 50 {
		t.Fatalf("only %d SQL literals found: the scan is broken", checked)
	}
}

// chainLiterals returns the string literals of a chain of + (a statement
// built from pieces), wherever they stand in it.
func chainLiterals(e ast.Expr) []*ast.BasicLit {
	switch e := e.(type) {
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			return append(chainLiterals(e.X), chainLiterals(e.Y)...)
		}
	case *ast.ParenExpr:
		return chainLiterals(e.X)
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			return []*ast.BasicLit{e}
		}
	}
	return nil
}
