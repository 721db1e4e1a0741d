package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/clockd/clockd/internal/mysql"
)

// heartbeatReader is what checkInstanceID needs of the store.
type heartbeatReader interface {
	InstanceHeartbeat(ctx context.Context, instanceID string) (expires, started int64, ok bool, err error)
}

// checkInstanceID refuses to start a second live process under the same
// instance id. Two processes with one id hold each other's shard leases,
// release them when one stops, and share one hint queue (found by review:
// the default id, host name + pid, is the same for replicas in containers
// on the host's network, where each is pid 1). A live heartbeat under the
// id may also be a process that crashed within the last lease TTL and is
// restarting now: the heartbeat is watched for half a TTL (a live process
// renews it every quarter) and only one that is renewed meanwhile stops
// this start.
//
// It returns the heartbeat it saw not renewed, if any (its process is
// gone): the first heartbeat of this one (mysql.Store.ClaimInstance) takes
// it over before it expires. The check alone is not enough: two processes
// started at one moment both find no heartbeat; the claim then lets only
// one of them in.
func checkInstanceID(ctx context.Context, st heartbeatReader, id string, ttl time.Duration, log *slog.Logger) (mysql.StaleHeartbeat, error) {
	expires, started, ok, err := st.InstanceHeartbeat(ctx, id)
	if err != nil || !ok {
		return mysql.StaleHeartbeat{}, err
	}
	log.Info("a heartbeat under this instance id is live; waiting to see whether its process still runs",
		"instance", id, "its_process_started", time.UnixMilli(started).UTC(), "wait", (ttl / 2).String())
	deadline := time.Now().Add(ttl/2 + ttl/10)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return mysql.StaleHeartbeat{}, ctx.Err()
		case <-time.After(min(100*time.Millisecond, ttl/20)):
		}
		e, _, ok, err := st.InstanceHeartbeat(ctx, id)
		if err != nil {
			return mysql.StaleHeartbeat{}, err
		}
		if !ok {
			return mysql.StaleHeartbeat{}, nil // it left or expired
		}
		if e != expires {
			return mysql.StaleHeartbeat{}, twinError(id, fmt.Errorf("started %s, its heartbeat renewed just now",
				time.UnixMilli(started).UTC().Format(time.RFC3339)))
		}
	}
	return mysql.StaleHeartbeat{Expires: expires, Started: started}, nil
}

// twinError is what a process says when another live process holds its
// instance id.
func twinError(id string, err error) error {
	return fmt.Errorf("another clockd process is live under instance id %q (%w): give each process a distinct CLOCKD_INSTANCE_ID (the default, host name + pid, repeats for containers on the host's network, where each is pid 1)", id, err)
}
