package preload

// The lease keeper: every TTL/4 a round heartbeats this instance, reads the
// live instances, takes or gives back shards so that each instance holds
// its fair share, and starts or stops the loader of each shard it gains or
// loses. A shard given up for a rebalance is drained first (the ring loop
// holds nothing of it any more), then released.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// Run keeps the leases until ctx is done, then stops the loaders and gives
// the shards up so that other instances take them over at once.
func (m *Manager) Run(ctx context.Context) error {
	tick := m.cfg.LeaseTTL / 4
	failures := 0
	m.waitRing(ctx, 2*time.Second)
	for {
		began := time.Now()
		if err := m.round(ctx); err != nil {
			if errors.Is(err, alarm.ErrInstanceTaken) {
				// another process holds this instance id now (this one
				// was frozen or cut off past its heartbeat): the leases
				// under the id are its, so none is released
				m.stop(false)
				return err
			}
			if errors.Is(err, alarm.ErrExchangeChanged) {
				// the cluster rings to another exchange now: this
				// instance's shards go to the instances that do
				m.stop(true)
				return err
			}
			failures++
			m.mu.Lock()
			m.lastErr = err
			m.mu.Unlock()
			if ctx.Err() == nil && (failures == 1 || failures%20 == 0) {
				m.log.Warn("lease round failed", "err", err, "failures", failures)
			}
		} else {
			if failures > 0 {
				m.log.Info("lease round works again", "after_failures", failures)
			}
			failures = 0
		}
		// a tick from the round's start
		select {
		case <-ctx.Done():
			m.stop(true)
			return nil
		case <-time.After(max(tick-time.Since(began), 0)):
		}
	}
}

// Ready is nil while lease rounds succeed.
func (m *Manager) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lastOK.IsZero() || time.Since(m.lastOK) > m.cfg.LeaseTTL {
		if m.lastErr != nil {
			return fmt.Errorf("shard leases not renewed: %w", m.lastErr)
		}
		return errors.New("shard leases not renewed yet")
	}
	return nil
}

// brokerState is what this instance knows of its own ability to ring.
type brokerState int

const (
	ringing  brokerState = iota // it can publish
	blip                        // it cannot, for less than the lease TTL so far
	noBroker                    // it cannot, for the lease TTL or since its start
)

// share is how many shards this instance should hold: its fair share among
// the live instances that can ring (ringing, which its own heartbeat has
// just joined or left) while it can ring; those it holds (held) during a
// blip, neither taking nor giving any; none when it has no broker and
// another instance can ring, so that they ring its shards' clocks; and
// still those it holds when no instance can ring, since moving shards
// would help nobody.
func share(shards int, ringing []string, me string, st brokerState, held int) int {
	switch st {
	case blip:
		return held
	case noBroker:
		for _, id := range ringing {
			if id != me {
				return 0
			}
		}
		return held
	}
	return target(shards, ringing, me)
}

