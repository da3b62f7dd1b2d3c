package pgsweep

import (
	"context"
	"fmt"
)

// Version is the release version of this pgsweep: "0.<LatestVersion()>.<P>",
// where P counts the releases that changed only Go code since the last
// migration (0 on the release that shipped it).
//
// The convention (CHANGELOG.md): before 1.0 the minor version is the schema
// version, the number of the last migration. Every release that changes the
// SQL ships exactly one new migration and so gets the next minor version;
// the version is derived from the embedded migrations, so the binary, the
// migrations it installs and the database it installed them into can never
// disagree about it. The database reports the same number with
// `SELECT <schema>.version()` (0.15 and later) or tern's
// <schema>.schema_version table. A breaking change of the SQL or Go API is
// said so in CHANGELOG.md under its minor version.
var Version = fmt.Sprintf("0.%d.%d", LatestVersion(), goRelease)

// goRelease is Version's patch: the releases since the last migration that
// changed only Go code (tracing, 0.43.1). It goes back to 0 with the next
// migration (TestVersionFollowsMigrationsAndChangelog fails until the
// CHANGELOG's newest entry is this version). A database records only its
// schema version: at 0.43.0 it is current for 0.43.1.
const goRelease = 1

// ReleaseVersion returns the release version of a schema version:
// "0.<schemaVersion>.0" (before 1.0 the minor version is the schema version),
// the release that shipped its migration: what a database at that schema
// version reports (<schema>.version(), InstalledVersion.Version).
func ReleaseVersion(schemaVersion int32) string {
	return fmt.Sprintf("0.%d.0", schemaVersion)
}

// VersionStatus compares a database's install with this binary.
type VersionStatus int

const (
	// NotInstalled: the schema holds no pgsweep (no version table, or version 0).
	NotInstalled VersionStatus = iota
	// Behind: the database is older than this binary; `pgsweep migrate` upgrades it.
	Behind
	// Current: the database is at this binary's version.
	Current
	// Ahead: the database was migrated by a newer pgsweep than this binary,
	// which does not know the newest migrations and must be upgraded itself.
	Ahead
)

// String returns "not installed", "behind", "current" or "ahead".
func (s VersionStatus) String() string {
	switch s {
	case NotInstalled:
		return "not installed"
	case Behind:
		return "behind"
	case Current:
		return "current"
	case Ahead:
		return "ahead"
	}
	return fmt.Sprintf("VersionStatus(%d)", int(s))
}

// InstalledVersion is what DatabaseVersion found in a schema.
type InstalledVersion struct {
	// Schema is the install schema that was read.
	Schema string
	// SchemaVersion is the number of the last migration applied (tern's
	// version table); 0 when pgsweep is not installed there.
	SchemaVersion int32
}

// Version returns the release version of the install ("0.<SchemaVersion>.0"),
// "" when pgsweep is not installed.
func (v InstalledVersion) Version() string {
	if v.SchemaVersion <= 0 {
		return ""
	}
	return ReleaseVersion(v.SchemaVersion)
}

// Status compares the install with this binary (LatestVersion).
func (v InstalledVersion) Status() VersionStatus {
	switch latest := LatestVersion(); {
	case v.SchemaVersion <= 0:
		return NotInstalled
	case v.SchemaVersion < latest:
		return Behind
	case v.SchemaVersion > latest:
		return Ahead
	default:
		return Current
	}
}

// Pending returns how many of this binary's migrations the install lacks
// (0 when it is current or ahead).
func (v InstalledVersion) Pending() int32 {
	return max(0, LatestVersion()-max(0, v.SchemaVersion))
}

// DatabaseVersion reads the version of pgsweep installed in schema. It
// changes nothing and works on every version (it reads tern's version
// table, as <schema>.version() does from 0.15 on); a schema that does not
// exist, or holds no pgsweep, is SchemaVersion 0 (NotInstalled).
func DatabaseVersion(ctx context.Context, db DBTX, schema string) (InstalledVersion, error) {
	v, err := CurrentVersion(ctx, db, schema)
	if err != nil {
		return InstalledVersion{}, err
	}
	return InstalledVersion{Schema: schema, SchemaVersion: v}, nil
}
