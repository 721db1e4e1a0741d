package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/clockd/clockd/internal/alarm"
)

// clockBody is the JSON body of create and reschedule; unset fields are
// left out so that a reschedule changes only what was given.
type clockBody struct {
	Application  string          `json:"application,omitempty"`
	BusinessID   string          `json:"business_id,omitempty"`
	Payload      *string         `json:"payload,omitempty"`
	ContentType  string          `json:"content_type,omitempty"`
	RingAt       string          `json:"ring_at,omitempty"`
	Delay        string          `json:"delay,omitempty"`
	LatestRingAt json.RawMessage `json:"latest_ring_at,omitempty"` // a quoted time, or null to clear it
	MaxAttempts  *int            `json:"max_attempts,omitempty"`
	// Schedule makes a recurring clock (recurring.go).
	Schedule *scheduleBody `json:"schedule,omitempty"`
}

// scheduleFlags are the flags shared by create and reschedule.
type scheduleFlags struct {
	at, in, payload, payloadFile, latest string
	maxAttempts                          int
	recurring                            recurringFlags
}

func (s *scheduleFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&s.at, "at", "", "ring at this RFC 3339 `time`, e.g. 2026-01-01T10:30:00Z")
	fs.StringVar(&s.in, "in", "", "ring after this Go `duration`, e.g. 30m, 72h, 1h30m")
	fs.StringVar(&s.payload, "payload", "", "the message body, as a `string`")
	fs.StringVar(&s.payloadFile, "payload-file", "", "read the message body from `file` (- for stdin), byte for byte")
	fs.StringVar(&s.latest, "latest", "", "never ring after this RFC 3339 `time` (the clock expires instead); none clears it")
	fs.IntVar(&s.maxAttempts, "max-attempts", 0, "give up after `n` failed attempts (0 = no limit)")
	s.recurring.define(fs)
}

// fill validates the flags that were set and copies them into b.
func (s *scheduleFlags) fill(c *cli, set map[string]bool, b *clockBody) error {
	if set["at"] && set["in"] {
		return usagef("give -at or -in, not both")
	}
	if err := s.recurring.fill(set, b); err != nil {
		return err
	}
	if set["at"] {
		t, err := parseTime("-at", s.at)
		if err != nil {
			return err
		}
		b.RingAt = t
	}
	if set["in"] {
		if _, err := time.ParseDuration(s.in); err != nil {
			return usagef("-in %q: want a Go duration such as 30m or 1h30m", s.in)
		}
		b.Delay = s.in
	}
	if set["latest"] {
		if s.latest == "none" {
			b.LatestRingAt = json.RawMessage("null")
		} else {
			t, err := parseTime("-latest", s.latest)
			if err != nil {
				return err
			}
			b.LatestRingAt, _ = json.Marshal(t)
		}
	}
	if set["max-attempts"] {
		if s.maxAttempts < 0 {
			return usagef("-max-attempts must not be negative")
		}
		n := s.maxAttempts
		b.MaxAttempts = &n
	}
	if set["payload"] && set["payload-file"] {
		return usagef("give -payload or -payload-file, not both")
	}
	if set["payload"] {
		p := s.payload
		b.Payload = &p
	}
	if set["payload-file"] {
		p, err := c.readPayload(s.payloadFile)
		if err != nil {
			return err
		}
		b.Payload = &p
	}
	return nil
}

// parseTime reads the time of flag name with clockd's own parser, so that
// clockctl takes what the API takes (T and Z in either case, as RFC 3339
// allows), and passes it on as RFC 3339 with an upper-case T and Z.
func parseTime(name, v string) (string, error) {
	t, err := alarm.ParseRFC3339(v)
	if err != nil {
		return "", usagef("%s %q: want an RFC 3339 time such as 2026-01-01T10:30:00Z", name, v)
	}
	return t.Format(time.RFC3339Nano), nil
}

