package console

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The console's cookies are HTTPS-only when the browser came over HTTPS:
// to clockd's own TLS, or through a proxy that ended TLS and says so.
// Before, behind such a proxy they were never Secure.
func TestCookiesSecureBehindATLSProxy(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		header, value string
		secure        bool
	}{
		{"", "", false},
		{"X-Forwarded-Proto", "https", true},
		{"X-Forwarded-Proto", "HTTPS ", true},
		{"X-Forwarded-Proto", "http", false},
		{"Forwarded", `for=192.0.2.60;proto=https;by=203.0.113.43`, true},
		{"Forwarded", `for=192.0.2.43, for=198.51.100.17;proto="https"`, true},
		{"Forwarded", `for=192.0.2.60;proto=http`, false},
	} {
		r := httptest.NewRequest("GET", Prefix+"login", nil)
		if tt.header != "" {
			r.Header.Set(tt.header, tt.value)
		}
		if c := cookie(r, csrfCookie, "v", 0); c.Secure != tt.secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
			t.Errorf("%s: %q: cookie %+v, want Secure %v", tt.header, tt.value, c, tt.secure)
		}
	}
	r := httptest.NewRequest("GET", "https://clockd.example"+Prefix+"login", nil) // TLS set
	if c := cookie(r, csrfCookie, "v", 0); !c.Secure {
		t.Errorf("over clockd's own TLS: cookie %+v, want Secure", c)
	}
}
