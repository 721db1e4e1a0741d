package console

import "time"

// SetTailTimings makes the live tail check its session (and write a
// keep-alive) every keepAlive, until the returned func puts it back.
func SetTailTimings(keepAlive time.Duration) func() {
	old := tailKeepAlive
	tailKeepAlive = keepAlive
	return func() { tailKeepAlive = old }
}
