package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

// A create whose COMMIT was applied, its answer lost, and MySQL then
// unreachable for all of mysql.resolve_timeout answers like a change of
// unknown outcome: an *alarm.UnknownOutcomeError. Cancel, reschedule and
// replay do (store.go change), so the API says "its outcome is unknown;
// read the clock, then retry" (the README's contract for this 503) and the
// service rechecks the clock's shard (Service.settle) so that memory
// follows a row that may exist. A create's resolveCreate failure was passed
// on as a plain ErrUnavailable (found by review) (create.go commitBatch): the client is told
// "a dependency of clockd did not answer in time", and no shard is
// rechecked, although the clock was committed.
func TestCreateOfUnknownOutcomeSaysSo(t *testing.T) {
	t.Parallel()
	s, proxy, direct := proxiedStore(t, mysql.StoreConfig{Writers: 1, ResolveTimeout: 2 * time.Second})
	now := time.Now()
	create := func(bid string) alarm.CreateResult {
		return s.Create(context.Background(), []alarm.NewClock{{Application: "app", BusinessID: bid,
			Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)}}, now)[0]
	}
	if r := create("warm"); r.Err != nil { // the writer's connection is open
		t.Fatal(r.Err)
	}
	// MySQL unreachable for new connections from here on; the writer's
	// connection still gets its INSERT and COMMIT through, and the COMMIT's
	// answer is lost
	s.DB().SetMaxIdleConns(0)
	proxy.SetTarget(testenv.FreeAddr(t))
	fired := proxy.CutOn("COMMIT", true)
	r := create("lost")
	select {
	case <-fired:
	default:
		t.Fatal("the trap on the COMMIT did not go off")
	}
	_, committed := readRow(t, direct, alarm.Key{Application: "app", BusinessID: "lost"})
	t.Logf("create answered %v; committed %v", r.Err, committed)
	if !committed {
		t.Fatal("the COMMIT did not reach MySQL: the trap did not play a lost answer")
	}
	if r.Err == nil {
		return // found out after all
	}
	var unknown *alarm.UnknownOutcomeError
	if !errors.As(r.Err, &unknown) {
		t.Errorf("a create whose COMMIT was applied and whose outcome could not be learnt answered %v (%T); want an *alarm.UnknownOutcomeError, as a cancel or reschedule gives",
			r.Err, errors.Unwrap(r.Err))
	}
}
