package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/schedule"
)

// Bounds of what one page reads, so that a page stays quick whatever the
// size of the table.
const (
	overviewApps  = 20     // applications on the overview
	countCap      = 200    // counted exactly per application and status; past it, estimated
	dueRowsCap    = 100000 // rows the due chart reads at most
	failingRows   = 5000   // pending rows due within the retry cap read at most
	listLimit     = 50     // clocks per list
	replayAllCap  = 1000   // clocks one "replay all" click replays at most
	dueBuckets    = 60
	dueBucketSize = time.Minute
)

var statuses = []alarm.Status{alarm.StatusPending, alarm.StatusFiring, alarm.StatusRung,
	alarm.StatusCancelled, alarm.StatusExpired, alarm.StatusDead}

func (c *Console) bounded(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 10*time.Second)
}

type appRow struct {
	Name   string
	Counts []alarm.StatusCount // in the order of statuses
}

type overviewData struct {
	Statuses []alarm.Status
	overviewStats
	Rates Rates
	P99   string
	Chart template.HTML
}

// overviewStats is what the overview reads from MySQL, kept kept between views.
type overviewStats struct {
	Apps      []appRow
	MoreApps  bool
	Buckets   []alarm.DueBucket
	DueTotal  int64
	DueCapped bool
	DueFrom   time.Time
	CountedAt time.Time
}

func (c *Console) overview(r *http.Request, v *view) (string, error) {
	v.Title, v.Nav = "Overview", "overview"
	ctx, cancel := c.bounded(r)
	defer cancel()
	d := overviewData{Statuses: statuses, Rates: c.sampler.rates()}
	d.P99 = fmtSeconds(d.Rates.LatenessP99)
	st, at, err := c.overviewSnap.get(ctx)
	if err != nil {
		return "", err
	}
	d.overviewStats = st
	d.CountedAt = at
	d.Chart = dueChart(st.Buckets, dueBucketSize)
	v.Data = d
	return "overview", nil
}

// readOverview reads the overview's counts and due chart: bounded index
// ranges, but up to some hundred thousand index entries in all, which is
// why the pages use it through kept.
func (c *Console) readOverview(ctx context.Context) (overviewStats, error) {
	var d overviewStats
	apps, err := c.o.Store.Applications(ctx, overviewApps+1)
	if err != nil {
		return d, err
	}
	if len(apps) > overviewApps {
		apps, d.MoreApps = apps[:overviewApps], true
	}
	// The due chart beside the counts; the counts a few applications at
	// a time: each is short, the round trips and MySQL's threads overlap.
	var wg sync.WaitGroup
	var dueErr error
	d.DueFrom = c.o.Now().UTC().Truncate(dueBucketSize)
	wg.Go(func() {
		d.Buckets, d.DueCapped, dueErr = c.o.Store.DueHistogram(ctx, d.DueFrom, dueBucketSize, dueBuckets, dueRowsCap)
	})
	d.Apps = make([]appRow, len(apps))
	errs := make([]error, len(apps))
	sem := make(chan struct{}, 4)
	for i, a := range apps {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			counts, err := c.o.Store.StatusCounts(ctx, a, countCap)
			d.Apps[i], errs[i] = appRow{Name: a, Counts: orderCounts(counts)}, err
		})
	}
	wg.Wait()
	if err := errors.Join(append(errs, dueErr)...); err != nil {
		return d, err
	}
	for _, b := range d.Buckets {
		d.DueTotal += b.Count
	}
	return d, nil
}

func orderCounts(cs []alarm.StatusCount) []alarm.StatusCount {
	out := make([]alarm.StatusCount, len(statuses))
	for i, st := range statuses {
		out[i].Status = st
		for _, c := range cs {
			if c.Status == st {
				out[i] = c
			}
		}
	}
	return out
}

func fmtSeconds(s float64) string {
	switch {
	case math.IsNaN(s):
		return "no ring measured"
	case math.IsInf(s, 1):
		return "> 300 s"
	case s < 1:
		return fmt.Sprintf("≤ %g ms", s*1000)
	}
	return fmt.Sprintf("≤ %g s", s)
}

// clockView is a clock as the pages show it.
type clockView struct {
	alarm.Clock
	URL string
}

type clocksData struct {
	Application string
	BusinessID  string
	Status      string
	Statuses    []alarm.Status
	Clocks      []clockView
	Next        int64
	Searched    bool
}

