package pgtest

import (
	"errors"
	"os"
	"path/filepath"
)

// RepoRoot returns the repository's root, above the working directory: the
// nearest directory holding both a go.mod and sql/functions, so that a test
// in a nested module (relay/nats, cmd/pgsweep) finds the repository's root
// and not its own module's.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRoot(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("pgtest: no directory with go.mod and sql/functions above the working directory")
		}
		dir = parent
	}
}

func isRoot(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return false
	}
	fi, err := os.Stat(filepath.Join(dir, "sql", "functions"))
	return err == nil && fi.IsDir()
}
