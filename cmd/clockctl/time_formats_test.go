package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
)

// ctl runs clockctl against addr.
func ctl(addr string, args ...string) result {
	var stdout, stderr bytes.Buffer
	c := &cli{getenv: env(), stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}
	code := c.run(context.Background(), append([]string{"-addr", addr}, args...))
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// TestClockctlTimeFormats: clockctl takes the RFC 3339 times clockd takes
// (README, "The API": "T and Z in either case"; RFC 3339 §5.6 allows t and
// z), for -at, -latest and a reschedule's -at: clockd accepts them
// (checked first here through the API), so clockctl must not refuse them
// as a usage error.
func TestClockctlTimeFormats(t *testing.T) {
	t.Parallel()
	addr := realAPIOff(t)
	// clockd itself takes the lower-case form.
	body := `{"application":"tf","business_id":"api","payload":"{}","ring_at":"2030-01-01t10:30:00.5z"}`
	resp, err := http.Post(addr+"/v1/clocks", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("clockd refused a lower-case RFC 3339 time: %d", resp.StatusCode)
	}
	for i, at := range []string{"2030-01-01t10:30:00Z", "2030-01-01T10:30:00z", "2030-01-01t10:30:00.250+02:00"} {
		r := ctl(addr, "create", "-app", "tf", "-id", "c"+string(rune('0'+i)), "-at", at, "-latest", strings.Replace(at, "2030-01-01", "2030-01-02", 1))
		if r.code != 0 {
			t.Errorf("clockctl create -at %s:\n%v", at, r)
		}
	}
	r := ctl(addr, "create", "-app", "tf", "-id", "r1", "-in", "1h")
	mustOK(t, r)
	if r := ctl(addr, "reschedule", "tf", "r1", "-at", "2031-05-05t05:05:05z"); r.code != 0 {
		t.Errorf("clockctl reschedule -at with lower case t/z:\n%v", r)
	}
}
