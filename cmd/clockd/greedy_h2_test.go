package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clockd "github.com/clockd/clockd/client"
	"github.com/clockd/clockd/internal/testenv"
)

// h2Admin is the bootstrap admin token of the greedy-client test's clockd.
const h2Admin = "h2-greedy-admin-token-0123456789"

// h2Frame writes one HTTP/2 frame.
func h2Frame(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	var h [9]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], stream&0x7fffffff)
	_, err := w.Write(append(h[:], payload...))
	return err
}

// hpackLiteral is one header field as an HPACK literal without indexing,
// new name, no Huffman coding (name and value under 127 bytes).
func hpackLiteral(b *bytes.Buffer, name, value string) {
	b.WriteByte(0x00)
	b.WriteByte(byte(len(name)))
	b.WriteString(name)
	b.WriteByte(byte(len(value)))
	b.WriteString(value)
}

// With http.tls_cert_file set clockd also speaks HTTP/2, where the
// answer's flow control is the client's to grant. One TLS connection that
// announces SETTINGS_INITIAL_WINDOW_SIZE 0 and asks for a few list pages
// (an ordinary read token) leaves each handler blocked in its Write until
// http.write_timeout. That must not hold the work slots
// (http.max_concurrent_requests) the other applications need: their GETs
// answer 200, not 503. (Over HTTP/1 the same 1 MiB page fits in the
// kernel's socket buffers.)
func TestHTTP2ClientsThatNeverReadLockOutNoOne(t *testing.T) {
	t.Parallel()
	const slots = 4
	certFile, keyFile, pool := selfSigned(t)
	e := newEnv(t)
	d := testenv.LaunchClockd(t, e.vars(map[string]string{"CLOCKD_AUTH_MODE": "tokens", "CLOCKD_ADMIN_TOKEN": h2Admin,
		"CLOCKD_LOG_LEVEL": "warn", "CLOCKD_INSTANCE_ID": testenv.Name("h2-"),
		"CLOCKD_HTTP_TLS_CERT_FILE": certFile, "CLOCKD_HTTP_TLS_KEY_FILE": keyFile,
		"CLOCKD_HTTP_MAX_CONCURRENT_REQUESTS": fmt.Sprint(slots)}))
	httpc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	base := "https://" + d.Addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := httpc.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("clockd over HTTPS not ready: %v\n%s", err, d.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// as clients, the API's own: one attempt each, so that a 503 shows
	ctx := context.Background()
	as := func(token string) *clockd.Client {
		c, err := clockd.New(base, clockd.WithToken(token), clockd.WithHTTPClient(httpc), clockd.WithRetry(clockd.Retry{Attempts: 1}))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	admin := as(h2Admin)
	token := func(app string) string {
		tok, err := admin.CreateToken(ctx, clockd.NewToken{Application: app, Scopes: []string{"read", "write"}})
		if err != nil {
			t.Fatalf("token for %s: %v", app, err)
		}
		return tok.Secret
	}
	hog, victim := token("hog"), as(token("victim"))
	var pages []clockd.NewClock
	for i := range 16 {
		pages = append(pages, clockd.NewClock{Application: "hog", BusinessID: fmt.Sprintf("h-%d", i),
			Payload: strings.Repeat("x", 60<<10), Delay: time.Hour})
	}
	if rs, err := as(hog).CreateBatch(ctx, pages); err != nil || rs[0].Err != nil {
		t.Fatalf("batch: %v %+v", err, rs[0])
	}
	if _, _, err := victim.Create(ctx, clockd.NewClock{Application: "victim", BusinessID: "v-1", Payload: "{}", Delay: time.Hour}); err != nil {
		t.Fatalf("victim create: %v", err)
	}
	if _, err := victim.Get(ctx, "victim", "v-1"); err != nil {
		t.Fatalf("victim GET before: %v", err)
	}

	// the greedy client: one HTTP/2 connection, stream window 0
	conn, err := tls.Dial("tcp", d.Addr, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN: %q, want h2", p)
	}
	var wmu sync.Mutex
	write := func(typ, flags byte, stream uint32, payload []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		if err := h2Frame(conn, typ, flags, stream, payload); err != nil {
			t.Errorf("write frame: %v", err)
		}
	}
	wmu.Lock()
	_, _ = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	wmu.Unlock()
	write(0x4, 0, 0, []byte{0x00, 0x04, 0, 0, 0, 0}) // SETTINGS: INITIAL_WINDOW_SIZE 0
	go func() {                                      // acknowledge the server's SETTINGS, read the rest
		var h [9]byte
		for {
			if _, err := io.ReadFull(conn, h[:]); err != nil {
				return
			}
			n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
			if _, err := io.CopyN(io.Discard, conn, int64(n)); err != nil {
				return
			}
			if h[3] == 0x4 && h[4]&1 == 0 {
				write(0x4, 0x1, 0, nil)
			}
		}
	}()
	for i := range slots + 2 {
		var hb bytes.Buffer
		hpackLiteral(&hb, ":method", "GET")
		hpackLiteral(&hb, ":scheme", "https")
		hpackLiteral(&hb, ":authority", d.Addr)
		hpackLiteral(&hb, ":path", "/v1/clocks?application=hog&limit=1000")
		hpackLiteral(&hb, "authorization", "Bearer "+hog)
		write(0x1, 0x4|0x1, uint32(2*i+1), hb.Bytes()) // HEADERS, END_HEADERS|END_STREAM
	}
	time.Sleep(2 * time.Second) // every page built, its write waiting for a window

	var codes []int
	busy := 0
	for range 5 {
		code := http.StatusOK
		if _, err := victim.Get(ctx, "victim", "v-1"); err != nil {
			var ae *clockd.Error
			if !errors.As(err, &ae) {
				t.Fatalf("victim GET: %v", err)
			}
			code = ae.Status
			if code == http.StatusServiceUnavailable {
				busy++
				t.Logf("victim GET: %v (Retry-After %v)", err, ae.RetryAfter)
			}
		}
		codes = append(codes, code)
		time.Sleep(200 * time.Millisecond)
	}
	if busy > 0 {
		t.Errorf("one HTTP/2 connection of application hog (stream window 0, %d list requests) made application victim's GETs answer %v: "+
			"every work slot (http.max_concurrent_requests=%d) is held by an answer waiting for flow control until http.write_timeout",
			slots+2, codes, slots)
	}
}