// waitRing gives the publisher a moment to connect at the start (at most
// wait), so that the first lease round judges the broker by a connection
// made, not by one under way.
func (m *Manager) waitRing(ctx context.Context, wait time.Duration) {
	if m.cfg.CanRing == nil {
		return
	}
	deadline := time.Now().Add(wait)
	for m.cfg.CanRing() != nil && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// brokerState judges, for this round, whether this instance can ring (see
// Config.CanRing), and logs when it gives its shards up or takes them
// again. Its heartbeat says at once that it cannot ring (the others then
// leave it out of their shares), but it gives its shards up only after the
// lease TTL: a broker restart or a move to another node of a cluster ends
// sooner, and moving every shard for it would delay rings, not hasten them.
func (m *Manager) brokerState() brokerState {
	if m.cfg.CanRing == nil {
		return ringing
	}
	err := m.cfg.CanRing()
	now := m.now()
	first := !m.judged
	m.judged = true
	if err == nil {
		if m.handedOver {
			m.log.Info("RabbitMQ takes rings again: this instance takes its share of the shards")
		} else if m.gaveUp {
			m.log.Info("RabbitMQ takes rings again")
		}
		m.downSince, m.gaveUp, m.handedOver = time.Time{}, false, false
		return ringing
	}
	if m.downSince.IsZero() {
		m.downSince = now
	}
	if !m.gaveUp && (first || now.Sub(m.downSince) >= m.cfg.LeaseTTL) {
		// whether its shards go to others is said by the round, which
		// knows whether any other instance can ring
		m.gaveUp = true
		m.log.Warn("cannot publish to RabbitMQ: this instance rings nothing until it can",
			"for", now.Sub(m.downSince).Round(time.Second).String(), "err", err)
	}
	if m.gaveUp {
		return noBroker
	}
	return blip
}

// target is this instance's fair share of the shards.
func target(shards int, live []string, me string) int {
	i := sort.SearchStrings(live, me) // my rank among the live instances
	n := len(live)
	if i == n || live[i] != me {
		n++ // my heartbeat is not visible yet: count me in at my rank
	}
	t := shards / n
	if i < shards%n {
		t++
	}
	return t
}

func (m *Manager) round(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL/2)
	defer cancel()
	start := time.Now() // local monotonic time the renewal is counted from
	ttl := m.cfg.LeaseTTL
	st := m.brokerState()
	peerWindow, err := m.store.Heartbeat(ctx, m.cfg.InstanceID, m.cfg.HTTPAddr, m.started, ttl, st == ringing, m.cfg.Window)
	if err != nil {
		return err
	}
	m.peerWindow.Store(int64(peerWindow))
	if m.cfg.Report != nil {
		if err := m.cfg.Report(ctx); err != nil {
			m.log.Debug("instance stats not written", "err", err)
		}
	}
	live, err := m.store.RingingInstances(ctx)
	if err != nil {
		return err
	}
	// Back from an outage of its own (MySQL gone, stalled, or this process
	// frozen) past half a lease TTL: the others were likely cut off as
	// long, and their heartbeats and leases ran out by the database's clock
	// while they lived. Taking their shards now would recover the clocks
	// they hold confirmed and not yet marked rung, and ring them again
	// (found by review: 24 duplicates after a 6 s MySQL restart under 3
	// instances). So for one TTL it takes no other instance's expired
	// lease, only shards no one holds: a live instance renews within a
	// round, a dead one's shards are taken a TTL later than otherwise.
	m.mu.Lock()
	if !m.lastOK.IsZero() && start.Sub(m.lastOK) > ttl/2 {
		m.backAt = start
	}
	holdBack := !m.backAt.IsZero() && start.Sub(m.backAt) < ttl
	m.mu.Unlock()
	if !m.joined {
		// A previous process under this instance id (restarted at once
		// after a crash) may still hold leases. Renewing them would keep
		// their epoch: that process would not be fenced and the clocks it
		// left firing (claimed under that epoch) would wait for the firing
		// timeout. Give them up so they are acquired under new epochs.
		all := make([]int, m.cfg.Shards)
		for i := range all {
			all[i] = i
		}
		if err := m.store.ReleaseLeases(ctx, m.cfg.InstanceID, all); err != nil {
			return err
		}
		m.joined = true
	}
	leases, err := m.store.RenewLeases(ctx, m.cfg.InstanceID, ttl)
	if err != nil {
		return err
	}
	validUntil := start.Add(ttl - ttl/5)
	// Shards being handed over are renewed too (they are this instance's
	// until released): their rings in flight are waited for while the
	// lease lasts. They count no more in this instance's share.
	leases = m.renewHanding(leases, validUntil)
	want := share(m.cfg.Shards, live, m.cfg.InstanceID, st, len(leases))
	if st == noBroker && want == 0 && len(leases) > 0 && !m.handedOver {
		// said only when it happens: with no instance able to ring,
		// nobody moves anything
		m.handedOver = true
		m.log.Warn("without RabbitMQ this instance gives its shards up to the instances that can ring",
			"shards", len(leases))
	}
	var give []alarm.Lease
	if extra := len(leases) - want; extra > 0 {
		// hand the highest shards over: stop ringing them first; they are
		// drained and released in the background (handOver), their leases
		// renewed meanwhile by the rounds
		m.mu.Lock()
		for _, l := range leases[len(leases)-extra:] {
			give = append(give, l)
			m.handing[l.Shard] = &handOff{epoch: l.Epoch, until: validUntil}
		}
		m.mu.Unlock()
		for _, l := range give {
			m.stopLoader(l.Shard)
		}
		leases = leases[:len(leases)-extra]
	} else if extra < 0 {
		acquire := m.store.AcquireLeases
		if holdBack {
			// released shards only (drained by their last owner), not
			// expired leases (found by review: released shards stayed
			// unowned for a TTL)
			acquire = m.store.AcquireFreeLeases
		}
		if leases, err = acquire(ctx, m.cfg.InstanceID, -extra, ttl); err != nil {
			return err
		}
		// it returns every lease held here, those being handed over too:
		// never taken up again while their hand-over runs
		leases = m.renewHanding(leases, validUntil)
	}
	held := map[int]alarm.Lease{}
	for _, l := range leases {
		held[l.Shard] = l
	}
	m.mu.Lock()
	var lost []int
	for s, ld := range m.loaders {
		if l, ok := held[s]; !ok || l.Epoch != ld.epoch {
			lost = append(lost, s)
		}
	}
	m.mu.Unlock()
	if len(lost) > 0 {
		// one line for the round's losses (up to clock.shards of them)
		sort.Ints(lost)
		m.log.Warn("shard leases lost", "shards", lost)
	}
	for _, s := range lost {
		m.lostCnt.Inc()
		m.stopLoader(s)
	}
	var gained []int
	recovered := map[int]int64{} // shard: clocks left firing by a previous owner
	for _, l := range leases {
		m.mu.Lock()
		ld, ok := m.loaders[l.Shard]
		if ok {
			ld.setValid(validUntil)
		}
		m.mu.Unlock()
		if ok && l.RescanAt != ld.rescanSeen {
			// another instance took a create for this shard, due soon,
			// and could not hint it (AskRescan)
			ld.rescanSeen = l.RescanAt
			ld.rescan()
			m.asked.Inc()
		}
		if !ok {
			n, err := m.store.RecoverFiring(ctx, l.Shard, l.Epoch, m.now().Add(-m.cfg.FiringTimeout), m.cfg.Held(), m.now())
			if err != nil {
				return err
			}
			if n > 0 {
				recovered[l.Shard] = n
			}
			m.startLoader(l, validUntil)
			gained = append(gained, l.Shard)
		}
	}
	if len(gained) > 0 {
		m.log.Info("acquired shards", "shards", gained, "live_instances", len(live))
	}
	if len(recovered) > 0 {
		var n int64
		for _, c := range recovered {
			n += c
		}
		m.log.Info("recovered clocks left firing by a previous owner", "clocks", n, "by_shard", recovered)
	}
	if len(give) > 0 {
		m.handovers.Add(1)
		go func() {
			defer m.handovers.Done()
			m.handOver(give, len(live))
		}()
	}
	m.mu.Lock()
	m.lastOK = time.Now()
	m.lastErr = nil
	m.owned.Set(float64(len(m.loaders)))
	m.mu.Unlock()
	return nil
}

