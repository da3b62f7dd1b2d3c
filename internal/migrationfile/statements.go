package migrationfile

import (
	"fmt"
	"strings"
)

// Statement is one top-level SQL statement of a function file or a
// migration.
type Statement struct {
	// Text runs from the statement's first token to its semicolon: the
	// comments and blank lines before it are not part of it.
	Text string
	// Key names the object a CREATE [OR REPLACE] FUNCTION, PROCEDURE or
	// VIEW installs: "function name(type, ...)" (argument types only, OUT
	// arguments left out, as PostgreSQL identifies a function),
	// "procedure name(type, ...)" or "view name". Empty for other statements.
	Key string
	// Drops lists, for DROP FUNCTION, PROCEDURE or VIEW, what it removes:
	// a Key, or "function name(*)" when no argument list is given.
	Drops []string
	// Template is a tern action standing between statements, such as
	// {{ $s := .schema | default "pgsweep" -}}: it renders to no SQL, but
	// the statements after it may use what it defines.
	Template bool
}

// Split cuts sql into its top-level statements: it ends one at every
// semicolon outside comments (-- and nested /* */), quoted strings ('...',
// E'...' with backslash escapes), quoted identifiers ("...") and dollar
// quotes ($$...$$, $tag$...$tag$). A trailing statement without a semicolon
// is returned too. A tern action between statements is a Statement of its
// own (Template); one inside a statement is part of its text.
func Split(sql string) ([]Statement, error) {
	var out []Statement
	start := -1 // offset of the current statement's first token
	i := 0
	for i < len(sql) {
		c := sql[i]
		switch {
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if j := strings.IndexByte(sql[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(sql)
			}
			continue
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			depth, j := 0, i
			for j < len(sql) {
				if strings.HasPrefix(sql[j:], "/*") {
					depth++
					j += 2
				} else if strings.HasPrefix(sql[j:], "*/") {
					depth--
					j += 2
					if depth == 0 {
						break
					}
				} else {
					j++
				}
			}
			if depth != 0 {
				return nil, fmt.Errorf("unterminated /* comment at offset %d", i)
			}
			i = j
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		}
		if start < 0 && strings.HasPrefix(sql[i:], "{{") {
			// a tern action between statements ({{ $s := .schema -}}):
			// renders to no SQL, kept as a statement of its own
			j := strings.Index(sql[i:], "}}")
			if j < 0 {
				return nil, fmt.Errorf("unterminated {{ at offset %d", i)
			}
			out = append(out, Statement{Text: sql[i : i+j+2], Template: true})
			i += j + 2
			continue
		}
		if start < 0 {
			start = i
		}
		switch {
		case c == ';':
			out = append(out, statement(sql[start:i+1]))
			start = -1
			i++
		case c == '\'':
			escapes := i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i < 2 || !isIdent(sql[i-2]))
			j, err := endQuote(sql, i, '\'', escapes)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '"':
			j, err := endQuote(sql, i, '"', false)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$' && (i == 0 || !isIdent(sql[i-1])):
			tag, ok := dollarTag(sql[i:])
			if !ok {
				i++
				continue
			}
			j := strings.Index(sql[i+len(tag):], tag)
			if j < 0 {
				return nil, fmt.Errorf("unterminated dollar quote %s at offset %d", tag, i)
			}
			i += len(tag) + j + len(tag)
		default:
			i++
		}
	}
	if start >= 0 {
		out = append(out, statement(strings.TrimRight(sql[start:], " \t\r\n")))
	}
	return out, nil
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// endQuote returns the offset after the quote that closes the one at i
// (a doubled quote is part of the text; with escapes, so is \').
func endQuote(sql string, i int, q byte, escapes bool) (int, error) {
	for j := i + 1; j < len(sql); j++ {
		switch {
		case escapes && sql[j] == '\\':
			j++
		case sql[j] == q && j+1 < len(sql) && sql[j+1] == q:
			j++
		case sql[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated %c quote at offset %d", q, i)
}

// dollarTag returns the dollar-quote opener at the start of s ($$ or
// $tag$, the tag an identifier not starting with a digit).
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		switch {
		case s[j] == '$':
			return s[:j+1], true
		case !isIdent(s[j]) || j == 1 && s[j] >= '0' && s[j] <= '9':
			return "", false
		}
	}
	return "", false
}

// statement parses the head of text for the object it creates or drops.
func statement(text string) Statement {
	st := Statement{Text: text}
	w := headWords(text)
	pop := func(words ...string) bool {
		if len(w) > 0 {
			for _, x := range words {
				if w[0] == x {
					w = w[1:]
					return true
				}
			}
		}
		return false
	}
	switch {
	case pop("create"):
		if pop("or") {
			pop("replace")
		}
		switch {
		case pop("function"):
			st.Key = routineKey("function", text)
		case pop("procedure"):
			st.Key = routineKey("procedure", text)
		default:
			pop("temp", "temporary")
			pop("recursive")
			if pop("view") && len(w) > 0 {
				st.Key = "view " + objectName(w[0])
			}
		}
	case pop("drop"):
		var kind string
		switch {
		case pop("function"):
			kind = "function"
		case pop("procedure"):
			kind = "procedure"
		case pop("view"):
			kind = "view"
		default:
			return st
		}
		if pop("if") {
			pop("exists")
		}
		st.Drops = dropKeys(kind, text)
	}
	return st
}

// headWords lower-cases the first words of text up to its first "(" or "$".
func headWords(text string) []string {
	for {
		a := strings.Index(text, "{{")
		b := strings.Index(text, "}}")
		if a < 0 || b < a {
			break
		}
		text = text[:a] + strings.TrimPrefix(text[b+2:], ".")
	}
	end := strings.IndexAny(text, "($")
	if end < 0 {
		end = len(text)
	}
	return strings.Fields(strings.ToLower(text[:end]))
}

// objectName strips a schema (or a tern template standing for one) and
// folds an unquoted name to lower case.
func objectName(s string) string {
	s = strings.TrimSpace(s)
	if k := strings.LastIndex(s, "."); k >= 0 {
		s = s[k+1:]
	}
	if strings.HasPrefix(s, `"`) {
		return strings.Trim(s, `"`)
	}
	return strings.ToLower(s)
}

// routineKey is "kind name(types)" from the text after FUNCTION/PROCEDURE.
func routineKey(kind, text string) string {
	open := strings.IndexByte(text, '(')
	if open < 0 {
		return ""
	}
	head := strings.Fields(text[:open])
	name := objectName(head[len(head)-1])
	closeAt := matchParen(text, open)
	if closeAt < 0 {
		return ""
	}
	return kind + " " + name + "(" + argTypes(kind, text[open+1:closeAt]) + ")"
}

// dropKeys lists the keys a DROP FUNCTION/PROCEDURE/VIEW statement names.
func dropKeys(kind, text string) []string {
	// the text after DROP kind [IF EXISTS]
	rest := text
	for _, word := range []string{"drop", kind} {
		rest = strings.TrimSpace(rest)
		rest = rest[len(word):]
	}
	rest = strings.TrimSpace(rest)
	if strings.HasPrefix(strings.ToLower(rest), "if") {
		rest = strings.TrimSpace(strings.TrimSpace(rest[2:])[len("exists"):])
	}
	rest = strings.TrimSuffix(strings.TrimSpace(rest), ";")
	var keys []string
	for _, item := range splitTop(rest) {
		item = strings.TrimSpace(item)
		fields := strings.Fields(strings.ToLower(item))
		for len(fields) > 1 && (fields[len(fields)-1] == "cascade" || fields[len(fields)-1] == "restrict") {
			item = strings.TrimSpace(item[:strings.LastIndex(strings.ToLower(item), fields[len(fields)-1])])
			fields = fields[:len(fields)-1]
		}
		open := strings.IndexByte(item, '(')
		switch {
		case kind == "view":
			keys = append(keys, "view "+objectName(item))
		case open < 0:
			keys = append(keys, kind+" "+objectName(item)+"(*)")
		default:
			closeAt := matchParen(item, open)
			if closeAt < 0 {
				continue
			}
			keys = append(keys, kind+" "+objectName(item[:open])+"("+argTypes(kind, item[open+1:closeAt])+")")
		}
	}
	return keys
}

func matchParen(s string, open int) int {
	depth := 0
	for j := open; j < len(s); j++ {
		switch s[j] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// splitTop splits s at the commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, from := 0, 0
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[from:j])
				from = j + 1
			}
		}
	}
	if strings.TrimSpace(s[from:]) != "" {
		out = append(out, s[from:])
	}
	return out
}

