package main

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

func TestHumanDurationAndInterval(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 250 * time.Millisecond: "250ms", 45 * time.Second: "45s", 90 * time.Second: "1m 30s",
		time.Hour: "1h", 90 * time.Minute: "1h 30m", 7 * 24 * time.Hour: "7d", 51 * time.Hour: "2d 3h",
		26*time.Hour + 5*time.Second: "1d 2h", 61*time.Minute + 5*time.Second: "1h 1m", -90 * time.Second: "-1m 30s",
		1500 * time.Millisecond: "2s",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
	for _, c := range []struct {
		iv   pgtype.Interval
		want string
	}{
		{pgtype.Interval{Days: 7, Valid: true}, "7d"},
		{pgtype.Interval{Microseconds: 90e6, Valid: true}, "1m 30s"},
		{pgtype.Interval{Months: 14, Valid: true}, "1y 2mo"},
		{pgtype.Interval{Months: 1, Days: 2, Valid: true}, "1mo 2d"},
		{pgtype.Interval{Valid: true}, "0s"},
		{pgtype.Interval{Days: -1, Microseconds: 7384e6, Valid: true}, "-1 days +02:03:04"},
		{pgtype.Interval{}, ""},
	} {
		if got := humanInterval(c.iv); got != c.want {
			t.Errorf("humanInterval(%+v) = %q, want %q", c.iv, got, c.want)
		}
	}
}
