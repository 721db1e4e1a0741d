package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/quote"
)

// DefaultListLimit is the page size when limit is not given.
const DefaultListLimit = 100

// clockSansPayload is a clock of a list asked with payload=false.
type clockSansPayload struct {
	Clock
	Payload *string `json:"payload,omitempty"` // always nil: hides Clock.Payload
}

// queryParams reads the query string of r, whose parameters must be among
// known, each given once. r.URL.Query() would drop a parameter that does not
// parse ("%zz", or a ";" taken for a separator) and a repeated one would
// keep its first value only: a filter lost without a word, and a list of
// more than was asked. Here each is refused, by name. An empty value is as
// if the parameter were absent.
func queryParams(r *http.Request, known ...string) (map[string]string, error) {
	qs := map[string]string{}
	for pair := range strings.SplitSeq(r.URL.RawQuery, "&") {
		if pair == "" {
			continue
		}
		rawName, rawValue, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(rawName)
		if err != nil {
			return nil, badField("query", "parameter name %s is not URL-encoded correctly", quote.Short(rawName))
		}
		if name == "" {
			return nil, badField("query", "has a parameter without a name: %s", quote.Short(pair))
		}
		if strings.Contains(pair, ";") {
			return nil, badField(name, "has a \";\" (in %s): query parameters are separated by \"&\"; a \";\" in a value is written %%3B", quote.Short(pair))
		}
		if !slices.Contains(known, name) {
			if len(known) == 0 {
				return nil, badField(name, "is not a known query parameter (this call takes none)")
			}
			return nil, badField(name, "is not a known query parameter (%s)", strings.Join(known, ", "))
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, badField(name, "%s is not URL-encoded correctly", quote.Short(rawValue))
		}
		if _, ok := qs[name]; ok {
			return nil, badField(name, "is given more than once")
		}
		qs[name] = value
	}
	return qs, nil
}

// listParams are the query parameters of the list.
var listParams = []string{"application", "status", "limit", "after", "payload", "recurring"}

// list answers a page of clocks. The answer is built from the rows one at a
// time and bounded by maxList bytes: a page that would be larger ends early
// and its "next" cursor continues after the last clock it holds. So a page
// of 1000 clocks of 64 KiB costs clockd at most maxList bytes (plus one
// clock), however slowly the client reads it. payload=false leaves the
// payloads out (and MySQL does not read them).
func (a *api) list(w http.ResponseWriter, r *http.Request) {
	qs, err := queryParams(r, listParams...)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	q := alarm.ListQuery{Application: qs["application"], Status: alarm.Status(qs["status"]), Limit: DefaultListLimit}
	if s := qs["limit"]; s != "" {
		n, err := parseDecimal(s)
		if errors.Is(err, strconv.ErrRange) {
			n = 1 << 31 // digits, too many: the range check below names the bounds
		} else if err != nil {
			a.fail(w, r, badField("limit", "%s is not a positive whole number", quote.Short(s)))
			return
		}
		q.Limit = int(min(n, 1<<31)) // the range check below names the bounds
	}
	if s := qs["after"]; s != "" {
		n, err := parseDecimal(s)
		if err != nil || n <= 0 {
			a.fail(w, r, badField("after", "%s is not a cursor from a previous page", quote.Short(s)))
			return
		}
		q.BeforeID = n
	}
	rec, err := parseRecurring(qs["recurring"])
	if err != nil {
		a.fail(w, r, err)
		return
	}
	q.Recurring = rec
	withPayload := true
	if s := qs["payload"]; s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			a.fail(w, r, badField("payload", "%s is not true or false", quote.Short(s)))
			return
		}
		withPayload = b
	}
	// Without application, a token of an application lists its own.
	p := principal(r)
	if q.Application == "" && !p.Admin {
		q.Application = p.Application
	}
	if err := p.Allow(q.Application, auth.ScopeRead); err != nil {
		a.fail(w, r, err)
		return
	}
	var buf bytes.Buffer
	buf.WriteString(`{"clocks":[`)
	n := 0
	var encErr error
	next, err := a.svc.ListEach(r.Context(), q, withPayload, func(c alarm.Clock) bool {
		var item []byte
		if withPayload {
			item, encErr = json.Marshal(ClockJSON(c))
		} else {
			item, encErr = json.Marshal(clockSansPayload{Clock: ClockJSON(c)})
		}
		if encErr != nil {
			return false
		}
		if n > 0 && buf.Len()+len(item)+64 > a.maxList {
			return false // full: the rest is on the next page
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		buf.Write(item)
		n++
		return true
	})
	if err == nil {
		err = encErr
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	buf.WriteString(`],"next":"`)
	if next > 0 {
		buf.WriteString(strconv.FormatInt(next, 10))
	}
	buf.WriteString("\"}\n")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}
