package tracingtest

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// traceSVG draws the spans of one trace as a waterfall, as a trace viewer
// does: one row per span under its parent, a bar from its start to its
// end, its duration, and a mark where it links to a span of the trace.
// docs/tracing.md shows one (PGSWEEP_TRACE_PICTURE, TestE2ETraceNATS).
func traceSVG(spans []sdktrace.ReadOnlySpan) []byte {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	inTrace := map[trace.SpanID]bool{}
	for _, s := range spans {
		inTrace[s.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent().SpanID(); s.Parent().IsValid() && inTrace[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) }
	type row struct {
		s     sdktrace.ReadOnlySpan
		depth int
	}
	var rows []row
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		rows = append(rows, row{s, depth})
		cs := children[s.SpanContext().SpanID()]
		slices.SortFunc(cs, byStart)
		for _, c := range cs {
			walk(c, depth+1)
		}
	}
	slices.SortFunc(roots, byStart)
	for _, r := range roots {
		walk(r, 0)
	}
	t0, t1 := rows[0].s.StartTime(), rows[0].s.EndTime()
	for _, r := range rows {
		t0 = minTime(t0, r.s.StartTime())
		t1 = maxTime(t1, r.s.EndTime())
	}
	const (
		labelW, barW, rowH, top = 360, 560, 24, 34
	)
	total := max(t1.Sub(t0), time.Microsecond)
	x := func(t time.Time) float64 { return labelW + float64(t.Sub(t0))/float64(total)*barW }
	colour := map[trace.SpanKind]string{trace.SpanKindProducer: "#4e79a7", trace.SpanKindConsumer: "#f28e2b",
		trace.SpanKindInternal: "#59a14f", trace.SpanKindClient: "#76b7b2", trace.SpanKindServer: "#b07aa1"}
	var b bytes.Buffer
	h := top + rowH*len(rows) + 40
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", labelW+barW+110, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/><text x="8" y="20" font-weight="bold">trace %s: %d spans, %s</text>`+"\n",
		rows[0].s.SpanContext().TraceID(), len(rows), total.Round(10*time.Microsecond))
	rowOf := map[trace.SpanID]int{}
	for i, r := range rows {
		rowOf[r.s.SpanContext().SpanID()] = i
	}
	for i, r := range rows {
		y := top + i*rowH
		s := r.s
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, 8+14*r.depth, y+16, xmlText(s.Name()+" ("+strings.ToLower(s.SpanKind().String())+")"))
		x0, x1 := x(s.StartTime()), x(s.EndTime())
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="16" rx="2" fill="%s"/>`, x0, y+4, max(x1-x0, 1.5), colour[s.SpanKind()])
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#555">%s</text>`, x1+4, y+16, s.EndTime().Sub(s.StartTime()).Round(10*time.Microsecond))
		for _, e := range s.Events() {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="2.5" fill="#222"><title>%s</title></circle>`, x(e.Time), y+12, xmlText(e.Name))
		}
		for _, l := range s.Links() {
			if j, ok := rowOf[l.SpanContext.SpanID()]; ok {
				fmt.Fprintf(&b, `<path d="M %.1f %d V %d" stroke="#999" stroke-dasharray="3 2" fill="none"><title>link</title></path>`, x0-3, top+j*rowH+12, y+12)
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, `<text x="8" y="%d" fill="#555">bars: producer blue, consumer orange, internal green; dots: events; dashed: links</text>`+"\n</svg>\n", h-12)
	return b.Bytes()
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// writePicture renders spans as traceSVG, checks the result is XML that
// names every span and, when write is set, writes it where
// PGSWEEP_TRACE_PICTURE says (the picture of docs/tracing.md is made so, by
// TestE2ETraceNATS).
func writePicture(t testing.TB, spans []sdktrace.ReadOnlySpan, write bool) {
	t.Helper()
	svg := traceSVG(spans)
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the picture is not XML: %v", err)
		}
	}
	for _, s := range spans {
		if !bytes.Contains(svg, []byte(xmlText(s.Name()))) {
			t.Errorf("the picture lacks span %q", s.Name())
		}
	}
	if path := os.Getenv("PGSWEEP_TRACE_PICTURE"); path != "" && write {
		if err := os.WriteFile(path, svg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
