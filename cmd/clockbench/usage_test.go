package main

import (
	"bytes"
	"strings"
	"testing"
)

// -token defaults to $CLOCKD_TOKEN, -amqp to $CLOCKD_AMQP_URL: -h, or a
// mistyped flag (the usage follows the error), printed them to stderr,
// into CI logs. The usage masks them as the report does.
func TestUsageDoesNotPrintSecrets(t *testing.T) {
	const secret = "clk_S3cretS3cretS3cretS3cretS3cretS3cretS3cr"
	env := map[string]string{"CLOCKD_TOKEN": secret, "CLOCKD_AMQP_URL": "amqp://bench:hunter2@rabbit:5672/"}
	for _, args := range [][]string{{"-h"}, {"-clinets", "8"}} {
		var stderr bytes.Buffer
		_, _ = parseConfig(args, func(k string) string { return env[k] }, &stderr)
		for _, s := range []string{secret, "hunter2"} {
			if strings.Contains(stderr.String(), s) {
				t.Errorf("clockbench %v prints the secret %q on stderr:\n%s", args, s, grepLine(stderr.String(), s))
			}
		}
	}
}

func grepLine(text, s string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
