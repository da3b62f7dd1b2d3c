// Package schedtest checks the cron arithmetic of pgsweep's periodic
// schedules (sql/functions/schedule_cron.sql) against github.com/robfig/cron/v3.
// A module of its own, tests only: the client module never requires robfig.
package schedtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/pgsweep/pgsweep/internal/pgtest"
)

const nextCount = 500

// exprGen makes cron expressions from a seeded source: every field form
// (star, value, range, steps on both, N/STEP, lists, names in mixed case,
// 7 for Sunday), so that the parser and the day rule are covered.
type exprGen struct{ r *rand.Rand }

func (g exprGen) num(lo, hi int) int { return lo + g.r.IntN(hi-lo+1) }

var monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
var dayNames = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

// mixCase writes a name as upper, lower or title case.
func (g exprGen) mixCase(s string) string {
	switch g.r.IntN(3) {
	case 0:
		return strings.ToLower(s)
	case 1:
		return s[:1] + strings.ToLower(s[1:])
	}
	return s
}

// value renders v, as a name when names are given and the coin says so.
func (g exprGen) value(v, lo int, names []string) string {
	if names != nil && g.r.IntN(2) == 0 {
		return g.mixCase(names[v-lo])
	}
	return fmt.Sprint(v)
}

// element is one list element of a field with values lo..hi.
func (g exprGen) element(lo, hi int, names []string) string {
	switch g.r.IntN(7) {
	case 0:
		return "*"
	case 1:
		return fmt.Sprintf("*/%d", g.num(1, (hi-lo)/2+1))
	case 2:
		a := g.num(lo, hi)
		b := g.num(a, hi)
		return g.value(a, lo, names) + "-" + g.value(b, lo, names)
	case 3:
		a := g.num(lo, hi)
		b := g.num(a, hi)
		return fmt.Sprintf("%s-%s/%d", g.value(a, lo, names), g.value(b, lo, names), g.num(1, (hi-lo)/3+1))
	case 4:
		return fmt.Sprintf("%d/%d", g.num(lo, hi), g.num(1, (hi-lo)/2+1))
	default:
		return g.value(g.num(lo, hi), lo, names)
	}
}

// field is a whole field: mostly one element, sometimes a list.
func (g exprGen) field(lo, hi int, names []string, star int) string {
	if g.r.IntN(star) == 0 {
		return "*"
	}
	n := 1
	if g.r.IntN(3) == 0 {
		n = g.num(2, 4)
	}
	parts := make([]string, n)
	for i := range parts {
		parts[i] = g.element(lo, hi, names)
	}
	return strings.Join(parts, ",")
}

func (g exprGen) expr() string {
	return strings.Join([]string{
		g.field(0, 59, nil, 6),
		g.field(0, 23, nil, 3),
		g.field(1, 31, nil, 2),
		g.field(1, 12, monthNames, 2),
		g.field(0, 6, dayNames, 2),
	}, " ")
}

// robfigExpr is expr as robfig reads it: day-of-week 7 (Sunday in
// pgsweep, out of range in robfig v3) written 0. Only the day-of-week
// field carries 7 (the generator puts it there by hand).
func robfigExpr(expr string) string {
	f := strings.Fields(expr)
	if len(f) == 5 {
		f[4] = strings.ReplaceAll(strings.ReplaceAll(f[4], "-7", "-6,0"), "7", "0")
		return strings.Join(f, " ")
	}
	return expr
}

type testCase struct {
	expr  string
	zone  string
	start time.Time
}