// clocks finds clocks: one by application and business id (it opens its
// page), or a list of an application's newest, by status.
func (c *Console) clocks(r *http.Request, v *view) (string, error) {
	v.Title, v.Nav = "Clocks", "clocks"
	q := r.URL.Query()
	d := clocksData{Application: strings.TrimSpace(q.Get("application")), BusinessID: q.Get("business_id"),
		Status: q.Get("status"), Statuses: statuses}
	v.Data = &d
	if d.Application == "" {
		return "clocks", nil
	}
	if d.BusinessID != "" {
		ctx, cancel := c.bounded(r)
		defer cancel()
		if _, err := c.o.Service.Get(ctx, alarm.Key{Application: d.Application, BusinessID: d.BusinessID}); err != nil {
			if errors.Is(err, alarm.ErrNotFound) {
				v.Error = fmt.Sprintf("No clock %s/%s.", d.Application, d.BusinessID)
				return "clocks", nil
			}
			return "", err
		}
		return "redirect:" + clockURL(d.Application, d.BusinessID), nil
	}
	var after int64
	if s := q.Get("after"); s != "" {
		if _, err := fmt.Sscan(s, &after); err != nil || after < 0 {
			return "", &alarm.FieldError{Field: "after", Message: "is not a cursor", Kind: alarm.ErrInvalid}
		}
	}
	ctx, cancel := c.bounded(r)
	defer cancel()
	cs, next, err := c.o.Service.List(ctx, alarm.ListQuery{Application: d.Application, Status: alarm.Status(d.Status),
		Limit: listLimit, BeforeID: after})
	if err != nil {
		return "", err
	}
	d.Searched = true
	d.Next = next
	for _, cl := range cs {
		d.Clocks = append(d.Clocks, clockView{Clock: cl, URL: clockURL(cl.Application, cl.BusinessID)})
	}
	return "clocks", nil
}

type clockData struct {
	Clock    alarm.Clock
	URL      string
	Pending  bool
	Failed   bool // expired or dead: can be replayed
	Lateness string
	Schedule string // a recurring clock's schedule, in words
}

func (c *Console) clock(r *http.Request, v *view) (string, error) {
	v.Nav = "clocks"
	k := alarm.Key{Application: r.PathValue("application"), BusinessID: r.PathValue("business_id")}
	v.Title = "Clock " + k.String()
	ctx, cancel := c.bounded(r)
	defer cancel()
	cl, err := c.o.Service.Get(ctx, k)
	if err != nil {
		return "", err
	}
	d := clockData{Clock: cl, URL: clockURL(k.Application, k.BusinessID),
		Pending: cl.Status == alarm.StatusPending && !cl.Archived,
		Failed:  (cl.Status == alarm.StatusExpired || cl.Status == alarm.StatusDead) && !cl.Archived}
	// a recurring clock's ring_at is its next occurrence, rung_at its last
	// one's: their difference is no lateness
	if !cl.RungAt.IsZero() && cl.Schedule == nil {
		d.Lateness = cl.RungAt.Sub(cl.RingAt).String()
	}
	if sp := cl.Schedule; sp != nil {
		d.Schedule = scheduleText(*sp)
	}
	v.Data = d
	return "clock", nil
}

func keyOf(r *http.Request) alarm.Key {
	return alarm.Key{Application: r.PathValue("application"), BusinessID: r.PathValue("business_id")}
}

func (c *Console) cancel(w http.ResponseWriter, r *http.Request) (string, string, error) {
	k := keyOf(r)
	ctx, cancel := c.bounded(r)
	defer cancel()
	if _, err := c.o.Service.Cancel(ctx, k); err != nil {
		return "", "", err
	}
	c.log.Info("console: clock cancelled", "application", k.Application, "business_id", k.BusinessID, "remote", r.RemoteAddr)
	return clockURL(k.Application, k.BusinessID), "Cancelled.", nil
}

