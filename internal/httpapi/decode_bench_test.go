package httpapi

import (
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

func BenchmarkDecodeCreate(b *testing.B) {
	body := []byte(`{"application":"order","business_id":"o-123456","payload":"{\"order\":123456,\"note\":\"close if unpaid\"}","delay":"30m","max_attempts":5}`)
	now := time.Now()
	lim := alarm.Limits{MaxPayloadBytes: 64 << 10}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCreate(body, now, lim); err != nil {
			b.Fatal(err)
		}
	}
}
