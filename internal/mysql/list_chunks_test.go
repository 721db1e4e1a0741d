package mysql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

// listStoreViaProxy is a one-shard store holding n clocks of the given
// payload size, and a second store on the same database whose connections
// go through a proxy that counts what MySQL sends.
func listStoreViaProxy(t *testing.T, n, payloadBytes int) (*mysql.Store, *testenv.Proxy) {
	t.Helper()
	s, direct := oneShardStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	payload := strings.Repeat("x", payloadBytes)
	now := time.Now()
	for b := 0; b < n; b += 50 {
		var cs []alarm.NewClock
		for i := b; i < min(n, b+50); i++ {
			cs = append(cs, alarm.NewClock{Application: "app", BusinessID: fmt.Sprintf("b-%03d", i), Payload: payload,
				ContentType: "application/json", RingAt: now.Add(time.Hour)})
		}
		for _, r := range s.Create(ctx, cs, now) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	cfg, err := mysqldrv.ParseDSN(testenv.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.Get(&cfg.DBName, "SELECT DATABASE()"); err != nil {
		t.Fatal(err)
	}
	p := testenv.StartProxy(t, cfg.Addr)
	cfg.Addr = p.Addr
	db, err := mysql.Open(ctx, cfg.FormatDSN(), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	viaProxy := mysql.NewStore(db, mysql.StoreConfig{Shards: 1})
	t.Cleanup(viaProxy.Close)
	return viaProxy, p
}

// A list page that its reader ends early (the answer is full at
// http.max_list_bytes) costs MySQL about what was read, not the page's
// limit of whole rows: the driver reads a result to its end, so a page of
// limit=1000 over clocks of 64 KiB made MySQL send 64 MiB to answer 1 MiB.
func TestListPageEndedEarlyReadsLittleMore(t *testing.T) {
	t.Parallel()
	const n, size = 240, 60 << 10
	s, p := listStoreViaProxy(t, n, size)
	ctx := context.Background()
	before := p.BytesDown()
	var got, answered int
	err := s.ListEach(ctx, alarm.ListQuery{Application: "app", Limit: n}, true, func(c alarm.Clock) bool {
		got++
		if answered+len(c.Payload) > 1<<20 {
			return false // full, as the list handler at 1 MiB
		}
		answered += len(c.Payload)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	sent := p.BytesDown() - before
	t.Logf("read %d clocks, answered %.2f MiB; MySQL sent %.2f MiB", got, float64(answered)/(1<<20), float64(sent)/(1<<20))
	if limit := int64(3 << 20); sent > limit {
		t.Errorf("a page ended after %.2f MiB made MySQL send %.1f MiB (all %d rows of %d KiB), want at most %d MiB",
			float64(answered)/(1<<20), float64(sent)/(1<<20), n, size>>10, limit>>20)
	}
}

// A page read in several chunks hands every clock once, newest first,
// whatever the payload size.
func TestListPageInChunksIsWhole(t *testing.T) {
	t.Parallel()
	const n = 300
	s, _ := listStoreViaProxy(t, n, 8<<10) // 8 KiB: chunks of 16, then about 120
	for _, q := range []alarm.ListQuery{
		{Application: "app", Limit: n + 1},
		{Application: "app", Limit: 150},
		{Application: "app", Status: alarm.StatusPending, Limit: 200},
		{Limit: 250},
	} {
		for _, withPayload := range []bool{true, false} {
			var ids []int64
			err := s.ListEach(context.Background(), q, withPayload, func(c alarm.Clock) bool {
				if withPayload && len(c.Payload) != 8<<10 {
					t.Fatalf("%+v: clock %d with a payload of %d bytes", q, c.ID, len(c.Payload))
				}
				ids = append(ids, c.ID)
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if want := min(n, q.Limit); len(ids) != want {
				t.Fatalf("%+v (payload %v): %d clocks, want %d", q, withPayload, len(ids), want)
			}
			for i := 1; i < len(ids); i++ {
				if ids[i] >= ids[i-1] {
					t.Fatalf("%+v (payload %v): id %d after %d: not newest first, once each", q, withPayload, ids[i], ids[i-1])
				}
			}
		}
	}
}
