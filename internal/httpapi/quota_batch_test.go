package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/mysql"
)

// countingStore counts the reads of one clock and of many.
type countingStore struct {
	*mysql.Store
	gets, inClock atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, k alarm.Key) (alarm.Clock, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, k)
}

func (s *countingStore) InClock(ctx context.Context, app string, ids []string) ([]alarm.Clock, error) {
	s.inClock.Add(1)
	return s.Store.InClock(ctx, app, ids)
}

// A batch over its application's quota: the idempotency rule still answers
// the items whose key has a live clock (200 for an identical retry), and
// the refused items' keys are read in one go. Each was read on its own:
// a refused 1,000-clock batch cost 999 round trips (740 ms) to answer.
func TestBatchOverQuotaReadsTheRefusedKeysOnce(t *testing.T) {
	t.Parallel()
	var cs *countingStore
	e := newAPIDB(t, func(db *sqlx.DB, o *httpapi.Options) {
		st := mysql.NewAuthStore(db)
		o.Auth = auth.New(st, auth.Config{Mode: auth.ModeTokens, AdminToken: bootstrapAdmin})
		o.Quotas = auth.NewQuotas(st, auth.QuotaConfig{})
		cs = &countingStore{Store: mysql.NewStore(db, mysql.StoreConfig{Shards: testShards})}
		t.Cleanup(cs.Store.Close)
		o.Service = alarm.NewService(cs, nil, time.Now, alarm.Limits{MaxPayloadBytes: testMaxPayload}, 0)
	})
	tok := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	e.setQuota("order", 0, 1, 0)
	if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", "o-0")); a.code != 201 {
		t.Fatalf("create within the quota: %d %s", a.code, a.body)
	}
	clocks := []any{createBody("order", "o-0")} // its identical retry
	for i := 1; i < 300; i++ {
		clocks = append(clocks, createBody("order", fmt.Sprintf("o-%d", i)))
	}
	a := e.call(tok.Secret, "POST", "/v1/clocks/batch", map[string]any{"clocks": clocks})
	var ans batchAnswer
	if err := json.Unmarshal(a.body, &ans); a.code != 200 || err != nil || len(ans.Results) != 300 {
		t.Fatalf("batch: %d %v", a.code, err)
	}
	if ans.Results[0].Status != 200 {
		t.Errorf("the identical retry of a live clock at the quota: %d, want 200", ans.Results[0].Status)
	}
	for i, r := range ans.Results[1:] {
		if r.Status != 429 {
			t.Fatalf("item %d over the rate: %d, want 429", i+1, r.Status)
		}
	}
	// as a single create's 429 does, the answer says when to try again
	if ra := a.header.Get("Retry-After"); ra != "1" {
		t.Errorf("batch with items over the rate: Retry-After %q, want \"1\"", ra)
	}
	if g, m := cs.gets.Load(), cs.inClock.Load(); g != 0 || m != 1 {
		t.Errorf("the refusals read %d clocks one by one and made %d reads of many; want 0 and 1", g, m)
	}
}
