package httpapi

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// /readyz answers without a token, and hideAddrs promises to keep "the
// internal addresses, accounts or names" out of its reasons. A DSN or AMQP
// URL naming a host that does not resolve (a DNS outage, a typo, a
// decommissioned replica) gives "dial tcp: lookup <host>...: no such
// host": the host name has no ":port" after it, so addrRE keeps it and
// /readyz shows the internal host name to anyone.
func TestHideAddrsHidesHostNamesOfDNSFailures(t *testing.T) {
	const host = "mysql-primary.corp-secret.invalid"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var d net.Dialer
	_, err := d.DialContext(ctx, "tcp", host+":3306")
	reasons := []string{
		// as the Go resolver words it, with and without the DNS server
		"dial tcp: lookup " + host + " on 10.0.0.2:53: no such host",
		"dial tcp: lookup " + host + ": no such host",
	}
	if err != nil {
		reasons = append(reasons, err.Error()) // this machine's own wording
	}
	for _, r := range reasons {
		if got := hideAddrs(r); strings.Contains(got, "corp-secret") {
			t.Errorf("hideAddrs(%q) = %q: the internal host name is shown by the open /readyz", r, got)
		}
	}
}
