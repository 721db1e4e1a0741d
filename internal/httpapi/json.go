package httpapi

import (
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// TimeFormat is RFC 3339 with milliseconds, as every answer writes times.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Clock is the JSON of a clock.
type Clock struct {
	ID           int64   `json:"id"`
	Application  string  `json:"application"`
	BusinessID   string  `json:"business_id"`
	Payload      string  `json:"payload"`
	ContentType  string  `json:"content_type"`
	RingAt       string  `json:"ring_at"`
	LatestRingAt *string `json:"latest_ring_at"`
	MaxAttempts  int     `json:"max_attempts"`
	Status       string  `json:"status"`
	Attempts     int     `json:"attempts"`
	NextTryAt    string  `json:"next_try_at"`
	LastError    *string `json:"last_error"`
	CreatedAt    string  `json:"created_at"`
	UpdatedAt    string  `json:"updated_at"`
	RungAt       *string `json:"rung_at"`
	// Archived is set (true) only on a clock read from the history: it
	// finished and left the clock table after its retention, or when its
	// key was re-armed. Absent otherwise.
	Archived bool `json:"archived,omitempty"`
	// Recurring clocks: Schedule is null for a one-shot clock;
	// OccurrenceAt is the scheduled time of the current (or next)
	// occurrence, null for a one-shot clock.
	Schedule     *Schedule `json:"schedule"`
	Paused       bool      `json:"paused"`
	Occurrences  int       `json:"occurrences"`
	OccurrenceAt *string   `json:"occurrence_at"`
}

func fmtTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := fmtTime(t)
	return &s
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// ClockJSON converts a clock to its JSON form.
func ClockJSON(c alarm.Clock) Clock {
	return Clock{
		ID: c.ID, Application: c.Application, BusinessID: c.BusinessID, Payload: c.Payload,
		ContentType: c.ContentType, RingAt: fmtTime(c.RingAt), LatestRingAt: optTime(c.LatestRingAt),
		MaxAttempts: c.MaxAttempts, Status: string(c.Status), Attempts: c.Attempts,
		NextTryAt: fmtTime(c.NextTryAt), LastError: optString(c.LastError),
		CreatedAt: fmtTime(c.CreatedAt), UpdatedAt: fmtTime(c.UpdatedAt), RungAt: optTime(c.RungAt),
		Archived: c.Archived,
		Schedule: scheduleJSON(c), Paused: c.Paused, Occurrences: c.Occurrences,
		OccurrenceAt: occurrenceAt(c),
	}
}

func occurrenceAt(c alarm.Clock) *string {
	if c.Schedule == nil {
		return nil
	}
	return optTime(c.RingAt)
}

// ErrorBody is the JSON of an error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// BatchResult is one item of a batch answer.
type BatchResult struct {
	Status int          `json:"status"`
	Clock  *Clock       `json:"clock,omitempty"`
	Error  *ErrorDetail `json:"error,omitempty"`

	// retryAfter is how long a 429 item should wait: the batch answer's
	// Retry-After is the longest of its items'.
	retryAfter time.Duration
	// failure is the error of an item answered 5xx, logged once for the
	// whole batch
	failure error
}

// ClusterView is the JSON of GET /v1/cluster: who holds which shard, until
// when (by the database clock).
type ClusterView struct {
	Now        string            `json:"now"`
	ShardCount int               `json:"shard_count"`
	Instances  []ClusterInstance `json:"instances"`
	Unowned    []int             `json:"unowned_shards"`
}

// ClusterInstance is one clockd instance and the shards it holds.
type ClusterInstance struct {
	InstanceID string         `json:"instance_id"`
	HTTPAddr   string         `json:"http_addr"`
	StartedAt  string         `json:"started_at"`
	ExpiresAt  string         `json:"expires_at"`
	Live       bool           `json:"live"`
	Rings      bool           `json:"rings"` // it can publish to RabbitMQ: only such instances hold shards
	Shards     []ClusterShard `json:"shards"`
}

// ClusterShard is one lease.
type ClusterShard struct {
	Shard      int    `json:"shard"`
	Epoch      int64  `json:"epoch"`
	LeaseUntil string `json:"lease_until"`
}
