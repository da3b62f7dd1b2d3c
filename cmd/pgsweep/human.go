package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// humanDuration writes d as people write it, in at most two units:
// "250ms", "45s", "1m 30s", "1h 30m", "2d 3h", "7d".
func humanDuration(d time.Duration) string {
	if d < 0 {
		return "-" + humanDuration(-d)
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	d = d.Round(time.Second)
	units := []struct {
		size time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}}
	var parts []string
	for i, u := range units {
		if n := d / u.size; n > 0 {
			parts = append(parts, fmt.Sprintf("%d%s", n, u.name))
			d -= n * u.size
			if i+1 < len(units) && d/units[i+1].size > 0 && len(parts) == 1 {
				next := units[i+1]
				parts = append(parts, fmt.Sprintf("%d%s", d/next.size, next.name))
			}
			break
		}
	}
	return strings.Join(parts, " ")
}

// humanInterval writes an interval as people write it: "7d", "1h 30m",
// "1y 2mo"; a mix of signs keeps PostgreSQL's text (formatInterval); ""
// for NULL.
func humanInterval(iv pgtype.Interval) string {
	if !iv.Valid {
		return ""
	}
	if iv.Months < 0 || iv.Days < 0 || iv.Microseconds < 0 {
		return formatInterval(iv)
	}
	var parts []string
	if y := iv.Months / 12; y > 0 {
		parts = append(parts, fmt.Sprintf("%dy", y))
	}
	if m := iv.Months % 12; m > 0 {
		parts = append(parts, fmt.Sprintf("%dmo", m))
	}
	rest := time.Duration(iv.Days)*24*time.Hour + time.Duration(iv.Microseconds)*time.Microsecond
	if rest > 0 || len(parts) == 0 {
		parts = append(parts, humanDuration(rest))
	}
	return strings.Join(parts, " ")
}
