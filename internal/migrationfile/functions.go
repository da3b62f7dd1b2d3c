package migrationfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// FunctionFile is one file of sql/functions, cut into statements.
type FunctionFile struct {
	// Path is how a migration names it: functions/x.sql.
	Path       string
	Text       string
	Statements []Statement
}

// ReadFunctions reads sqlDir/functions/*.sql in name order. A function file
// holds only CREATE [OR REPLACE] FUNCTION, PROCEDURE and VIEW statements
// (and tern actions such as {{ $s := .schema }}), each object once across
// all files: anything else is an error, since a migration carries a file's
// statements one object at a time.
func ReadFunctions(sqlDir string) ([]FunctionFile, error) {
	paths, err := filepath.Glob(filepath.Join(sqlDir, "functions", "*.sql"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	seen := map[string]string{}
	var out []FunctionFile
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		f := FunctionFile{Path: "functions/" + filepath.Base(p), Text: string(b)}
		if f.Statements, err = Split(f.Text); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		for _, s := range f.Statements {
			switch {
			case s.Template:
			case s.Key == "":
				return nil, fmt.Errorf("%s: %.60q is not a CREATE [OR REPLACE] FUNCTION, PROCEDURE or VIEW statement", f.Path, s.Text)
			case seen[s.Key] != "":
				return nil, fmt.Errorf("%s: %s is also defined in %s", f.Path, s.Key, seen[s.Key])
			default:
				seen[s.Key] = f.Path
			}
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no function files in %s/functions", sqlDir)
	}
	return out, nil
}