// typeStarts are the words that begin a type of several words: an argument
// whose first word is one of them has no name.
var typeStarts = map[string]bool{"double": true, "character": true, "timestamp": true, "time": true, "bit": true, "interval": true, "national": true}

// typeAliases maps PostgreSQL's type aliases to one spelling.
var typeAliases = map[string]string{
	"int": "integer", "int4": "integer", "int8": "bigint", "int2": "smallint", "bool": "boolean",
	"float8": "double precision", "float4": "real", "decimal": "numeric", "varchar": "character varying",
	"timestamptz": "timestamp with time zone", "timetz": "time with time zone",
}

// argTypes reduces an argument list to its types, as PostgreSQL identifies a
// routine: names, defaults and a function's OUT arguments left out.
func argTypes(kind, args string) string {
	var types []string
	for _, a := range splitTop(args) {
		f := strings.Fields(strings.ToLower(squeezeParens(a)))
		for k, x := range f {
			if x == "default" || strings.HasPrefix(x, "=") {
				f = f[:k]
				break
			}
			if e := strings.IndexByte(x, '='); e > 0 {
				f[k] = x[:e]
				f = f[:k+1]
				break
			}
		}
		if len(f) == 0 {
			continue
		}
		mode := f[0]
		switch mode {
		case "in", "out", "inout", "variadic":
			f = f[1:]
		default:
			mode = "in"
		}
		if mode == "out" && kind == "function" {
			continue
		}
		if len(f) > 1 && !typeStarts[strings.TrimRight(f[0], "[]")] {
			f = f[1:]
		}
		if len(f) == 0 {
			continue
		}
		base, arr := f[0], ""
		if k := strings.IndexByte(base, '['); k >= 0 {
			base, arr = base[:k], base[k:]
		}
		if a, ok := typeAliases[base]; ok {
			base = a
		}
		f[0] = base + arr
		types = append(types, strings.Join(f, " "))
	}
	return strings.Join(types, ", ")
}

// squeezeParens drops the white space inside parentheses: numeric(10, 2)
// is one word.
func squeezeParens(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
		case depth > 0 && (r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
