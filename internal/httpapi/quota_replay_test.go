package httpapi_test

import (
	"fmt"
	"testing"
	"time"
)

// max_live_clocks is the most live (pending or firing) clocks of an
// application. A replay puts a dead or expired clock back to pending: it
// did so without asking the quota, so an application could let its clocks
// die, create new ones in the room they left, replay the dead ones, and
// hold any number of live clocks. A replay now counts as a create.
func TestReplayCountsAgainstMaxLiveClocks(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	tok := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	const max = 2
	e.setQuota("order", max, 0, 0)
	// Fill the quota, let those clocks die, fill it again: max dead + max live.
	for round := range 2 {
		for i := range max {
			id := fmt.Sprintf("q-%d-%d", round, i)
			if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", id)); a.code != 201 {
				t.Fatalf("create %s within the quota: %d %s", id, a.code, a.body)
			}
		}
		if round == 0 {
			e.exec("UPDATE clock SET status = 'dead' WHERE application = 'order'")
			time.Sleep(1100 * time.Millisecond) // the live count is read again after auth.DefaultLiveCountTTL
		}
	}
	// The quota is reached: a create is refused...
	e.must429(tok.Secret, "POST", "/v1/clocks", createBody("order", "q-extra"))
	// ...but a replay of a dead clock is not.
	replayed := 0
	for i := range max {
		a := e.call(tok.Secret, "POST", fmt.Sprintf("/v1/clocks/order/q-0-%d/replay", i), nil)
		if a.code == 200 {
			replayed++
		}
	}
	live := e.count("application = 'order' AND status IN ('pending', 'firing')")
	if replayed != 0 {
		t.Errorf("%d replays at the quota answered 200, want 429", replayed)
	}
	if live > max {
		t.Fatalf("application order has %d live clocks with max_live_clocks %d: %d replays answered 200 instead of 429", live, max, replayed)
	}
}

// A replay that cannot put a clock back to pending answers what SPEC says
// (404, 409) even at the quota, not 429 with Retry-After for a call that
// can never succeed (found by review).
func TestReplayAtTheQuotaOfAClockItCannotReplay(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	tok := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	e.setQuota("order", 1, 0, 0)
	if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", "live")); a.code != 201 {
		t.Fatalf("create within the quota: %d %s", a.code, a.body)
	}
	e.must429(tok.Secret, "POST", "/v1/clocks", createBody("order", "extra"))
	if a := e.call(tok.Secret, "POST", "/v1/clocks/order/live/replay", nil); a.code != 409 {
		t.Errorf("replay of a pending clock at the quota: %d %s, want 409", a.code, a.body)
	}
	if a := e.call(tok.Secret, "POST", "/v1/clocks/order/no-such-clock/replay", nil); a.code != 404 {
		t.Errorf("replay of a clock that does not exist at the quota: %d %s, want 404", a.code, a.body)
	}
}
