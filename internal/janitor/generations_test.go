package janitor_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/janitor"
)

// A recurring clock that an older version cancelled in the millisecond of
// an occurrence that rang (its update_time is the occurrence row's
// finish_time in history) could not be copied to clock_history: its batch
// failed at every run, and the janitor never got past it, nor to the
// expired and dead clocks. Its own row now finishes after its occurrences.
func TestJanitorMovesARecurringClockFinishedAtAnOccurrenceTime(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	now := &fakeNow{t: time.Date(2030, 1, 10, 12, 0, 0, 0, time.UTC)}
	w.insert(t, "poison-", 1, alarm.StatusCancelled, now.Now().Add(-48*time.Hour))
	// the clock's occurrence row, as Advance writes it: finish_time = the
	// occurrence's time, which the cancel's update_time equals
	if _, err := w.db.Exec(`INSERT INTO clock_history (id, application, business_id, shard, status, payload, content_type,
		target_ring_at, next_try_time, create_time, update_time, finish_time, occurrence_of)
		SELECT id, application, business_id, shard, 'rung', payload, content_type, update_time, update_time, create_time,
		update_time, update_time, id FROM clock WHERE business_id = 'poison-1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := w.db.Exec(`UPDATE clock SET schedule_every_ms = 60000, occurrences = 1 WHERE business_id = 'poison-1'`); err != nil {
		t.Fatal(err)
	}
	w.insert(t, "cancelled-", 20, alarm.StatusCancelled, now.Now().Add(-30*time.Hour))
	w.insert(t, "dead-", 20, alarm.StatusDead, now.Now().Add(-8*24*time.Hour))
	w.insert(t, "expired-", 20, alarm.StatusExpired, now.Now().Add(-8*24*time.Hour))

	j := janitor.New(janitor.Config{InstanceID: "a", Batch: 100, Now: now.Now}, w.store)
	for run := 1; run <= 3; run++ {
		err := j.RunOnce(context.Background())
		t.Logf("run %d: %v", run, err)
		now.Set(now.Now().Add(time.Minute))
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock_history WHERE business_id = 'poison-1' AND occurrence_of IS NULL"); n != 1 {
		t.Errorf("%d history rows of the recurring clock itself, want 1", n)
	}
	for _, p := range []string{"poison-", "cancelled-", "dead-", "expired-"} {
		if n := w.count(t, "SELECT COUNT(*) FROM clock WHERE business_id LIKE ?", p+"%"); n != 0 {
			t.Errorf("%d %s clocks past their retention still in clock after 3 runs (one unrelated clock cannot be archived)", n, p)
		}
	}
}

// With a retention as long as history.keep (both 24h here: the default
// janitor.retention and the least history.keep accepted; or
// retention_failed 168h with keep 168h), the janitor deleted the newest
// clock of a key outright (finished more than keep ago, to the
// millisecond) while the key's previous clock, archived by the re-arming
// create, stayed in its day partition (dropped only once the whole day is
// past keep): GET answered with that previous clock, another id, payload
// and status, for up to a day. Only clocks of days history drops are
// deleted now.
func TestGetNeverAnswersAKeysOlderClockAfterRetention(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	d0 := time.Date(2030, 1, 10, 0, 0, 0, 0, time.UTC)
	now := &fakeNow{t: d0.Add(8 * time.Hour)}
	j := janitor.New(janitor.Config{InstanceID: "a", Retention: 24 * time.Hour, HistoryKeep: 24 * time.Hour, Now: now.Now}, w.store)
	if err := j.RunOnce(ctx); err != nil { // partitions
		t.Fatal(err)
	}
	key := alarm.Key{Application: "app", BusinessID: "order-1"}
	older := w.createKey(t, key, `{"v":1}`, d0.Add(8*time.Hour))
	w.finish(t, older.ID, alarm.StatusCancelled, d0.Add(9*time.Hour))
	newer := w.createKey(t, key, `{"v":2}`, d0.Add(9*time.Hour+30*time.Minute)) // re-arms: older goes to history
	w.finish(t, newer.ID, alarm.StatusRung, d0.Add(10*time.Hour))

	// a day and a second after the newer one rang: past its retention
	now.Set(d0.Add(34*time.Hour + time.Second))
	if err := j.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := w.store.Get(ctx, key)
	t.Logf("GET %s: id %d status %s payload %s archived %v (err %v); older %d, newer %d",
		key, got.ID, got.Status, got.Payload, got.Archived, err, older.ID, newer.ID)
	if err == nil && got.ID == older.ID {
		t.Errorf("GET answers the key's previous clock %d (%s, %s) although its newest clock %d rang after it",
			older.ID, got.Status, got.Payload, newer.ID)
	}
}

// A status whose moves fail (here a cancelled clock whose history row a
// DBA copied by hand already) does not keep the clocks of the other
// statuses in clock: each status is tried, and the run reports the error.
func TestJanitorMovesTheOtherStatusesWhenOneFails(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	now := &fakeNow{t: time.Date(2030, 1, 10, 12, 0, 0, 0, time.UTC)}
	w.insert(t, "cancelled-", 5, alarm.StatusCancelled, now.Now().Add(-30*time.Hour))
	if _, err := w.db.Exec(`INSERT INTO clock_history (id, application, business_id, shard, status, payload, content_type,
		target_ring_at, next_try_time, create_time, update_time, finish_time)
		SELECT id, application, business_id, shard, status, payload, content_type, target_ring_at, next_try_time, create_time,
		update_time, update_time FROM clock WHERE business_id LIKE 'cancelled-%'`); err != nil {
		t.Fatal(err)
	}
	w.insert(t, "rung-", 5, alarm.StatusRung, now.Now().Add(-30*time.Hour))
	w.insert(t, "dead-", 5, alarm.StatusDead, now.Now().Add(-8*24*time.Hour))
	w.insert(t, "expired-", 5, alarm.StatusExpired, now.Now().Add(-8*24*time.Hour))
	j := janitor.New(janitor.Config{InstanceID: "a", Batch: 100, Now: now.Now}, w.store)
	if err := j.RunOnce(context.Background()); err == nil {
		t.Error("a run that could not move the cancelled clocks reported no error")
	}
	for _, p := range []string{"rung-", "dead-", "expired-"} {
		if n := w.count(t, "SELECT COUNT(*) FROM clock WHERE business_id LIKE ?", p+"%"); n != 0 {
			t.Errorf("%d %s clocks past their retention still in clock: the cancelled ones' failure kept them", n, p)
		}
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock WHERE business_id LIKE 'cancelled-%'"); n != 5 {
		t.Errorf("%d cancelled clocks in clock, want the 5 that cannot be copied", n)
	}
}

// failDDL fails its first partition change, as one does while another
// session holds clock_history's metadata lock, and counts the changes.
type failDDL struct {
	janitor.Store
	mu    sync.Mutex
	calls int
}

func (s *failDDL) AddHistoryDays(ctx context.Context, days []time.Time) error {
	s.mu.Lock()
	s.calls++
	first := s.calls == 1
	s.mu.Unlock()
	if first {
		return errors.New("Error 1205 (HY000): Lock wait timeout exceeded")
	}
	return s.Store.AddHistoryDays(ctx, days)
}

// After a failed partition change the janitor leaves partitions alone for
// a while (each try makes writes to clock_history queue behind it), then
// makes them; its moves go on meanwhile.
func TestPartitionChangeRetriedAfterAPause(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	now := &fakeNow{t: time.Date(2030, 1, 10, 12, 0, 0, 0, time.UTC)}
	st := &failDDL{Store: w.store}
	j := janitor.New(janitor.Config{InstanceID: "a", Now: now.Now}, st)
	if err := j.RunOnce(context.Background()); err == nil {
		t.Fatal("the run whose partition change failed reported no error")
	}
	w.insert(t, "rung-", 3, alarm.StatusRung, now.Now().Add(-30*time.Hour))
	now.Set(now.Now().Add(time.Minute))
	if err := j.RunOnce(context.Background()); err != nil {
		t.Fatalf("run a minute later: %v", err)
	}
	st.mu.Lock()
	calls := st.calls
	st.mu.Unlock()
	if calls != 1 {
		t.Errorf("%d partition changes within a minute of a failed one, want none after it", calls-1)
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock WHERE business_id LIKE 'rung-%'"); n != 0 {
		t.Errorf("%d rung clocks past their retention still in clock: moves must go on", n)
	}
	now.Set(now.Now().Add(5 * time.Minute))
	if err := j.RunOnce(context.Background()); err != nil {
		t.Fatalf("run after the pause: %v", err)
	}
	if w.days(t) == "" {
		t.Error("no history partitions after the pause")
	}
}

// createKey creates key's clock with payload at at, due a minute later.
func (w *world) createKey(t *testing.T, key alarm.Key, payload string, at time.Time) alarm.Clock {
	t.Helper()
	r := w.store.Create(context.Background(), []alarm.NewClock{{Application: key.Application, BusinessID: key.BusinessID,
		Payload: payload, ContentType: "application/json", RingAt: at.Add(time.Minute)}}, at)
	if r[0].Err != nil || !r[0].Created {
		t.Fatalf("create: %+v", r[0])
	}
	return r[0].Clock
}

// finish sets clock id's status st, as of at.
func (w *world) finish(t *testing.T, id int64, st alarm.Status, at time.Time) {
	t.Helper()
	if _, err := w.db.Exec("UPDATE clock SET status = ?, update_time = ? WHERE id = ?", string(st), at.UnixMilli(), id); err != nil {
		t.Fatal(err)
	}
}
