package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/clockd/clockd/internal/alarm"
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
	case errors.Is(err, alarm.ErrNotFound):
		return http.StatusNotFound, ErrorDetail{"not_found", err.Error()}
	case errors.Is(err, alarm.ErrConflict):
		return http.StatusConflict, ErrorDetail{"conflict", err.Error()}
	case errors.Is(err, alarm.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, ErrorDetail{"unavailable", err.Error()}
	}
	return http.StatusInternalServerError, ErrorDetail{"internal", err.Error()}
}