func (c *cli) readPayload(file string) (string, error) {
	var (
		data []byte
		err  error
	)
	if file == "-" {
		data, err = io.ReadAll(c.stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return "", fmt.Errorf("read payload: %w", err)
	}
	if !utf8.Valid(data) {
		return "", fmt.Errorf("read payload from %s: not valid UTF-8 (a payload is a JSON string)", file)
	}
	return string(data), nil
}

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// clockArgs checks the APP BUSINESS_ID positional arguments.
func clockArgs(pos []string) (app, id string, err error) {
	if len(pos) != 2 {
		return "", "", usagef("want APP BUSINESS_ID, got %d argument(s)", len(pos))
	}
	if err := checkClockID(pos[0], pos[1]); err != nil {
		return "", "", err
	}
	return pos[0], pos[1], nil
}

func checkClockID(app, id string) error {
	if app == "" {
		return usagef("the application is empty")
	}
	if id == "" {
		return usagef("the business id is empty")
	}
	if strings.Contains(id, "/") {
		return usagef("a business id must not contain '/'")
	}
	return nil
}

// printJSON pretty-prints a JSON answer (as is when it is not JSON).
func printJSON(w io.Writer, data []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, data, "", "  "); err != nil {
		buf.Reset()
		buf.Write(data)
	}
	if buf.Len() > 0 && buf.Bytes()[buf.Len()-1] != '\n' {
		buf.WriteByte('\n')
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func createCommand() command {
	return command{
		name:    "create",
		summary: "create a clock",
		help: `
Usage: clockctl create -app APP -id BUSINESS_ID (-at TIME | -in DURATION | -cron EXPR | -every DURATION) [flags]

Creates a clock (POST /v1/clocks) and prints it. When an identical clock
already exists, clockd answers with it and nothing changes; when one with
different content exists, that is a 409 conflict.

Examples:
  clockctl create -app order -id o-123 -in 30m -payload '{"order":123}'
  clockctl create -app member -id m-7 -at 2026-03-01T09:00:00Z -latest 2026-03-02T09:00:00Z \
      -content-type text/plain -payload 'membership ends in 3 days'
  clockctl create -app order -id o-124 -in 30m -payload-file - < order.json
  clockctl create -app cart -id close-stale -cron '0 2 * * *' -tz Europe/Berlin
  clockctl create -app payment -id poll -every 30s -misfire catch_up -max-occurrences 100
`,
		setup: func(c *cli, fs *flag.FlagSet) runFunc {
			var (
				app, id, contentType string
				sched                scheduleFlags
			)
			fs.StringVar(&app, "app", "", "the owning `application` (required)")
			fs.StringVar(&id, "id", "", "the business `id` (required)")
			sched.define(fs)
			fs.StringVar(&contentType, "content-type", "", "content type of the message (default application/json)")
			return func(ctx context.Context, pos []string) error {
				if len(pos) > 0 {
					return usagef("unexpected argument %q", pos[0])
				}
				if app == "" || id == "" {
					return usagef("-app and -id are required")
				}
				if err := checkClockID(app, id); err != nil {
					return err
				}
				set := setFlags(fs)
				if !set["at"] && !set["in"] && !set["cron"] && !set["every"] {
					return usagef("give the ring time with -at or -in, or a schedule with -cron or -every")
				}
				body := clockBody{Application: app, BusinessID: id, ContentType: contentType}
				if err := sched.fill(c, set, &body); err != nil {
					return err
				}
				if body.Payload == nil {
					empty := ""
					body.Payload = &empty
				}
				cl, err := c.client()
				if err != nil {
					return err
				}
				status, data, err := cl.do(ctx, http.MethodPost, "/v1/clocks", nil, body)
				if err != nil {
					return err
				}
				if status == http.StatusOK {
					fmt.Fprintln(c.stderr, "clockctl: an identical clock already exists; nothing changed")
				}
				return printJSON(c.stdout, data)
			}
		},
	}
}

func rescheduleCommand() command {
	return command{
		name:    "reschedule",
		summary: "change a pending clock",
		help: `
Usage: clockctl reschedule APP BUSINESS_ID [-at TIME | -in DURATION] [flags]

Changes a pending clock (PATCH /v1/clocks/APP/BUSINESS_ID); only the fields
given are sent. A clock that is no longer pending answers 409.

Examples:
  clockctl reschedule order o-123 -in 1h
  clockctl reschedule order o-123 -at 2026-01-01T12:00:00Z -payload '{"order":123,"v":2}'
  clockctl reschedule order o-123 -max-attempts 5
  clockctl reschedule order o-123 -latest none      # ring however late
  clockctl reschedule cart close-stale -cron '30 3 * * *' -tz Europe/Berlin
`,
		setup: func(c *cli, fs *flag.FlagSet) runFunc {
			var sched scheduleFlags
			sched.define(fs)
			return func(ctx context.Context, pos []string) error {
				app, id, err := clockArgs(pos)
				if err != nil {
					return err
				}
				set := setFlags(fs)
				if len(set) == 0 {
					return usagef("nothing to change: give -at, -in, -payload, -payload-file, -latest or -max-attempts")
				}
				var body clockBody
				if err := sched.fill(c, set, &body); err != nil {
					return err
				}
				cl, err := c.client()
				if err != nil {
					return err
				}
				_, data, err := cl.do(ctx, http.MethodPatch, clockPath(app, id), nil, body)
				if err != nil {
					return err
				}
				return printJSON(c.stdout, data)
			}
		},
	}
}

// simpleCommand builds a command that takes APP BUSINESS_ID, sends one
// request without a body and prints the clock.
func simpleCommand(name, summary, method, suffix, help string) command {
	return command{
		name:    name,
		summary: summary,
		help:    help,
		setup: func(c *cli, _ *flag.FlagSet) runFunc {
			return func(ctx context.Context, pos []string) error {
				app, id, err := clockArgs(pos)
				if err != nil {
					return err
				}
				cl, err := c.client()
				if err != nil {
					return err
				}
				_, data, err := cl.do(ctx, method, clockPath(app, id)+suffix, nil, nil)
				if err != nil {
					return err
				}
				return printJSON(c.stdout, data)
			}
		},
	}
}

func getCommand() command {
	return simpleCommand("get", "show a clock", http.MethodGet, "", `
Usage: clockctl get APP BUSINESS_ID

Prints the clock (GET /v1/clocks/APP/BUSINESS_ID). A clock that finished
and left the clock table after its retention is read from the history and
shows "archived": true.

Examples:
  clockctl get order o-123
  clockctl get order 'id with spaces?'
  clockctl get order -- -starts-with-a-dash
`)
}

func cancelCommand() command {
	return simpleCommand("cancel", "cancel a pending clock", http.MethodDelete, "", `
Usage: clockctl cancel APP BUSINESS_ID

Cancels a pending clock (DELETE /v1/clocks/APP/BUSINESS_ID) and prints it.
Once this succeeded the clock never rings. A clock that is no longer pending
(firing, rung, ...) answers 409.

Example:
  clockctl cancel order o-123
`)
}

func replayCommand() command {
	return simpleCommand("replay", "put an expired or dead clock back to pending, due now", http.MethodPost, "/replay", `
Usage: clockctl replay APP BUSINESS_ID

Puts an expired or dead clock back to pending, due now
(POST /v1/clocks/APP/BUSINESS_ID/replay), and prints it.

Example:
  clockctl replay order o-123
`)
}
