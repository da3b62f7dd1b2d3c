package pgsweep_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
)

// releaseStore is where the released migration sets live in compact form
// (testdata/releases/README.md): SETS lists, for every set, each file's path
// and the first 16 hex digits of its SHA-256; files/<digits>.sql holds each
// distinct text once.
const releaseStore = "testdata/releases"

// releaseSets reads testdata/releases/SETS and rebuilds every set as a file
// system, checking each stored text against its recorded hash (an edited
// text fails here instead of silently testing something main never shipped).
func releaseSets(t *testing.T) map[string]fstest.MapFS {
	t.Helper()
	sets, err := loadReleaseSets(releaseStore)
	if err != nil {
		t.Fatal(err)
	}
	return sets
}

func loadReleaseSets(store string) (map[string]fstest.MapFS, error) {
	f, err := os.Open(filepath.Join(store, "SETS"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sets := map[string]fstest.MapFS{}
	texts := map[string][]byte{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("SETS line %d: want `set path hash`, got %q", n, line)
		}
		set, path, hash := fields[0], fields[1], fields[2]
		text, ok := texts[hash]
		if !ok {
			text, err = os.ReadFile(filepath.Join(store, "files", hash+".sql"))
			if err != nil {
				return nil, fmt.Errorf("SETS line %d: %w", n, err)
			}
			sum := sha256.Sum256(text)
			if got := hex.EncodeToString(sum[:])[:len(hash)]; got != hash {
				return nil, fmt.Errorf("files/%s.sql was edited (its SHA-256 starts %s): released texts never change", hash, got)
			}
			texts[hash] = text
		}
		if sets[set] == nil {
			sets[set] = fstest.MapFS{}
		}
		sets[set][path] = &fstest.MapFile{Data: text, Mode: 0o644}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(sets) == 0 {
		return nil, fmt.Errorf("no released migration sets in %s/SETS", store)
	}
	return sets, nil
}

// releaseDirs names every released migration set (NN-commit), oldest first.
func releaseDirs(t *testing.T) []string {
	t.Helper()
	sets := releaseSets(t)
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestUpgradeReleaseStoreIsComplete: every stored text belongs to a set (nothing
// dead in files/), every set holds migrations numbered 1..NN as its name
// says, and every set is distinct.
func TestUpgradeReleaseStoreIsComplete(t *testing.T) {
	sets := releaseSets(t)
	used := map[string]bool{}
	b, err := os.ReadFile(filepath.Join(releaseStore, "SETS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && !strings.HasPrefix(f[0], "#") {
			used[f[2]+".sql"] = true
		}
	}
	stored, err := filepath.Glob(filepath.Join(releaseStore, "files", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range stored {
		if !used[filepath.Base(p)] {
			t.Errorf("%s belongs to no set in SETS", p)
		}
	}
	seen := map[string]string{}
	for name, fsys := range sets {
		var migrations, all []string
		for p, f := range fsys {
			all = append(all, p+"="+string(f.Data))
			if !strings.Contains(p, "/") && strings.HasSuffix(p, ".sql") {
				migrations = append(migrations, p)
			}
		}
		sort.Strings(migrations)
		if want := name[:2]; fmt.Sprintf("%02d", len(migrations)) != want {
			t.Errorf("set %s holds %d migrations, its name says %s", name, len(migrations), want)
		}
		for i, m := range migrations {
			if !strings.HasPrefix(m, fmt.Sprintf("%03d_", i+1)) {
				t.Errorf("set %s: migration %s where %03d_ was expected", name, m, i+1)
			}
		}
		sort.Strings(all)
		key := strings.Join(all, "\x00")
		if other, dup := seen[key]; dup {
			t.Errorf("sets %s and %s are the same", name, other)
		}
		seen[key] = name
	}
}
