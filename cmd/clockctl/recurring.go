package main

import (
	"flag"
	"net/http"
	"time"
)

// Recurring clocks on the command line: the schedule flags of create and
// reschedule, and pause and resume.

// scheduleBody is the "schedule" object of a create or reschedule.
type scheduleBody struct {
	Cron               string `json:"cron,omitempty"`
	TimeZone           string `json:"time_zone,omitempty"`
	Every              string `json:"every,omitempty"`
	Start              string `json:"start,omitempty"`
	End                string `json:"end,omitempty"`
	MaxOccurrences     *int   `json:"max_occurrences,omitempty"`
	Misfire            string `json:"misfire,omitempty"`
	CatchUpLimit       *int   `json:"catch_up_limit,omitempty"`
	OccurrenceDeadline string `json:"occurrence_deadline,omitempty"`
}

type recurringFlags struct {
	cron, tz, every, start, end, misfire, deadline string
	maxOccurrences, catchUpLimit                   int
}

func (r *recurringFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&r.cron, "cron", "", "ring on this cron `expression` (5 fields, optional leading seconds, or @daily...): a recurring clock")
	fs.StringVar(&r.tz, "tz", "", "IANA time `zone` of -cron, e.g. Europe/Berlin (default UTC)")
	fs.StringVar(&r.every, "every", "", "ring every `duration` (e.g. 30s): a recurring clock")
	fs.StringVar(&r.start, "start", "", "recurring: no occurrence before this RFC 3339 `time` (an -every clock's first)")
	fs.StringVar(&r.end, "end", "", "recurring: no occurrence after this RFC 3339 `time`")
	fs.IntVar(&r.maxOccurrences, "max-occurrences", 0, "recurring: finish after `n` occurrences rang (0 = no limit)")
	fs.StringVar(&r.misfire, "misfire", "", "recurring: missed occurrences: skip (default) or catch_up")
	fs.IntVar(&r.catchUpLimit, "catch-up-limit", 0, "recurring, catch_up: at most `n` missed occurrences rung (default 10)")
	fs.StringVar(&r.deadline, "occurrence-deadline", "", "recurring: give an occurrence up when not rung within this `duration` after its time")
}

// fill builds b.Schedule from the schedule flags that were set.
func (r *recurringFlags) fill(set map[string]bool, b *clockBody) error {
	any := false
	for _, f := range []string{"cron", "tz", "every", "start", "end", "max-occurrences", "misfire", "catch-up-limit", "occurrence-deadline"} {
		any = any || set[f]
	}
	if !any {
		return nil
	}
	if set["cron"] == set["every"] {
		return usagef("a schedule needs exactly one of -cron or -every")
	}
	if set["at"] || set["in"] {
		return usagef("give -at/-in (one-shot) or -cron/-every (recurring), not both")
	}
	if set["tz"] && !set["cron"] {
		return usagef("-tz applies to -cron")
	}
	s := &scheduleBody{Cron: r.cron, TimeZone: r.tz, Misfire: r.misfire}
	if set["every"] {
		if d, err := time.ParseDuration(r.every); err != nil || d <= 0 {
			return usagef("-every %q: want a positive Go duration such as 30s or 1h", r.every)
		}
		s.Every = r.every
	}
	if set["occurrence-deadline"] {
		if _, err := time.ParseDuration(r.deadline); err != nil {
			return usagef("-occurrence-deadline %q: want a Go duration such as 5m", r.deadline)
		}
		s.OccurrenceDeadline = r.deadline
	}
	var err error
	if set["start"] {
		if s.Start, err = parseTime("-start", r.start); err != nil {
			return err
		}
	}
	if set["end"] {
		if s.End, err = parseTime("-end", r.end); err != nil {
			return err
		}
	}
	if set["max-occurrences"] {
		if r.maxOccurrences < 0 {
			return usagef("-max-occurrences must not be negative")
		}
		n := r.maxOccurrences
		s.MaxOccurrences = &n
	}
	if set["catch-up-limit"] {
		if r.catchUpLimit < 1 {
			return usagef("-catch-up-limit must be at least 1")
		}
		n := r.catchUpLimit
		s.CatchUpLimit = &n
	}
	b.Schedule = s
	return nil
}

func pauseCommand() command {
	return simpleCommand("pause", "pause a recurring clock", http.MethodPost, "/pause", `
Usage: clockctl pause APP BUSINESS_ID

Pauses a pending recurring clock (POST /v1/clocks/APP/BUSINESS_ID/pause):
no occurrence rings until it is resumed. Prints the clock.

Example:
  clockctl pause cart close-stale
`)
}

func resumeCommand() command {
	return simpleCommand("resume", "resume a paused recurring clock", http.MethodPost, "/resume", `
Usage: clockctl resume APP BUSINESS_ID

Resumes a paused recurring clock (POST /v1/clocks/APP/BUSINESS_ID/resume)
from its first occurrence after now. Prints the clock.

Example:
  clockctl resume cart close-stale
`)
}
