package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// pgsweep schedule create|list|pause|resume|drop against a real install:
// each does what its SQL verb does and says so; a bad expression exits 1
// naming p_cron; bad usage exits 2.
func TestScheduleCommand(t *testing.T) {
	_, db, _ := pgtest.StartQueue(t, 2, "reports", pgsweep.Outbox, 3)
	common := []string{"--database-url", db.URL, "--schema", db.Schema}
	cli := func(args ...string) (string, string, int) {
		return runCLI(t, append(args, common...)...)
	}
	out, errOut, code := cli("schedule", "create", "--name", "nightly", "--queue", "reports", "--cron", "0 2 * * *",
		"--time-zone", "Europe/Berlin", "--payload", `{"report": "sales"}`, "--catch-up", "all")
	if code != 0 || !strings.Contains(out, "schedule nightly: 0 2 * * * (Europe/Berlin) to queue reports; next slots:") {
		t.Fatalf("create: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := cli("schedule", "list"); code != 0 || !strings.Contains(out, "nightly") || !strings.Contains(out, "Europe/Berlin") {
		t.Fatalf("list: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = cli("schedule", "list", "--json")
	var list []pgsweep.Schedule
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].CatchUp != pgsweep.CatchUpAll {
		t.Fatalf("list --json: exit %d\n%s", code, out)
	}
	if out, _, code := cli("schedule", "pause", "--name", "nightly"); code != 0 || !strings.Contains(out, "paused schedule nightly") {
		t.Fatalf("pause: exit %d\n%s", code, out)
	}
	if out, _, code := cli("schedule", "resume", "--name", "nightly"); code != 0 || !strings.Contains(out, "resumed schedule nightly") {
		t.Fatalf("resume: exit %d\n%s", code, out)
	}
	if out, errOut, code := cli("schedule", "create", "--name", "bad", "--queue", "reports", "--cron", "61 * * * *"); code != 1 ||
		!strings.Contains(out+errOut, "minute 61 out of range 0-59") {
		t.Fatalf("bad cron: exit %d\n%s%s", code, out, errOut)
	}
	if _, _, code := cli("schedule", "create", "--name", "x"); code != 2 {
		t.Fatalf("create without --queue: exit %d, want 2", code)
	}
	if _, _, code := cli("schedule", "frobnicate"); code != 2 {
		t.Fatalf("unknown subcommand: exit %d, want 2", code)
	}
	if out, _, code := cli("schedule", "drop", "--name", "nightly"); code != 0 || !strings.Contains(out, "dropped schedule nightly") {
		t.Fatalf("drop: exit %d\n%s", code, out)
	}
	if out, _, code := cli("schedule", "drop", "--name", "nightly"); code != 0 || !strings.Contains(out, "no schedule nightly") {
		t.Fatalf("drop again: exit %d\n%s", code, out)
	}
}
