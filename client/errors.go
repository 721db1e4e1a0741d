package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Kinds of failure, for errors.Is. An *Error answered by clockd matches
// the one of its status. A request that got no answer matches
// ErrUnavailable: a network error, or a call other than a read (GET) whose
// context ended after the request was sent and before the answer came —
// that error matches the context's error (context.DeadlineExceeded,
// context.Canceled) too. Its outcome is unknown: clockd may have applied
// it; read the clock. A read cut by its context, and a call whose context
// had ended before it was sent, return the context's error alone.
var (
	ErrInvalid          = errors.New("invalid request")   // 400 invalid_argument, 413 too_large
	ErrUnauthenticated  = errors.New("unauthenticated")   // 401: no token, or not a valid one
	ErrPermissionDenied = errors.New("permission denied") // 403: the token may not do this
	ErrNotFound         = errors.New("not found")         // 404
	ErrConflict         = errors.New("conflict")          // 409: exists with other content, or not in a state that allows it
	ErrOverQuota        = errors.New("over quota")        // 429 resource_exhausted; see Error.RetryAfter
	ErrUnavailable      = errors.New("unavailable")       // 503 (a batch item too), a proxy's 5xx, or no answer at all: see above
)

// Error is a non-2xx answer of clockd.
type Error struct {
	Status  int    // HTTP status
	Code    string // the error code of the answer (invalid_argument, not_found, ...); empty when it had none
	Message string
	// RetryAfter is the Retry-After of a 429 or 503 answer, 0 when absent.
	RetryAfter time.Duration
	Method     string // of the request
	Path       string // of the request, without the base URL's path
}

func (e *Error) Error() string {
	what := e.Code
	if what == "" {
		what = http.StatusText(e.Status)
	}
	msg := fmt.Sprintf("%d %s", e.Status, what)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Is makes errors.Is(err, ErrNotFound) and the like work.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrInvalid:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge
	case ErrUnauthenticated:
		return e.Status == http.StatusUnauthorized
	case ErrPermissionDenied:
		return e.Status == http.StatusForbidden
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrOverQuota:
		return e.Status == http.StatusTooManyRequests
	case ErrUnavailable:
		// a 5xx that is not clockd's (no error code: a proxy's 502 or 504
		// while clockd restarts, or cut off from it) is no answer of
		// clockd either: the request may or may not have reached it
		return e.Status == http.StatusServiceUnavailable || (e.Status >= 500 && e.Code == "")
	}
	return false
}

// decodeError reads the SPEC error body, or keeps a shortened text of a
// body that is not one (a proxy's error page).
func decodeError(status int, data []byte) *Error {
	var body struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &body) == nil && body.Error != nil && body.Error.Code != "" {
		return &Error{Status: status, Code: body.Error.Code, Message: body.Error.Message}
	}
	msg := strings.Join(strings.Fields(string(data)), " ")
	if r := []rune(msg); len(r) > 300 {
		msg = string(r[:300]) + "..."
	}
	return &Error{Status: status, Message: msg}
}
