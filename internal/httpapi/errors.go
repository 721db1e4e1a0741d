package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
)

// errorStatus is the one mapping from errors to HTTP answers.
func errorStatus(err error) (int, ErrorDetail) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, ErrorDetail{"too_large", "request body is larger than " + strconv.FormatInt(mbe.Limit, 10) + " bytes"}
	case errors.Is(err, alarm.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, ErrorDetail{"too_large", err.Error()}
	case errors.Is(err, alarm.ErrInvalid):
		return http.StatusBadRequest, ErrorDetail{"invalid_argument", err.Error()}
	case errors.Is(err, auth.ErrUnauthenticated):
		return http.StatusUnauthorized, ErrorDetail{"unauthenticated", err.Error()}
	case errors.Is(err, auth.ErrPermissionDenied):
		return http.StatusForbidden, ErrorDetail{"permission_denied", err.Error()}
	case errors.Is(err, auth.ErrResourceExhausted):
		return http.StatusTooManyRequests, ErrorDetail{"resource_exhausted", err.Error()}
	case errors.Is(err, alarm.ErrNotFound):
		return http.StatusNotFound, ErrorDetail{"not_found", err.Error()}
	case errors.Is(err, alarm.ErrConflict):
		return http.StatusConflict, ErrorDetail{"conflict", err.Error()}
	case errors.Is(err, alarm.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, ErrorDetail{"unavailable", err.Error()}
	}
	return http.StatusInternalServerError, ErrorDetail{"internal", err.Error()}
}

// publicDetail is the answer to err as a client sees it. A 5xx says only
// what kind of failure it was and the request id: the error itself (driver
// messages, host:port of MySQL or RabbitMQ) goes to the log line that
// carries the same id.
func publicDetail(r *http.Request, err error) (int, ErrorDetail) {
	code, d := errorStatus(err)
	if code < 500 {
		return code, d
	}
	var unknown *alarm.UnknownOutcomeError
	switch {
	case errors.As(err, &unknown):
		d.Message = "the change was sent to MySQL but its outcome could not be learned: its outcome is unknown; read the clock, then retry"
	case code == http.StatusServiceUnavailable:
		d.Message = "a dependency of clockd did not answer in time; retry later"
	default:
		d.Message = "internal error"
	}
	if st := stateOf(r); st != nil {
		d.Message += " (request id " + st.id + ")"
	}
	return code, d
}
