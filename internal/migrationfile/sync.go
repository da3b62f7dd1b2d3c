package migrationfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Plan is what `make migration-sync` would make of the migrations.
type Plan struct {
	// Names are the migration file names, in order; Texts their text as
	// sync writes it (released ones unchanged).
	Names []string
	Texts []string
	// Missing lists the objects of sql/functions that no migration
	// installs as written ("functions/x.sql: function f(integer)") after
	// the sync: a new migration must carry them (`make migration`).
	Missing []string
}

// Sync computes the unreleased migrations from sql/functions. Each block is
// refreshed in the newest migration that has a block for its file (an older
// unreleased migration keeps its text, so that it matches its own DDL):
// an include block gets the whole file, a changed block the statements that
// differ from what the migrations before it (and the statements above it)
// install, and a changed block left empty is removed. When the newest
// migration is unreleased and has changed blocks, every other file with a
// changed statement gets a changed block after its last one.
func Sync(root string) (Plan, error) {
	dir := filepath.Join(root, "migrations")
	sums, err := ReadChecksums(dir)
	if err != nil {
		return Plan{}, err
	}
	names, err := List(dir)
	if err != nil {
		return Plan{}, err
	}
	files, err := ReadFunctions(filepath.Join(root, "sql"))
	if err != nil {
		return Plan{}, err
	}
	byPath := map[string]FunctionFile{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	plan := Plan{Names: names, Texts: make([]string, len(names))}
	newest := map[string]int{}
	for i, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return Plan{}, err
		}
		plan.Texts[i] = string(b)
		parts, err := Parts(plan.Texts[i])
		if err != nil {
			return Plan{}, fmt.Errorf("%s: %w", n, err)
		}
		for _, p := range parts {
			if p.Block != nil {
				newest[p.Block.Path] = i
			}
		}
	}
	in := Installed{}
	apply := func(text string) error {
		sts, err := Split(text)
		if err != nil {
			return err
		}
		in.Apply(sts)
		return nil
	}
	for i, n := range names {
		if i+1 <= sums.Released {
			if err := apply(plan.Texts[i]); err != nil {
				return Plan{}, fmt.Errorf("%s: %w", n, err)
			}
			continue
		}
		parts, err := Parts(plan.Texts[i])
		if err != nil {
			return Plan{}, fmt.Errorf("%s: %w", n, err)
		}
		var out strings.Builder
		appendAt, changedBlocks := -1, 0
		dropped := false // the block before was empty and left out: so is one blank line after it
		for _, p := range parts {
			if p.Block == nil {
				if dropped {
					p.Text = strings.TrimPrefix(p.Text, "\n")
				}
				out.WriteString(p.Text)
				if err := apply(p.Text); err != nil {
					return Plan{}, fmt.Errorf("%s: %w", n, err)
				}
				continue
			}
			b, body := p.Block, p.Block.Body
			if newest[b.Path] == i {
				f, ok := byPath[b.Path]
				if !ok {
					return Plan{}, fmt.Errorf("%s: %s %s: no such file in sql/", n, b.Marker, b.Path)
				}
				if b.Marker == IncludeMarker {
					body = strings.TrimRight(f.Text, "\n") + "\n"
				} else {
					body = in.Changed(f)
				}
			}
			if b.Marker == ChangedMarker {
				changedBlocks++
				if body == "" {
					appendAt, dropped = out.Len(), true
					continue
				}
			}
			dropped = false
			fmt.Fprintf(&out, "%s %s\n%s%s %s\n", b.Marker, b.Path, body, EndMarker, b.Path)
			if b.Marker == ChangedMarker {
				appendAt = out.Len()
			}
			if err := apply(body); err != nil {
				return Plan{}, fmt.Errorf("%s: %w", n, err)
			}
		}
		text := out.String()
		if i == len(names)-1 && changedBlocks > 0 {
			var extra strings.Builder
			for _, f := range files {
				if newest[f.Path] == i {
					continue // its block is above
				}
				if body := in.Changed(f); body != "" {
					fmt.Fprintf(&extra, "\n%s %s\n%s%s %s\n", ChangedMarker, f.Path, body, EndMarker, f.Path)
					if err := apply(body); err != nil {
						return Plan{}, err
					}
				}
			}
			text = text[:appendAt] + extra.String() + text[appendAt:]
		}
		plan.Texts[i] = text
	}
	plan.Missing = in.Missing(files)
	return plan, nil
}
