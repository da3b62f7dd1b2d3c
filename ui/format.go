package ui

import (
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"
)

// funcs are the templates' helpers; html/template escapes what they return.
var funcs = template.FuncMap{
	"path":      url.PathEscape,
	"age":       age,
	"duration":  duration,
	"when":      when,
	"count":     count,
	"ago":       func(t time.Time) string { return age(time.Since(t)) + " ago" },
	"perSecond": perSecond,
}

// perSecond writes n events between since and until as a rate.
func perSecond(n int64, since, until time.Time) string {
	secs := until.Sub(since).Seconds()
	if since.IsZero() || secs <= 0 {
		return "–"
	}
	r := float64(n) / secs
	if r >= 10 || r == 0 {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%.1f", r)
}

// age writes d as people write an age: 0s, 42s, 3m12s, 5h07m, 3d04h.
func age(d time.Duration) string {
	switch d = d.Round(time.Second); {
	case d <= 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// duration is age for an optional duration ("running" while nil).
func duration(d *time.Duration) string {
	if d == nil {
		return "running"
	}
	if *d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return age(*d)
}

// when writes a time in UTC, to the second.
func when(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// count writes n with thin spaces between thousands: 1 234 567.
func count(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteRune('\u202f')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
