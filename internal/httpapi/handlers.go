package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

func itoa(n int) string { return strconv.Itoa(n) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, d ErrorDetail) {
	writeJSON(w, code, ErrorBody{Error: d})
}

func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	code, d := errorStatus(err)
	if code >= 500 {
		a.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
	writeError(w, code, d)
}

func (a *api) body(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
}

func key(r *http.Request) alarm.Key {
	return alarm.Key{Application: r.PathValue("application"), BusinessID: r.PathValue("business_id")}
}

func (a *api) create(w http.ResponseWriter, r *http.Request) {
	data, err := a.body(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	in, err := decodeCreateInput(data)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	res := a.svc.Create(r.Context(), []alarm.CreateInput{in})[0]
	if res.Err != nil {
		a.fail(w, r, res.Err)
		return
	}
	code := http.StatusOK
	if res.Created {
		code = http.StatusCreated
	}
	writeJSON(w, code, ClockJSON(res.Clock))
}

func (a *api) createBatch(w http.ResponseWriter, r *http.Request) {
	data, err := a.body(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	b, err := decodeBatch(data)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if b.Clocks == nil {
		a.fail(w, r, badField("clocks", "is required: an array of 1 to %d clocks", MaxBatch))
		return
	}
	if len(b.Clocks) == 0 {
		a.fail(w, r, badField("clocks", "is empty; give 1 to %d clocks", MaxBatch))
		return
	}
	if len(b.Clocks) > MaxBatch {
		a.fail(w, r, &alarm.FieldError{Field: "clocks", Kind: alarm.ErrTooLarge,
			Message: "has " + itoa(len(b.Clocks)) + " clocks; at most " + itoa(MaxBatch) + " per batch"})
		return
	}
	results := make([]BatchResult, len(b.Clocks))
	ins := make([]alarm.CreateInput, 0, len(b.Clocks))
	pos := make([]int, 0, len(b.Clocks))
	for i, raw := range b.Clocks {
		in, err := decodeCreateInput(raw)
		if err != nil {
			code, d := errorStatus(err)
			results[i] = BatchResult{Status: code, Error: &d}
			continue
		}
		ins = append(ins, in)
		pos = append(pos, i)
	}
	if len(ins) > 0 {
		for j, res := range a.svc.Create(r.Context(), ins) {
			i := pos[j]
			if res.Err != nil {
				code, d := errorStatus(res.Err)
				results[i] = BatchResult{Status: code, Error: &d}
				continue
			}
			c := ClockJSON(res.Clock)
			results[i] = BatchResult{Status: http.StatusOK, Clock: &c}
			if res.Created {
				results[i].Status = http.StatusCreated
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": results})
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	c, err := a.svc.Get(r.Context(), key(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ClockJSON(c))
}

func (a *api) cancel(w http.ResponseWriter, r *http.Request) {
	c, err := a.svc.Cancel(r.Context(), key(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ClockJSON(c))
}

func (a *api) reschedule(w http.ResponseWriter, r *http.Request) {
	data, err := a.body(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := decodePatch(data)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	c, err := a.svc.Reschedule(r.Context(), key(r), p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ClockJSON(c))
}

func (a *api) replay(w http.ResponseWriter, r *http.Request) {
	c, err := a.svc.Replay(r.Context(), key(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ClockJSON(c))
}

// DefaultListLimit is the page size when limit is not given.
const DefaultListLimit = 100

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	for name := range qs {
		switch name {
		case "application", "status", "limit", "after":
		default:
			a.fail(w, r, badField(name, "is not a known query parameter (application, status, limit, after)"))
			return
		}
	}
	q := alarm.ListQuery{Application: qs.Get("application"), Status: alarm.Status(qs.Get("status")), Limit: DefaultListLimit}
	if s := qs.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			a.fail(w, r, badField("limit", "%q is not a whole number", s))
			return
		}
		q.Limit = n
	}
	if s := qs.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			a.fail(w, r, badField("after", "%q is not a cursor from a previous page", s))
			return
		}
		q.BeforeID = n
	}
	clocks, next, err := a.svc.List(r.Context(), q)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := struct {
		Clocks []Clock `json:"clocks"`
		Next   string  `json:"next"`
	}{Clocks: make([]Clock, len(clocks))}
	for i, c := range clocks {
		out.Clocks[i] = ClockJSON(c)
	}
	if next > 0 {
		out.Next = strconv.FormatInt(next, 10)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	checks := map[string]string{}
	code := http.StatusOK
	for _, c := range a.ready {
		if err := c.Check(ctx); err != nil {
			checks[c.Name] = err.Error()
			code = http.StatusServiceUnavailable
			continue
		}
		checks[c.Name] = "ok"
	}
	status := "ok"
	if code != http.StatusOK {
		status = "unavailable"
	}
	writeJSON(w, code, map[string]any{"status": status, "checks": checks})
}

func (a *api) clusterView(w http.ResponseWriter, r *http.Request) {
	if a.cluster == nil {
		writeError(w, http.StatusNotFound, ErrorDetail{"not_found", "cluster view is not available"})
		return
	}
	v, err := a.cluster(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
