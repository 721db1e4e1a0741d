package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// dueChart draws the clocks due per bucket as an SVG bar chart. It is drawn
// on the server (no script, no library) with presentation attributes only,
// so the page's content security policy allows it.
func dueChart(buckets []alarm.DueBucket, width time.Duration) template.HTML {
	const w, h, left, bottom, top = 720, 180, 48, 24, 10
	var peak int64
	for _, b := range buckets {
		peak = max(peak, b.Count)
	}
	var s strings.Builder
	fmt.Fprintf(&s, `<svg class="chart" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="clocks due per %s, next %s">`,
		w, h, width, time.Duration(len(buckets))*width)
	plotH := float64(h - bottom - top)
	fmt.Fprintf(&s, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, left, h-bottom, w, h-bottom)
	fmt.Fprintf(&s, `<text x="%d" y="%d" font-size="10" text-anchor="end" fill="#555">%d</text>`, left-4, top+8, peak)
	fmt.Fprintf(&s, `<text x="%d" y="%d" font-size="10" text-anchor="end" fill="#555">0</text>`, left-4, h-bottom)
	if len(buckets) > 0 {
		bw := float64(w-left) / float64(len(buckets))
		for i, b := range buckets {
			x := float64(left) + float64(i)*bw
			if b.Count > 0 && peak > 0 {
				bh := max(1, plotH*float64(b.Count)/float64(peak))
				fmt.Fprintf(&s, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#3b6ea5"><title>%s: %d due</title></rect>`,
					x+1, float64(h-bottom)-bh, max(1, bw-2), bh, b.At.UTC().Format("15:04"), b.Count)
			}
			if i%10 == 0 {
				fmt.Fprintf(&s, `<text x="%.1f" y="%d" font-size="10" fill="#555">%s</text>`, x, h-bottom+14, b.At.UTC().Format("15:04"))
			}
		}
	}
	s.WriteString(`</svg>`)
	return template.HTML(s.String()) //nolint:gosec // built above from numbers and fixed strings only
}