// handOff is a shard given up for a rebalance and not yet released: its
// lease is still this instance's, renewed by the rounds until release.
type handOff struct {
	epoch    int64
	until    time.Time // the lease's end by the local reckoning
	released time.Time // when the release began; zero before
}

// renewHanding takes the shards being handed over out of leases (the
// leases a round renewed), and counts their renewal: validUntil.
func (m *Manager) renewHanding(leases []alarm.Lease, validUntil time.Time) []alarm.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s, h := range m.handing {
		if !h.released.IsZero() && time.Since(h.released) > 2*m.cfg.LeaseTTL {
			delete(m.handing, s) // released long ago: no ring waits on it
		}
	}
	kept := leases[:0]
	for _, l := range leases {
		if h, ok := m.handing[l.Shard]; ok && h.epoch == l.Epoch {
			if h.released.IsZero() {
				h.until = validUntil
			}
			continue
		}
		kept = append(kept, l)
	}
	return kept
}

// handOver drains the shards given up (their loaders stopped), then
// releases them: the next owner must find none of their clocks armed or in
// flight here, or it recovers and rings them a second time. It runs in the
// background while the rounds go on renewing every lease, the shards
// handed over included, so that a drain that waits for slow confirms (up
// to DrainTimeout) neither lets the kept leases lapse nor ends the wait for
// the confirms of the shards handed over before their lease does. (Run at
// the end of the round, the drain had to stop at half the TTL, and the
// shards' last reckoning was the round before's: confirms slower than
// that were failed attempts, rung again by the next owner.)
func (m *Manager) handOver(give []alarm.Lease, live int) {
	shards := make([]int, len(give))
	for i, l := range give {
		shards[i] = l.Shard
	}
	if m.cfg.Drain != nil {
		dctx, cancel := context.WithTimeout(context.Background(), m.cfg.DrainTimeout)
		err := m.cfg.Drain(dctx, shards)
		cancel()
		if err != nil {
			m.log.Warn("shards handed over before their rings in flight were recorded; the next owner may ring some again", "shards", shards, "err", err)
		}
	}
	// from now on the hold is over: no ring of theirs is published
	now := time.Now()
	m.mu.Lock()
	for _, l := range give {
		if h, ok := m.handing[l.Shard]; ok && h.epoch == l.Epoch {
			h.released, h.until = now, now
		}
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.LeaseTTL/2)
	defer cancel()
	// under the epochs handed over: a lease of the shard lost and taken
	// again meanwhile is not this hand-over's to release
	if err := m.store.ReleaseLeasesAt(ctx, m.cfg.InstanceID, give); err != nil {
		// still this instance's: the next round takes them up again as
		// gained (or finds them taken over) and hands them over anew
		m.mu.Lock()
		for _, l := range give {
			if h, ok := m.handing[l.Shard]; ok && h.epoch == l.Epoch {
				delete(m.handing, l.Shard)
			}
		}
		m.mu.Unlock()
		m.log.Warn("could not release shards handed over; this instance keeps them for now", "shards", shards, "err", err)
		return
	}
	m.log.Info("released shards for rebalancing", "shards", shards, "live_instances", live)
}

// stop stops the loaders and, with release, gives the shards up and
// removes the instance's heartbeat.
func (m *Manager) stop(release bool) {
	m.handovers.Wait()
	m.mu.Lock()
	var shards []int
	for s := range m.loaders {
		shards = append(shards, s)
	}
	m.mu.Unlock()
	for _, s := range shards {
		m.stopLoader(s)
	}
	m.wg.Wait()
	if !release {
		m.owned.Set(0)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// every shard this instance still owns: those it rang, and those of a
	// hand-over whose release failed (no round comes to take them up)
	all := make([]int, m.cfg.Shards)
	for i := range all {
		all[i] = i
	}
	if err := m.store.ReleaseLeases(ctx, m.cfg.InstanceID, all); err != nil {
		m.log.Warn("could not release shard leases; they expire by themselves", "err", err)
	}
	if err := m.store.Leave(ctx, m.cfg.InstanceID); err != nil {
		m.log.Warn("could not remove instance heartbeat", "err", err)
	}
	m.owned.Set(0)
}
