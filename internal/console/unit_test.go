package console

import (
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestQuantileFromBucketDeltas(t *testing.T) {
	bounds := []float64{0.001, 0.01, 0.1, 1}
	then := snapshot{bounds: bounds, cum: []uint64{10, 10, 10, 10}, count: 10}
	tests := []struct {
		name string
		cum  []uint64
		q    float64
		want float64
	}{
		// 100 new rings: 98 under 1 ms, 1 under 10 ms, 1 under 100 ms.
		{"p99 in the second bucket", []uint64{108, 109, 110, 110}, 0.99, 0.01},
		{"p50 in the first", []uint64{108, 109, 110, 110}, 0.5, 0.001},
		{"p100 in the third", []uint64{108, 109, 110, 110}, 1, 0.1},
		{"above every bucket", []uint64{10, 10, 10, 10}, 0.99, math.Inf(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := snapshot{bounds: bounds, cum: tt.cum, count: 110}
			if got := quantile(tt.q, now, then); got != tt.want {
				t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
	if got := quantile(0.99, then, then); !math.IsNaN(got) {
		t.Errorf("no new rings: %v, want NaN", got)
	}
}

func TestSafeNextStaysInTheConsole(t *testing.T) {
	for in, want := range map[string]string{
		"/ui/cluster":          "/ui/cluster",
		"/ui/clocks?app=x":     "/ui/clocks?app=x",
		"https://evil.example": "/ui/",
		"//evil.example/ui/":   "/ui/",
		"/ui/\\evil":           "/ui/",
		"":                     "/ui/",
		"/v1/tokens":           "/ui/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCSRFTokenIsBoundToTheSession(t *testing.T) {
	a := session{id: "session-1", nonce: "n1"}
	if !a.checkCSRF(a.csrf()) {
		t.Fatal("a session's own token is refused")
	}
	for _, other := range []session{{id: "session-2", nonce: "n1"}, {id: "session-1", nonce: "n2"}, {nonce: "n1"}} {
		if other.checkCSRF(a.csrf()) {
			t.Errorf("token of %+v accepted for %+v", a, other)
		}
	}
	if a.checkCSRF("") {
		t.Error("an empty token is accepted")
	}
}

func TestRingOfReadsClockdHeaders(t *testing.T) {
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	d := amqp.Delivery{RoutingKey: "order", MessageId: "42", ContentType: "application/json", Body: []byte(`{"a":1}`),
		Headers: amqp.Table{"x-clock-application": "order", "x-clock-business-id": "o-1",
			"x-clock-ring-at": "2026-01-01T10:00:00.000Z", "x-clock-attempt": int32(3)}}
	r := ringOf(d, at.Add(1500*time.Microsecond))
	if r.Application != "order" || r.BusinessID != "o-1" || r.MessageID != "42" || r.Attempt != 3 ||
		!r.RingAt.Equal(at) || r.LatenessMS != 1.5 || r.Payload != `{"a":1}` || r.PayloadBytes != 7 {
		t.Errorf("ringOf = %+v", r)
	}
	d.Body = make([]byte, PayloadShown+10)
	if r := ringOf(d, at); len(r.Payload) != PayloadShown || r.PayloadBytes != PayloadShown+10 {
		t.Errorf("long payload: shown %d of %d", len(r.Payload), r.PayloadBytes)
	}
}

func TestFmtApprox(t *testing.T) {
	for n, want := range map[int64]string{201: "≈200", 999: "≈1000", 1500: "≈1.5k", 18970: "≈19k", 173712: "≈170k", 1_234_567: "≈1.2M", 9998: "≈10k"} {
		if got := fmtApprox(n); got != want {
			t.Errorf("fmtApprox(%d) = %q, want %q", n, got, want)
		}
	}
}

// A broker URL that does not parse is not echoed: net/url quotes it whole,
// password included.
func TestTailDialHidesPasswords(t *testing.T) {
	_, err := dial("amqp://u:secretpw@127.0.0.1:port/, amqp://u:otherpw@127.0.0.1:1/")
	if err == nil || strings.Contains(err.Error(), "secretpw") || strings.Contains(err.Error(), "otherpw") {
		t.Fatalf("dial error %v: want an error without the passwords", err)
	}
}
