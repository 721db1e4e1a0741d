package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
)

// Shard leases and instance heartbeats. Expiry is judged by the database
// clock (dbNowMS) so that instances need not agree on the time.

// Heartbeat records that the instance is alive until now+ttl, whether it
// can ring (publish to RabbitMQ), its preload window, and that it reads
// claim_token 0 as "not claimed" (claim_room). It then learns whether
// every live instance does (see unclaimedToken): an instance of an earlier
// version leaves claim_room at 0. It returns the largest preload window of
// the live instances (0 when none says): a create for a shard another
// instance owns is hinted to the owner when due within it.
//
// The heartbeat is the process's own: the row of an instance id is this
// process's (its start time and address) or free (expired, or none); a live
// one of another process answers alarm.ErrInstanceTaken and is left alone.
func (s *Store) Heartbeat(ctx context.Context, instanceID, httpAddr string, started time.Time, ttl time.Duration, rings bool, window time.Duration) (time.Duration, error) {
	if err := s.beat(ctx, instanceID, httpAddr, started, ttl, rings, window, StaleHeartbeat{}); err != nil {
		return 0, err
	}
	var live struct {
		Without  int   `db:"without_room"`
		WindowMS int64 `db:"window_ms"`
	}
	if err := s.db.GetContext(ctx, &live, "SELECT COALESCE(SUM(claim_room = 0), 0) AS without_room, COALESCE(MAX(preload_window_ms), 0) AS window_ms "+
		"FROM clock_instance WHERE expires_at > "+dbNowMS); err != nil {
		return 0, fmt.Errorf("heartbeat: %w", mapErr(err))
	}
	without := live.Without
	// said once when instances of an earlier version appear and once when
	// the last of them is gone (an upgrade or a rollback in progress)
	if was := s.olderLive.Swap(int64(without)); (was > 0) != (without > 0) {
		if without > 0 {
			s.log.Info("instances of an earlier version are live: new clocks are written without room for their claim until they are gone",
				"instances", without)
		} else {
			s.log.Info("every live instance is of this version: new clocks are written with room for their claim")
		}
	}
	return time.Duration(live.WindowMS) * time.Millisecond, nil
}

// StaleHeartbeat is a live heartbeat of an instance id that a starting
// process watched and saw no longer renewed (its process is gone): its
// expiry and start time, ms. The zero value names none.
type StaleHeartbeat struct{ Expires, Started int64 }

// ClaimInstance writes the first heartbeat of a starting process (not
// ringing yet), taking the instance id unless another live process holds
// it (alarm.ErrInstanceTaken): two processes started at one moment under
// one id both passed the check for a live heartbeat, which the first lease
// round wrote only later, and both ran, holding each other's leases (found
// by review). stale, when set, is a heartbeat the caller saw was no longer
// renewed: taken over although it has not expired yet.
func (s *Store) ClaimInstance(ctx context.Context, instanceID, httpAddr string, started time.Time, ttl, window time.Duration, stale StaleHeartbeat) error {
	return s.beat(ctx, instanceID, httpAddr, started, ttl, false, window, stale)
}