// cases: the generated expressions over three zones and start times from
// 2023 to 2030, the DST weeks of Europe/Berlin and America/New_York with
// expressions dense enough to cross them, and the hand-picked ones.
func cases() []testCase {
	g := exprGen{rand.New(rand.NewPCG(41, 2026))}
	zones := []string{"UTC", "Europe/Berlin", "America/New_York"}
	var cs []testCase
	base := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 260; i++ {
		start := base.Add(time.Duration(g.r.Int64N(int64(8 * 365 * 24 * time.Hour)))).Truncate(time.Second)
		if g.r.IntN(4) == 0 {
			start = start.Add(time.Duration(g.r.IntN(1000)) * time.Millisecond)
		}
		cs = append(cs, testCase{g.expr(), zones[i%3], start})
	}
	// DST weeks: spring forward and fall back in both zones, hours and
	// minutes dense enough that 500 slots cross the change
	dst := []testCase{
		{zone: "Europe/Berlin", start: time.Date(2024, 3, 30, 20, 0, 0, 0, time.UTC)},
		{zone: "Europe/Berlin", start: time.Date(2024, 10, 26, 20, 0, 0, 0, time.UTC)},
		{zone: "Europe/Berlin", start: time.Date(2025, 3, 29, 12, 0, 0, 0, time.UTC)},
		{zone: "Europe/Berlin", start: time.Date(2025, 10, 25, 12, 0, 0, 0, time.UTC)},
		{zone: "America/New_York", start: time.Date(2024, 3, 9, 20, 0, 0, 0, time.UTC)},
		{zone: "America/New_York", start: time.Date(2024, 11, 2, 20, 0, 0, 0, time.UTC)},
		{zone: "America/New_York", start: time.Date(2025, 3, 8, 12, 0, 0, 0, time.UTC)},
		{zone: "America/New_York", start: time.Date(2025, 11, 1, 12, 0, 0, 0, time.UTC)},
	}
	dense := []string{"* * * * *", "*/5 * * * *", "30 2 * * *", "0 2 * * *", "15,45 1-3 * * *", "*/7 1,2,3 * * *",
		"0 * * * *", "59 1 * * *", "0 3 * * SUN", "*/10 2 * * 0"}
	for _, d := range dst {
		for _, e := range dense {
			cs = append(cs, testCase{e, d.zone, d.start})
		}
		for i := 0; i < 3; i++ {
			cs = append(cs, testCase{fmt.Sprintf("%s %s * * *", g.field(0, 59, nil, 4), g.element(0, 4, nil)), d.zone, d.start})
		}
	}
	fixed := []string{
		"0 0 31 * *", "0 0 29 2 *", "30 12 29 FEB *", "0 0 31 1-12/2 *", "0 9 * * MON-FRI", "0 9 * * mon-fri",
		"0 0 1,15 * 5", "0 0 13 * FRI", "*/15 9-17 * JAN,Jul,dec *", "0 12 * * 7", "0 12 * * 5-7", "0 0 * * 0,7",
		"@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight",
		"0 0 30 * *", "0 0 30 2 *", "0 0 31 4,jun *", "5 4 * * SAT", "0 22 * * 1-5", "23 0-20/2 * * *", "0 0,12 1 */2 *",
	}
	for i, e := range fixed {
		cs = append(cs, testCase{e, zones[i%3], time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)})
	}
	return cs
}

