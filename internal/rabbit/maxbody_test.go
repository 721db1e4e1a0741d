package rabbit

import (
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The limit is read only from a broker's refusal of a message too large,
// wrapped as the lane wraps a channel's close.
func TestBrokerMaxBody(t *testing.T) {
	refusal := &amqp.Error{Code: amqp.PreconditionFailed, Server: true,
		Reason: "PRECONDITION_FAILED - message size 8000 is larger than configured max size 4096"}
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("channel closed: %w", refusal), 4096},
		{refusal, 4096},
		{&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'durable'"}, 0},
		{&amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no exchange 'x'"}, 0},
		{&amqp.Error{Code: amqp.PreconditionFailed, Reason: "larger than configured max size "}, 0},
		{errors.New("larger than configured max size 10"), 0},
		{nil, 0},
	} {
		if got := brokerMaxBody(c.err); got != c.want {
			t.Errorf("brokerMaxBody(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
