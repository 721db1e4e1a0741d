package janitor_test

import (
	"context"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/janitor"
)

// GET never answers a key's older clock after history.keep went to 0: the
// janitor that deletes the key's newest clock outright (keep 0: "finished
// clocks are deleted") deletes the key's earlier clocks from clock_history
// with it. A key re-armed while history was kept has its previous clock in
// today's partition, which keep 0 drops only once the day is past, and GET
// answered that clock (another id, payload and status) as the key's until
// midnight, as TestGetNeverAnswersAKeysOlderClockAfterRetention checks for
// a keep above 0.
func TestGetNeverAnswersAKeysOlderClockAfterKeepWentToZero(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	d0 := time.Date(2030, 1, 10, 0, 0, 0, 0, time.UTC)
	now := &fakeNow{t: d0.Add(8 * time.Hour)}
	kept := janitor.New(janitor.Config{InstanceID: "a", Retention: time.Hour, HistoryKeep: 30 * 24 * time.Hour, Now: now.Now}, w.store)
	if err := kept.RunOnce(ctx); err != nil { // partitions
		t.Fatal(err)
	}
	key := alarm.Key{Application: "app", BusinessID: "order-1"}
	older := w.createKey(t, key, `{"v":1}`, d0.Add(8*time.Hour))
	w.finish(t, older.ID, alarm.StatusCancelled, d0.Add(8*time.Hour+10*time.Minute))
	newer := w.createKey(t, key, `{"v":2}`, d0.Add(8*time.Hour+30*time.Minute)) // re-arms: older goes to history
	w.finish(t, newer.ID, alarm.StatusRung, d0.Add(9*time.Hour))

	// clockd restarted with history.keep 0; two hours later the newer
	// clock is past its retention (1 h)
	now.Set(d0.Add(11 * time.Hour))
	none := janitor.New(janitor.Config{InstanceID: "a", Retention: time.Hour, NoHistory: true, Now: now.Now}, w.store)
	if err := none.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := w.store.Get(ctx, key)
	t.Logf("GET %s: id %d status %s payload %s archived %v (err %v); older %d, newer %d",
		key, got.ID, got.Status, got.Payload, got.Archived, err, older.ID, newer.ID)
	if err == nil && got.ID == older.ID {
		t.Errorf("after history.keep went to 0, GET answers the key's previous clock %d (%s, %s) although its newest clock %d rang after it (and was deleted)",
			older.ID, got.Status, got.Payload, newer.ID)
	}
}