// TestCronMatchesRobfig computes the next 500 slots of every case with
// schedule_next_times (one call per case) and with robfig/cron v3's Next,
// and requires them equal. The deliberate differences, asserted here:
//   - day-of-week 7 is Sunday in pgsweep, out of range in robfig v3 (the
//     robfig side reads it as 0);
//   - robfig looks 5 years ahead for a next slot and returns the zero time
//     beyond; pgsweep looks 9 years ahead (Feb 29 2096 -> 2104): where
//     robfig gives up, pgsweep's next slot is more than 5 years later;
//   - an expression that can never fire is refused by pgsweep (22023,
//     "never fires"); robfig parses it and returns the zero time.
func TestCronMatchesRobfig(t *testing.T) {
	ctx, db, _ := pgtest.Start(t, 2)
	parser := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	var exprs, compared, sevens, givenUp, never int
	seen := map[string]bool{}
	for _, c := range cases() {
		loc, err := time.LoadLocation(c.zone)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := parser.Parse(robfigExpr(c.expr))
		if err != nil {
			t.Fatalf("robfig parses %q: %v", c.expr, err)
		}
		spec.(*cron.SpecSchedule).Location = loc
		rows, err := db.Pool.Query(ctx, "SELECT t FROM "+db.Rel("schedule_next_times")+"($1, $2, $3, $4) t",
			c.expr, c.zone, c.start, nextCount)
		if err != nil {
			t.Fatal(err)
		}
		var got []time.Time
		for rows.Next() {
			var v time.Time
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if err := rows.Err(); err != nil {
			if strings.Contains(err.Error(), "never fires") && spec.Next(c.start).IsZero() {
				never++
				continue
			}
			t.Fatalf("%q in %s: %v", c.expr, c.zone, err)
		}
		if !seen[c.expr] {
			seen[c.expr] = true
			exprs++
		}
		if robfigExpr(c.expr) != c.expr {
			sevens++
		}
		prev := c.start
		for i := 0; i < nextCount; i++ {
			want := spec.Next(prev)
			if want.IsZero() {
				// robfig's 5-year horizon: pgsweep may go on, and only further than that
				if i < len(got) && got[i].Sub(prev) <= 5*365*24*time.Hour {
					t.Fatalf("%q in %s after %s: robfig finds nothing within 5 years, pgsweep %s", c.expr, c.zone, prev, got[i])
				}
				givenUp++
				break
			}
			if i >= len(got) {
				t.Fatalf("%q in %s: pgsweep returned %d slots, robfig has #%d %s", c.expr, c.zone, len(got), i, want)
			}
			if !got[i].Equal(want) {
				t.Fatalf("%q in %s from %s: slot #%d: pgsweep %s, robfig %s (%s)", c.expr, c.zone, c.start, i,
					got[i].In(loc), want.In(loc), strings.Join(fmtTimes(got, i, loc), " "))
			}
			compared++
			prev = want
		}
	}
	t.Logf("robfig/cron v3: %d expressions, %d slots equal; day-of-week 7 in %d cases; robfig's 5-year horizon reached in %d; %d never fire (refused)",
		exprs, compared, sevens, givenUp, never)
	if exprs < 300 || compared < 150000 {
		t.Fatalf("compared %d expressions and %d slots, want at least 300 and 150000", exprs, compared)
	}
}

// fmtTimes shows the slots around #i for a failure message.
func fmtTimes(ts []time.Time, i int, loc *time.Location) []string {
	var out []string
	for j := max(0, i-2); j < min(len(ts), i+3); j++ {
		out = append(out, ts[j].In(loc).Format("2006-01-02T15:04:05Z07:00"))
	}
	return out
}

// TestEveryMatchesRobfig: '@every <interval>' slots are the multiples of
// the interval since the epoch; from one slot robfig's ConstantDelaySchedule
// gives the same next ones.
func TestEveryMatchesRobfig(t *testing.T) {
	ctx, db, _ := pgtest.Start(t, 2)
	start := time.Date(2025, 6, 1, 10, 17, 3, 500, time.UTC)
	for _, c := range []struct {
		sql string
		d   time.Duration
	}{{"1 second", time.Second}, {"7 seconds", 7 * time.Second}, {"90 seconds", 90 * time.Second},
		{"5 minutes", 5 * time.Minute}, {"1 hour 30 minutes", 90 * time.Minute}, {"1 day", 24 * time.Hour},
		{"36 hours", 36 * time.Hour}, {"13 minutes 17 seconds", 797 * time.Second}} {
		var got []time.Time
		rows, _ := db.Pool.Query(ctx, "SELECT t FROM "+db.Rel("schedule_next_times")+"($1, 'Europe/Berlin', $2, $3) t",
			"@every "+c.sql, start, nextCount)
		for rows.Next() {
			var v time.Time
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if err := rows.Err(); err != nil || len(got) != nextCount {
			t.Fatalf("@every %s: %d slots, %v", c.sql, len(got), err)
		}
		if !got[0].After(start) || got[0].Sub(start) > c.d || got[0].Unix()%int64(c.d/time.Second) != 0 {
			t.Fatalf("@every %s: first slot %s after %s is not the next multiple since the epoch", c.sql, got[0], start)
		}
		every := cron.Every(c.d)
		for i := 1; i < nextCount; i++ {
			if want := every.Next(got[i-1]); !got[i].Equal(want) {
				t.Fatalf("@every %s: slot #%d: pgsweep %s, robfig %s", c.sql, i, got[i], want)
			}
		}
	}
}
