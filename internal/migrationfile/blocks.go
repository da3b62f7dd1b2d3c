package migrationfile

import (
	"fmt"
	"strings"
)

// ChangedMarker opens a block that holds, of one function file, only the
// statements that differ from what the migrations before it install; it is
// closed by EndMarker like an include. `make migration` writes these blocks
// and `make migration-sync` recomputes them.
const ChangedMarker = "-- pgsweep:changed"

// Block is an include or changed block of a migration.
type Block struct {
	Marker string // IncludeMarker or ChangedMarker
	Path   string // functions/x.sql
	Body   string // the text between the marker lines
}

// Part is a piece of a migration: a block, or (Block nil) the text
// between blocks.
type Part struct {
	Text  string
	Block *Block
}

// Parts cuts a migration into the text between blocks and its blocks, in
// order.
func Parts(migration string) ([]Part, error) {
	var out []Part
	var seg, body strings.Builder
	var cur *Block
	for _, line := range strings.SplitAfter(migration, "\n") {
		trimmed := strings.TrimRight(line, "\r\n")
		if cur == nil {
			for _, m := range []string{IncludeMarker, ChangedMarker} {
				if strings.HasPrefix(trimmed, m+" ") {
					cur = &Block{Marker: m, Path: strings.TrimSpace(strings.TrimPrefix(trimmed, m))}
				}
			}
			if cur == nil {
				seg.WriteString(line)
				continue
			}
			out = append(out, Part{Text: seg.String()})
			seg.Reset()
			body.Reset()
			continue
		}
		if strings.HasPrefix(trimmed, EndMarker+" ") {
			if got := strings.TrimSpace(strings.TrimPrefix(trimmed, EndMarker)); got != cur.Path {
				return nil, fmt.Errorf("%s %s closes %s", EndMarker, got, cur.Path)
			}
			cur.Body = body.String()
			out = append(out, Part{Block: cur})
			cur = nil
			continue
		}
		body.WriteString(line)
	}
	if cur != nil {
		return nil, fmt.Errorf("%s %s is never closed", cur.Marker, cur.Path)
	}
	return append(out, Part{Text: seg.String()}), nil
}