// move reschedules a pending clock: "when" is a delay from now (a Go
// duration such as 10m) or a time (RFC 3339).
func (c *Console) move(w http.ResponseWriter, r *http.Request) (string, string, error) {
	k := keyOf(r)
	when := strings.TrimSpace(r.PostFormValue("when"))
	var p alarm.PatchInput
	if d, err := time.ParseDuration(when); err == nil {
		p.When = alarm.When{Delay: &d, DelaySet: true}
	} else if t, err := alarm.ParseRFC3339(when); err == nil {
		p.When = alarm.When{At: &t, AtSet: true}
	} else {
		return "", "", &alarm.FieldError{Field: "when", Kind: alarm.ErrInvalid,
			Message: fmt.Sprintf("%q is neither a delay (such as 10m) nor a time (RFC 3339, such as 2026-01-02T15:04:05Z)", when)}
	}
	ctx, cancel := c.bounded(r)
	defer cancel()
	cl, err := c.o.Service.Reschedule(ctx, k, p)
	if err != nil {
		return "", "", err
	}
	c.log.Info("console: clock moved", "application", k.Application, "business_id", k.BusinessID, "ring_at", cl.RingAt, "remote", r.RemoteAddr)
	return clockURL(k.Application, k.BusinessID), "Moved to " + fmtTime(cl.RingAt) + ".", nil
}

func (c *Console) replay(w http.ResponseWriter, r *http.Request) (string, string, error) {
	k := keyOf(r)
	ctx, cancel := c.bounded(r)
	defer cancel()
	if _, err := c.o.Service.Replay(ctx, k); err != nil {
		return "", "", err
	}
	c.log.Info("console: clock replayed", "application", k.Application, "business_id", k.BusinessID, "remote", r.RemoteAddr)
	next := clockURL(k.Application, k.BusinessID)
	if back := r.PostFormValue("back"); back == "trouble" {
		next = Prefix + "trouble?application=" + k.Application
	}
	return next, "Replayed " + k.String() + ": it is due now.", nil
}

// failing is what the trouble page reads of the failing clocks, kept
// between views.
type failing struct {
	groups   []alarm.FailureGroup
	examined int
}

func (c *Console) readFailing(ctx context.Context) (failing, error) {
	groups, examined, err := c.o.Store.Failing(ctx, c.o.Now().Add(c.o.RetryMax), failingRows)
	return failing{groups, examined}, err
}

type troubleData struct {
	CountedAt   time.Time
	Horizon     time.Duration
	Examined    int
	Capped      bool
	Failing     []alarm.FailureGroup
	Application string
	Dead        []clockView
	Expired     []clockView
	MoreDead    bool
	MoreExpired bool
	Apps        []string
}

