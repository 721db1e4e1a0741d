package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
)

// listPage is one answer of GET /v1/clocks.
type listPage struct {
	Clocks []json.RawMessage `json:"clocks"`
	Next   string            `json:"next"`
}

// listRow is what the table shows of a clock.
type listRow struct {
	ID          json.Number `json:"id"`
	Application string      `json:"application"`
	BusinessID  string      `json:"business_id"`
	Status      string      `json:"status"`
	RingAt      *string     `json:"ring_at"`
	Attempts    json.Number `json:"attempts"`
}

func listCommand() command {
	return command{
		name:    "list",
		summary: "list clocks",
		help: `
Usage: clockctl list [-app APP] [-status STATUS] [-limit N] [-after CURSOR] [-all] [-json]

Lists clocks (GET /v1/clocks), newest first, as a table of id, application,
business id, status, ring time and attempts; -json prints one clock per line
instead. Without -all one page is shown and the cursor of the next page is
printed on stderr; -all follows the cursors to the end.
STATUS is one of pending, firing, rung, cancelled, expired, dead. Finished
clocks are listed until they move to history after their retention
(janitor.retention, 24h by default): clockctl get finds one there.

Examples:
  clockctl list -app order -status pending
  clockctl list -status dead -all -json | jq -r .business_id
  clockctl list -limit 50 -after CURSOR
`,
		setup: func(c *cli, fs *flag.FlagSet) runFunc {
			var (
				app, status, after, recurring string
				limit                         int
				all, asJSON                   bool
			)
			fs.StringVar(&recurring, "recurring", "", "true: only recurring clocks; false: only one-shot clocks")
			fs.StringVar(&app, "app", "", "only clocks of this `application`")
			fs.StringVar(&status, "status", "", "only clocks in this `status`")
			fs.IntVar(&limit, "limit", 0, "at most `n` clocks per page (0 = the server's default)")
			fs.StringVar(&after, "after", "", "start after this `cursor` (the \"next\" of a previous page)")
			fs.BoolVar(&all, "all", false, "follow the next cursor until the last page")
			fs.BoolVar(&asJSON, "json", false, "print JSON lines, one clock per line")
			return func(ctx context.Context, pos []string) error {
				if len(pos) > 0 {
					return usagef("unexpected argument %q", pos[0])
				}
				if limit < 0 {
					return usagef("-limit must not be negative")
				}
				cl, err := c.client()
				if err != nil {
					return err
				}
				q := url.Values{}
				if app != "" {
					q.Set("application", app)
				}
				if status != "" {
					q.Set("status", status)
				}
				if recurring != "" {
					q.Set("recurring", recurring)
				}
				if limit > 0 {
					q.Set("limit", strconv.Itoa(limit))
				}
				var out clockPrinter = newTablePrinter(c.stdout)
				if asJSON {
					out = &jsonLinePrinter{w: c.stdout}
				}
				err = listPages(ctx, cl, q, after, all, out, c.stderr)
				if ferr := out.flush(err == nil); err == nil {
					err = ferr
				}
				return err
			}
		},
	}
}

// listPages fetches the first page (or every page with all) and prints the
// clocks.
func listPages(ctx context.Context, cl *api, q url.Values, after string, all bool, out clockPrinter, stderr io.Writer) error {
	seen := map[string]bool{}
	for {
		if after != "" {
			q.Set("after", after)
		} else {
			q.Del("after")
		}
		_, data, err := cl.do(ctx, http.MethodGet, "/v1/clocks", q, nil)
		if err != nil {
			return err
		}
		var page listPage
		if err := json.Unmarshal(data, &page); err != nil {
			return fmt.Errorf("decode list answer: %w", err)
		}
		for _, raw := range page.Clocks {
			if err := out.print(raw); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		if !all {
			fmt.Fprintf(stderr, "clockctl: more clocks follow: use -after %s (or -all)\n", page.Next)
			return nil
		}
		if seen[page.Next] {
			return fmt.Errorf("list: the server returned cursor %q twice; stopping", page.Next)
		}
		seen[page.Next] = true
		after = page.Next
	}
}

type clockPrinter interface {
	print(raw json.RawMessage) error
	// flush writes what is buffered; complete says the listing ended
	// without an error.
	flush(complete bool) error
}

// jsonLinePrinter prints each clock as one compact JSON line.
type jsonLinePrinter struct{ w io.Writer }

func (p *jsonLinePrinter) print(raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return fmt.Errorf("decode clock: %w", err)
	}
	buf.WriteByte('\n')
	_, err := p.w.Write(buf.Bytes())
	return err
}

func (p *jsonLinePrinter) flush(bool) error { return nil }

// tablePrinter prints the clocks as an aligned table. The header comes with
// the first clock, or alone when the list is empty, never before an error.
type tablePrinter struct {
	tw     *tabwriter.Writer
	header bool
}

func newTablePrinter(w io.Writer) *tablePrinter {
	return &tablePrinter{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
}

func (p *tablePrinter) writeHeader() {
	if !p.header {
		p.header = true
		fmt.Fprintln(p.tw, "ID\tAPPLICATION\tBUSINESS_ID\tSTATUS\tRING_AT\tATTEMPTS")
	}
}

func (p *tablePrinter) print(raw json.RawMessage) error {
	p.writeHeader()
	var r listRow
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("decode clock: %w", err)
	}
	ringAt := "-"
	if r.RingAt != nil {
		ringAt = *r.RingAt
	}
	_, err := fmt.Fprintf(p.tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Application, r.BusinessID, r.Status, ringAt, r.Attempts)
	return err
}

func (p *tablePrinter) flush(complete bool) error {
	if complete {
		p.writeHeader()
	}
	if err := p.tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