// beat writes the heartbeat in one transaction that reads the id's row
// first (locked): see Heartbeat.
func (s *Store) beat(ctx context.Context, instanceID, httpAddr string, started time.Time, ttl time.Duration, rings bool, window time.Duration, stale StaleHeartbeat) error {
	err := s.inTx(ctx, func(tx *sqlx.Conn) error {
		var cur struct {
			Addr    string `db:"http_addr"`
			Started int64  `db:"started_at"`
			Expires int64  `db:"expires_at"`
			Live    bool   `db:"live"`
		}
		err := tx.GetContext(ctx, &cur, "SELECT http_addr, started_at, expires_at, expires_at > "+dbNowMS+
			" AS live FROM clock_instance WHERE instance_id = ? FOR UPDATE", instanceID)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case cur.Live && (cur.Started != ms(started) || cur.Addr != httpAddr) &&
			(stale == StaleHeartbeat{} || cur.Started != stale.Started || cur.Expires != stale.Expires):
			return fmt.Errorf("%w: instance id %q is the heartbeat of a process at %s started %s",
				alarm.ErrInstanceTaken, instanceID, cur.Addr, fromMS(cur.Started).UTC().Format(time.RFC3339Nano))
		}
		if x := s.cfg.RingExchange; x != "" {
			var recorded string
			err := tx.GetContext(ctx, &recorded, "SELECT value FROM clock_setting WHERE name = ?", ExchangeSetting)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if err == nil && recorded != x {
				return fmt.Errorf("%w: it rings to exchange %q since an instance started with it, this one was given %q (CLOCKD_EXCHANGE)",
					alarm.ErrExchangeChanged, recorded, x)
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO clock_instance (instance_id, http_addr, started_at, expires_at, rings, claim_room, preload_window_ms)
			VALUES (?, ?, ?, `+dbNowMS+` + ?, ?, 1, ?)
			ON DUPLICATE KEY UPDATE http_addr = VALUES(http_addr), started_at = VALUES(started_at), expires_at = VALUES(expires_at),
			  rings = VALUES(rings), claim_room = 1, preload_window_ms = VALUES(preload_window_ms)`,
			instanceID, httpAddr, ms(started), ttl.Milliseconds(), rings, window.Milliseconds())
		return err
	})
	if err != nil && !errors.Is(err, alarm.ErrInstanceTaken) && !errors.Is(err, alarm.ErrExchangeChanged) {
		return fmt.Errorf("heartbeat: %w", mapErr(err))
	}
	return err
}

// RingingInstances lists, sorted, the instances whose heartbeat has not
// expired and that can publish (rings = 1): the shards are shared among
// them.
func (s *Store) RingingInstances(ctx context.Context) ([]string, error) {
	var ids []string
	if err := s.db.SelectContext(ctx, &ids,
		"SELECT instance_id FROM clock_instance WHERE expires_at > "+dbNowMS+" AND rings = 1 ORDER BY instance_id"); err != nil {
		return nil, fmt.Errorf("ringing instances: %w", mapErr(err))
	}
	return ids, nil
}

// Leave removes the instance's heartbeat and forgets instances long gone.
func (s *Store) Leave(ctx context.Context, instanceID string) error {
	if _, err := s.db.ExecContext(ctx, "DELETE FROM clock_instance WHERE instance_id = ? OR expires_at < "+dbNowMS+" - 86400000", instanceID); err != nil {
		return fmt.Errorf("leave: %w", mapErr(err))
	}
	return nil
}

type leaseRow struct {
	Shard    int   `db:"shard"`
	Epoch    int64 `db:"epoch"`
	Until    int64 `db:"lease_until"`
	RescanAt int64 `db:"rescan_at"`
}

// leaseUntil is the expiry a renewed or acquired lease gets: that of the
// owner's heartbeat, written just before in the same lease round (now+ttl
// when there is none). The others then see the owner gone (LiveInstances)
// exactly when its leases are free (AcquireLeases): with two expiries a few
// milliseconds apart, a survivor's round falling between them found the
// owner gone but its leases not yet expired, and the takeover waited one
// more lease round. Arguments: owner, ttl in ms.
const leaseUntil = "COALESCE((SELECT i.expires_at FROM clock_instance i WHERE i.instance_id = ?), " + dbNowMS + " + ?)"

// RenewLeases extends every lease the owner holds and returns them.
func (s *Store) RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]alarm.Lease, error) {
	held, err := s.leasesOf(ctx, owner)
	if err != nil || len(held) == 0 {
		return held, err
	}
	// By primary key: a WHERE on the unindexed owner column would lock every
	// lease row it scans and deadlock with other instances' claims.
	args := []any{owner, ttl.Milliseconds(), owner}
	for _, l := range held {
		args = append(args, l.Shard)
	}
	if err := s.execRetry(ctx, "UPDATE clock_shard SET lease_until = "+leaseUntil+", update_time = "+dbNowMS+
		" WHERE owner = ? AND shard IN ("+placeholders(len(held))+")", args...); err != nil {
		return nil, fmt.Errorf("renew leases: %w", mapErr(err))
	}
	return s.leasesOf(ctx, owner)
}

func (s *Store) leasesOf(ctx context.Context, owner string) ([]alarm.Lease, error) {
	var rows []leaseRow
	if err := s.db.SelectContext(ctx, &rows, "SELECT shard, epoch, lease_until, rescan_at FROM clock_shard WHERE owner = ? ORDER BY shard", owner); err != nil {
		return nil, fmt.Errorf("read leases: %w", mapErr(err))
	}
	out := make([]alarm.Lease, len(rows))
	for i, r := range rows {
		out[i] = alarm.Lease{Shard: r.Shard, Epoch: r.Epoch, Until: fromMS(r.Until), RescanAt: r.RescanAt}
	}
	return out, nil
}

// AskRescan stamps the given shards' rows (rescan_at, by the database
// clock) so that their owners rescan them at their next lease round: for
// clocks due soon created or moved through an instance that could not hint
// the owner (migration 00011). It writes no lease column and takes no
// lease row lock for longer than the statement. A stamp is always newer
// than the last (a millisecond at least): the owner acts on a changed
// stamp, and two asks in one millisecond, the second after the owner read
// the first, would otherwise leave the second's clock to the full rescan.
func (s *Store) AskRescan(ctx context.Context, shards []int) error {
	if len(shards) == 0 {
		return nil
	}
	args := make([]any, len(shards))
	for i, sh := range shards {
		args[i] = sh
	}
	if err := s.execRetry(ctx, "UPDATE clock_shard SET rescan_at = GREATEST("+dbNowMS+", rescan_at + 1) WHERE shard IN ("+placeholders(len(shards))+")", args...); err != nil {
		return fmt.Errorf("ask for a rescan of shards %v: %w", shards, mapErr(err))
	}
	return nil
}

// AcquireLeases takes up to n free or expired shards for the owner, each
// with a new epoch, and returns all leases the owner now holds.
func (s *Store) AcquireLeases(ctx context.Context, owner string, n int, ttl time.Duration) ([]alarm.Lease, error) {
	return s.acquire(ctx, owner, n, ttl, "owner IS NULL OR lease_until <= "+dbNowMS)
}

// AcquireFreeLeases is AcquireLeases of shards no one holds (released),
// not of expired leases.
func (s *Store) AcquireFreeLeases(ctx context.Context, owner string, n int, ttl time.Duration) ([]alarm.Lease, error) {
	return s.acquire(ctx, owner, n, ttl, "owner IS NULL")
}

// acquire takes up to n shards whose rows match takable for owner.
func (s *Store) acquire(ctx context.Context, owner string, n int, ttl time.Duration, takable string) ([]alarm.Lease, error) {
	if n > 0 {
		// Find candidates without locking, then take them by primary key,
		// checking again that they are free: only those rows get locked.
		var free []int
		if err := s.db.SelectContext(ctx, &free, "SELECT shard FROM clock_shard WHERE "+takable+
			" ORDER BY shard LIMIT ?", n); err != nil {
			return nil, fmt.Errorf("acquire leases: %w", mapErr(err))
		}
		if len(free) > 0 {
			args := []any{owner, owner, ttl.Milliseconds()}
			for _, sh := range free {
				args = append(args, sh)
			}
			if err := s.execRetry(ctx, `UPDATE clock_shard SET owner = ?, epoch = epoch + 1, lease_until = `+leaseUntil+`, update_time = `+dbNowMS+`
				WHERE shard IN (`+placeholders(len(free))+`) AND (`+takable+`)`, args...); err != nil {
				return nil, fmt.Errorf("acquire leases: %w", mapErr(err))
			}
		}
	}
	return s.leasesOf(ctx, owner)
}

// ReleaseLeases gives shards up so that another instance can take them at
// once.
func (s *Store) ReleaseLeases(ctx context.Context, owner string, shards []int) error {
	if len(shards) == 0 {
		return nil
	}
	args := make([]any, len(shards))
	for i, sh := range shards {
		args[i] = sh
	}
	return s.release(ctx, owner, "shard IN ("+placeholders(len(shards))+")", args)
}

// ReleaseLeasesAt gives shards up under the given epochs only: a lease of
// the shard taken again since (a newer epoch) stays. A hand-over, which
// runs beside the lease rounds, releases what it drained this way.
func (s *Store) ReleaseLeasesAt(ctx context.Context, owner string, leases []alarm.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	pairs, args := leasePairs(leases)
	return s.release(ctx, owner, "(shard, epoch) IN ("+pairs+")", args)
}

// release gives up owner's leases of the shards that cond (with args)
// names.
func (s *Store) release(ctx context.Context, owner, cond string, args []any) error {
	if _, err := s.db.ExecContext(ctx, "UPDATE clock_shard SET owner = NULL, lease_until = 0, update_time = "+dbNowMS+
		" WHERE owner = ? AND "+cond, append([]any{owner}, args...)...); err != nil {
		return fmt.Errorf("release leases: %w", mapErr(err))
	}
	return nil
}

// ClusterShard is one row of the cluster view.
type ClusterShard struct {
	Shard      int    `db:"shard" json:"shard"`
	Owner      string `db:"owner" json:"owner"`
	Epoch      int64  `db:"epoch" json:"epoch"`
	LeaseUntil int64  `db:"lease_until" json:"-"`
}

// ClusterInstance is one instance of the cluster view.
type ClusterInstance struct {
	InstanceID string `db:"instance_id" json:"instance_id"`
	HTTPAddr   string `db:"http_addr" json:"http_addr"`
	StartedAt  int64  `db:"started_at" json:"-"`
	ExpiresAt  int64  `db:"expires_at" json:"-"`
	Rings      bool   `db:"rings" json:"-"`
}

// Cluster reads the instances, the shard leases and the database clock.
func (s *Store) Cluster(ctx context.Context) ([]ClusterInstance, []ClusterShard, time.Time, error) {
	var inst []ClusterInstance
	var shards []ClusterShard
	var now int64
	if err := s.db.GetContext(ctx, &now, "SELECT "+dbNowMS); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("cluster: %w", mapErr(err))
	}
	if err := s.db.SelectContext(ctx, &inst, "SELECT instance_id, http_addr, started_at, expires_at, rings <> 0 AS rings FROM clock_instance ORDER BY instance_id"); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("cluster instances: %w", mapErr(err))
	}
	if err := s.db.SelectContext(ctx, &shards, "SELECT shard, COALESCE(owner, '') AS owner, epoch, lease_until FROM clock_shard ORDER BY shard"); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("cluster shards: %w", mapErr(err))
	}
	return inst, shards, fromMS(now), nil
}

// InstanceHeartbeat is the heartbeat of an instance id while it is live:
// when it expires and when its process started, both ms since the epoch
// by the database's clock; ok false when none is live.
func (s *Store) InstanceHeartbeat(ctx context.Context, instanceID string) (expires, started int64, ok bool, err error) {
	var r struct {
		Expires int64 `db:"expires_at"`
		Started int64 `db:"started_at"`
	}
	err = s.db.GetContext(ctx, &r, "SELECT expires_at, started_at FROM clock_instance WHERE instance_id = ? AND expires_at > "+dbNowMS, instanceID)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("read heartbeat: %w", mapErr(err))
	}
	return r.Expires, r.Started, true, nil
}