func (c *Console) trouble(r *http.Request, v *view) (string, error) {
	v.Title, v.Nav = "Trouble", "trouble"
	ctx, cancel := c.bounded(r)
	defer cancel()
	d := troubleData{Horizon: c.o.RetryMax, Application: strings.TrimSpace(r.URL.Query().Get("application"))}
	v.Data = &d
	// The kept failing groups, the applications and the two lists at once.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	wg.Go(func() {
		f, at, err := c.failingSnap.get(ctx)
		d.Failing, d.Examined, d.CountedAt, errs[0] = f.groups, f.examined, at, err
		d.Capped = d.Examined >= failingRows
	})
	wg.Go(func() { d.Apps, errs[1] = c.o.Store.Applications(ctx, 200) })
	for i, st := range []alarm.Status{alarm.StatusDead, alarm.StatusExpired} {
		wg.Go(func() {
			cs, next, err := c.o.Service.List(ctx, alarm.ListQuery{Application: d.Application, Status: st, Limit: listLimit})
			var out []clockView
			for _, cl := range cs {
				out = append(out, clockView{Clock: cl, URL: clockURL(cl.Application, cl.BusinessID)})
			}
			if st == alarm.StatusDead {
				d.Dead, d.MoreDead = out, next != 0
			} else {
				d.Expired, d.MoreExpired = out, next != 0
			}
			errs[2+i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return "trouble", nil
}

// replayAll replays the dead and expired clocks of one application, up to
// replayAllCap per click (the page says when more are left).
func (c *Console) replayAll(w http.ResponseWriter, r *http.Request) (string, string, error) {
	app := strings.TrimSpace(r.PostFormValue("application"))
	if err := alarm.CheckApplication(app); err != nil {
		return "", "", err
	}
	replayed, failed := 0, 0
	var lastErr error
	for _, st := range []alarm.Status{alarm.StatusDead, alarm.StatusExpired} {
		var before int64
		for replayed+failed < replayAllCap {
			ctx, cancel := c.bounded(r)
			cs, next, err := c.o.Service.List(ctx, alarm.ListQuery{Application: app, Status: st,
				Limit: min(500, replayAllCap-replayed-failed), BeforeID: before})
			cancel()
			if err != nil {
				return "", "", err
			}
			for _, cl := range cs {
				ctx, cancel := c.bounded(r)
				_, err := c.o.Service.Replay(ctx, alarm.Key{Application: cl.Application, BusinessID: cl.BusinessID})
				cancel()
				if err != nil {
					failed++
					lastErr = err
					continue
				}
				replayed++
			}
			if next == 0 {
				break
			}
			before = next
		}
	}
	c.log.Info("console: replay all", "application", app, "replayed", replayed, "failed", failed, "remote", r.RemoteAddr)
	msg := fmt.Sprintf("Replayed %d clocks of %s.", replayed, app)
	if failed > 0 {
		msg += fmt.Sprintf(" %d could not be replayed (last error: %v).", failed, lastErr)
	}
	if replayed+failed >= replayAllCap {
		msg += fmt.Sprintf(" Stopped at %d: replay all again for the rest.", replayAllCap)
	}
	return Prefix + "trouble?application=" + app, msg, nil
}

type instanceView struct {
	alarm.Instance
	Live   bool
	Shards []alarm.ShardLease
	Self   bool
}

type clusterData struct {
	DBNow      time.Time
	Instances  []instanceView
	Shards     []shardView
	Unowned    []int
	ShardCount int
	Rates      Rates
}

type shardView struct {
	alarm.ShardLease
	Live bool
	Left time.Duration
}

func (c *Console) cluster(r *http.Request, v *view) (string, error) {
	v.Title, v.Nav = "Cluster", "cluster"
	ctx, cancel := c.bounded(r)
	defer cancel()
	inst, leases, now, err := c.o.Store.Instances(ctx)
	if err != nil {
		return "", err
	}
	d := clusterData{DBNow: now, ShardCount: len(leases), Rates: c.sampler.rates()}
	byOwner := map[string][]alarm.ShardLease{}
	for _, l := range leases {
		live := l.Owner != "" && l.Until.After(now)
		sv := shardView{ShardLease: l, Live: live}
		if live {
			sv.Left = l.Until.Sub(now).Round(time.Millisecond)
			byOwner[l.Owner] = append(byOwner[l.Owner], l)
		} else {
			d.Unowned = append(d.Unowned, l.Shard)
		}
		d.Shards = append(d.Shards, sv)
	}
	for _, i := range inst {
		d.Instances = append(d.Instances, instanceView{Instance: i, Live: i.ExpiresAt.After(now), Shards: byOwner[i.ID],
			Self: i.ID == c.o.InstanceID})
	}
	v.Data = d
	return "cluster", nil
}

type tailData struct {
	Application string
	Apps        []string
}

func (c *Console) tail(r *http.Request, v *view) (string, error) {
	v.Title, v.Nav = "Live tail", "tail"
	d := tailData{Application: strings.TrimSpace(r.URL.Query().Get("app"))}
	if d.Application != "" {
		if err := alarm.CheckApplication(d.Application); err != nil {
			return "", err
		}
	}
	ctx, cancel := c.bounded(r)
	defer cancel()
	apps, err := c.o.Store.Applications(ctx, 200)
	if err != nil {
		return "", err
	}
	d.Apps = apps
	v.Data = d
	return "tail", nil
}

// scheduleText says a recurring clock's schedule in a line.
func scheduleText(sp schedule.Spec) string {
	var b strings.Builder
	if sp.Cron != "" {
		b.WriteString("cron " + sp.Cron)
		if sp.TimeZone != "" {
			b.WriteString(" (" + sp.TimeZone + ")")
		}
	} else {
		b.WriteString("every " + sp.Every.String())
	}
	if !sp.End.IsZero() {
		b.WriteString(", until " + sp.End.UTC().Format(time.RFC3339))
	}
	if sp.MaxOccurrences > 0 {
		b.WriteString(", at most " + strconv.Itoa(sp.MaxOccurrences) + " occurrences")
	}
	if sp.Misfire != "" {
		b.WriteString(", misfire " + string(sp.Misfire))
	}
	if sp.OccurrenceDeadline > 0 {
		b.WriteString(", occurrence deadline " + sp.OccurrenceDeadline.String())
	}
	return b.String()
}
