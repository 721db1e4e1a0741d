package mysql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// Every column of a create reaches the row: numbers (written into the
// INSERT as literals), strings (placeholders: quotes, backslashes, NUL and
// non-ASCII text included), NULL or a time for latest_ring_at, and the
// schedule of a recurring clock. What GET reads back is what Create
// answered, for every row of one multi-row INSERT.
func TestCreateBatchRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Date(2031, 5, 6, 7, 8, 9, 123e6, time.UTC)
	every := 90 * time.Second
	sched, err := (&alarm.CreateInput{Application: "order", BusinessID: "rec",
		Schedule: &alarm.ScheduleInput{Every: &every}}).Validate(now, alarm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	payloads := []string{`{"a":"b"}`, `it's a "quote" \ and \\ and ` + "\x00\n\r\x1a", "é ü 日本 🙂", "", "-- ; DROP TABLE clock; --"}
	var in []alarm.NewClock
	for i := range 12 {
		n := alarm.NewClock{Application: "order", BusinessID: fmt.Sprintf("b-%d-'\\%d", i, i),
			Payload: payloads[i%len(payloads)], ContentType: "application/json",
			RingAt: now.Add(time.Duration(i) * time.Minute)}
		if i%2 == 0 {
			n.LatestRingAt = n.RingAt.Add(time.Hour)
		}
		if i%3 == 0 {
			n.MaxAttempts = 7 + i
		}
		in = append(in, n)
	}
	in = append(in, sched)
	res := s.Create(ctx, in, now)
	for i, r := range res {
		if r.Err != nil || !r.Created {
			t.Fatalf("create %d: %+v", i, r)
		}
		got, err := s.Get(ctx, alarm.Key{Application: in[i].Application, BusinessID: in[i].BusinessID})
		if err != nil {
			t.Fatal(err)
		}
		want := r.Clock
		if got.Schedule != nil && want.Schedule != nil && *got.Schedule == *want.Schedule {
			got.Schedule = want.Schedule
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Errorf("clock %d read back differs:\n got %+v\nwant %+v", i, got, want)
		}
		if got.Payload != in[i].Payload || got.MaxAttempts != in[i].MaxAttempts || !got.LatestRingAt.Equal(in[i].LatestRingAt) ||
			!got.RingAt.Equal(in[i].RingAt) || got.Shard != alarm.ShardOf(in[i].Application, in[i].BusinessID, 4) {
			t.Errorf("clock %d: %+v; asked %+v", i, got, in[i])
		}
	}
}
