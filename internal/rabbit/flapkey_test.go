package rabbit

import (
	"errors"
	"testing"
)

// Losses of one kind share a key for the flapping log, though their
// messages name another local port each time.
func TestFlapKeyIgnoresPortsAndChannels(t *testing.T) {
	a := flapKey(errors.New("read tcp 127.0.0.1:51234->127.0.0.1:5672: read: connection reset by peer"))
	b := flapKey(errors.New("read tcp 127.0.0.1:40001->127.0.0.1:5672: read: connection reset by peer"))
	c := flapKey(errors.New(`Exception (403) Reason: "ACCESS_REFUSED - access to exchange 'clock.ring' in vhost '/' refused"`))
	if a != b || a == c {
		t.Errorf("keys %q, %q, %q: want the first two equal and the third apart", a, b, c)
	}
}
