package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// Wake asks the dispatcher to run a placement round over every idle
// device soon. It never blocks.
func (c *Coordinator) Wake() {
	c.work.setFull()
	c.signal()
}

// signal wakes the dispatch loop for the work pending (c.work).
func (c *Coordinator) signal() {
	c.phases.woken(time.Now())
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// dispatchLoop runs full placement rounds (every idle device) on
// wake-ups and on every tick. The devices results free are placed by
// freedLoop, concurrently, so they never wait for a full round.
func (c *Coordinator) dispatchLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.DispatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-t.C:
			c.work.setFull()
		}
		if !c.work.takeFull() {
			continue
		}
		start := time.Now()
		c.phases.roundStarts(start)
		if err := c.dispatchRound(ctx, nil); err != nil && ctx.Err() == nil {
			c.log.ErrorContext(ctx, "coordinator: dispatch round", "err", err)
		}
		c.log.DebugContext(ctx, "coordinator: dispatch round done", "took", time.Since(start))
	}
}

// freedLoop places the devices that committed results freed, one pass
// over those devices alone as soon as one is freed: a lone result's
// device is placed at once, and the devices freed while a pass is in
// flight go together in the next one (a batch only under backlog).
func (c *Coordinator) freedLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wakeFreedCh:
		}
		freed := c.work.takeFreed()
		if freed == nil {
			continue
		}
		start := time.Now()
		if err := c.dispatchRound(ctx, freed); err != nil && ctx.Err() == nil {
			c.log.ErrorContext(ctx, "coordinator: freed-device pass", "devices", len(freed), "err", err)
		}
		c.log.DebugContext(ctx, "coordinator: freed-device pass done", "devices", len(freed), "took", time.Since(start))
	}
}

// dispatchRound gives queued runs to idle devices until a pass leaves an
// idle device unplaced; with freed set, one pass over those devices only
// (the ones results just freed). One round trip reads a pass's inputs:
// the idle devices, the suites' load and the head of every suite's queue
// (store.Placement); workers then take candidates from that shared list
// (each run is tried by one worker of this coordinator) and claim them in
// the database, where SKIP LOCKED arbitrates between coordinators. A
// device that matches nothing in a truncated list asks the database for
// its own candidates.
func (c *Coordinator) dispatchRound(ctx context.Context, freed []string) error {
	for ctx.Err() == nil {
		qstart := time.Now()
		snap, err := c.store.Placement(ctx, &store.PlacementParams{DeviceIDs: freed, Limit: 2000, HeadExtra: c.reserved.headExtra()})
		if err != nil || len(snap.Devices) == 0 || len(snap.Head) == 0 {
			return err
		}
		load, head, truncated := snap.Load, snap.Head, snap.Truncated
		c.phases.observe(PhaseRoundQueries, time.Since(qstart))
		// Devices a concurrent pass read are that pass's to place.
		devs, held := c.reserved.takeDevices(snap.Devices)
		if len(devs) == 0 {
			return nil
		}
		r := &round{load: load, taken: map[int64]bool{}, head: toSched(head), truncated: truncated, shared: c.reserved}
		// One batch claim for every device the shared head has a run for;
		// the devices it left out (run taken elsewhere, unfit, nothing in
		// the head) go through place, one claim each.
		rest := c.claimBatch(ctx, r, devs)
		var wg sync.WaitGroup
		next := make(chan *store.PlacementDevice)
		for range c.cfg.DispatchWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for d := range next {
					g, err := c.place(ctx, r, d)
					if err != nil {
						if ctx.Err() == nil {
							c.log.ErrorContext(ctx, "coordinator: place", "device_id", d.ID, "err", err)
						}
						continue
					}
					if g != nil {
						c.send(g)
					}
				}
			}()
		}
		for _, d := range rest {
			select {
			case next <- d:
			case <-ctx.Done():
			}
		}
		close(next)
		wg.Wait()
		r.releaseAll()
		c.reserved.releaseDevices(held)
		// Another pass only when this one placed every idle device it
		// read (more may be idle beyond the read's limit, or freed
		// meanwhile). A pass that left devices unplaced found nothing for
		// them, and a pass to confirm it (all its reads again) doubled the
		// database work of every round at 1,000 agents; runs queued or
		// devices freed since wake the dispatcher again.
		if freed != nil && r.granted < len(devs) && r.skippedReserved {
			// Runs this device could take were picked by a concurrent pass,
			// which may not claim them all: a full round rechecks.
			c.Wake()
		}
		if freed != nil || r.granted == 0 || r.granted < len(devs) {
			return nil
		}
	}
	return nil
}

// grantTTL is the lease a claim grants: LeaseTTL from the agent's answer,
// which may take up to AssignTimeout (the acknowledgement renews it to
// LeaseTTL). A lease shorter than its own delivery would expire, and be
// granted again, while its assignment is still on the way; an agent that
// never answers has its lease released by sendAssignment, not by expiry.
func (c *Coordinator) grantTTL() time.Duration { return c.cfg.LeaseTTL + c.cfg.AssignTimeout }

// send pushes a grant to its agent in the background.
func (c *Coordinator) send(g *store.Grant) {
	at := time.Now()
	c.phases.granted(g.Run.DeviceID, at)
	c.sendAt(g, at)
}

// sendAt pushes a grant made at at to its agent in the background.
func (c *Coordinator) sendAt(g *store.Grant, at time.Time) {
	c.sendWG.Add(1)
	go func() {
		defer c.sendWG.Done()
		c.sendAssignment(g, at)
	}()
}

// claimBatch picks the best run of the shared head for each device and
// claims all the pairs in one statement (store.ClaimRuns), sending each
// grant at once. It returns the devices still unplaced, for place.
func (c *Coordinator) claimBatch(ctx context.Context, r *round, devs []store.PlacementDevice) []*store.PlacementDevice {
	pairs, rest, byDevice := c.pickPairs(r, devs)
	if len(pairs) == 0 {
		return rest
	}
	cstart := time.Now()
	grants, err := c.store.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: pairs, LeaseTTL: c.grantTTL(), Coordinator: c.cfg.Name})
	c.phases.observe(PhaseClaim, time.Since(cstart))
	if err != nil && ctx.Err() == nil {
		c.log.WarnContext(ctx, "coordinator: batch claim, placing one by one", "pairs", len(pairs), "granted", len(grants), "err", err)
	}
	placed := map[string]bool{}
	for i := range grants {
		g := &grants[i]
		placed[g.Run.DeviceID] = true
		r.mu.Lock()
		r.granted++
		r.load[g.Run.Suite]++
		r.mu.Unlock()
		c.log.DebugContext(ctx, "coordinator: lease granted", "run_id", g.Run.ID, "device_id", g.Run.DeviceID, "token", g.Token,
			"suite", g.Run.Suite, "attempt", g.Run.Attempts, "batch", len(pairs))
		c.send(g)
	}
	for _, p := range pairs {
		if placed[p.DeviceID] {
			continue
		}
		// Its run went elsewhere or it refused it as unfit: place tries
		// the device's next candidates (the run stays taken in this round,
		// so it is not tried again).
		rest = append(rest, byDevice[p.DeviceID])
	}
	return rest
}

// place claims the best run for one idle device, or returns nil.
func (c *Coordinator) place(ctx context.Context, r *round, d *store.PlacementDevice) (*store.Grant, error) {
	sd := d.SchedulerDevice()
	cands := r.head
	own := false
	var tried map[int64]bool // runs this device tried in the round
	for attempt := 0; attempt < 8; attempt++ {
		cd, ok := r.pick(sd, cands, tried)
		if !ok {
			if own || !r.truncated {
				return nil, nil
			}
			// The shared head had nothing for this device but the queue is
			// longer: ask for the device's own candidates once.
			mine, err := c.store.Candidates(ctx, &store.CandidatesParams{Device: d})
			if err != nil {
				return nil, err
			}
			cands, own = toSched(mine), true
			continue
		}
		if tried == nil {
			tried = map[int64]bool{}
		}
		tried[cd.RunID] = true
		g, err := c.store.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: d.ID, RunIDs: []int64{cd.RunID}, LeaseTTL: c.grantTTL(), Coordinator: c.cfg.Name})
		if errors.Is(err, store.ErrBusy) {
			return nil, nil
		}
		if errors.Is(err, store.ErrUnfit) {
			// The device refused it as unfit (the store remembers that for
			// every coordinator): leave it to the other devices.
			r.untake(cd.RunID)
			continue
		}
		if errors.Is(err, store.ErrNothingToClaim) {
			continue // taken by another coordinator: try the next
		}
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.granted++
		r.load[g.Run.Suite]++
		r.mu.Unlock()
		c.log.DebugContext(ctx, "coordinator: lease granted", "run_id", g.Run.ID, "device_id", d.ID, "token", g.Token,
			"suite", g.Run.Suite, "attempt", g.Run.Attempts)
		return g, nil
	}
	return nil, nil
}

// artifactFor says where the agent downloads the model.
func (c *Coordinator) artifactFor(spec *jobs.Spec) protocol.Artifact {
	m := spec.Model
	a := protocol.Artifact{URL: m.URL, SHA256: m.SHA256, Size: int64(m.Size), Name: m.Name}
	if a.URL == "" && m.Path == "" && c.cfg.ArtifactBaseURL != "" {
		a.URL = strings.TrimRight(c.cfg.ArtifactBaseURL, "/") + "/v1/artifacts/" + m.SHA256
	}
	return a
}

// executableFor returns the executable the device runs for the grant's
// build (nil for a run without a registered exec build), or why the device
// cannot run the build. An exec build's run never goes out without its
// executable: the agent would run its embedded runtime instead.
func (c *Coordinator) executableFor(ctx context.Context, g *store.Grant) (*protocol.Executable, string) {
	kind, x, err := c.store.ExecutableForDevice(ctx, g.Run.Build, g.Run.DeviceID)
	switch {
	case err != nil:
		return nil, "cannot read the build's executable: " + err.Error()
	case kind == "exec" && x == nil:
		return nil, "build " + g.Run.Build + " has no executable for the device's platform"
	case x == nil:
		return nil, ""
	}
	a := protocol.Artifact{SHA256: x.SHA256, Size: x.SizeBytes, Name: g.Run.Build + " " + x.Platform}
	if c.cfg.ArtifactBaseURL != "" {
		a.URL = strings.TrimRight(c.cfg.ArtifactBaseURL, "/") + "/v1/artifacts/" + x.SHA256
	}
	return &protocol.Executable{Platform: x.Platform, Artifact: a}, ""
}

// modelFacts returns the recorded facts of the spec's model when its
// sha256 is in the artifact store (content-addressed, so the facts hold
// whatever URL serves it) and it is not a device-local path, or nil.
// An artifact stored before uploads were analysed (migration 00024) is
// analysed here, once. Facts that do not validate are left out rather than
// failing the assignment: the agent then checks after downloading, as
// before.
func (c *Coordinator) modelFacts(ctx context.Context, spec *jobs.Spec) *protocol.ModelFacts {
	m := spec.Model
	if m.Path != "" || m.SHA256 == "" {
		return nil
	}
	if f, ok := c.facts.get(m.SHA256, time.Now()); ok {
		return f
	}
	f, analysed, err := c.store.ArtifactModelFacts(ctx, m.SHA256)
	if err == nil && !analysed && c.cfg.ArtifactDir != "" {
		// Stored before uploads were analysed: read its header once now.
		var files *artifact.Files
		if files, err = artifact.New(artifact.Config{Dir: c.cfg.ArtifactDir}); err == nil {
			f, err = artifact.RecordModelFacts(ctx, c.store, files, m.SHA256)
		}
	}
	if err != nil {
		c.log.WarnContext(ctx, "coordinator: model facts unavailable", "sha256", m.SHA256, "err", err)
		return nil
	}
	if f != nil && f.Validate() != nil {
		f = nil
	}
	c.facts.put(m.SHA256, f, time.Now())
	return f
}

// sendAssignment pushes a granted lease to the agent and records its answer.
func (c *Coordinator) sendAssignment(g *store.Grant, grantedAt time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.cfg.AssignTimeout+10*time.Second)
	defer cancel()
	log := c.log.With("run_id", g.Run.ID, "device_id", g.Run.DeviceID, "token", g.Token)
	release := func(reason, outcome string, fail bool) {
		// A busy agent, or one that never answered (its subscription is gone:
		// it died before the coordinator noticed), did not start the run, so
		// the attempt is given back; liveness marks a dead device lost.
		transient := outcome == "busy" || outcome == "unreachable" || outcome == "unfit"
		backoff := time.Duration(min(g.Run.Attempts, 6)) * time.Second
		err := c.store.ReleaseAssignment(ctx, &store.ReleaseParams{RunID: g.Run.ID, Token: g.Token, Reason: reason, Outcome: outcome,
			Fail: fail, Refund: transient, Backoff: backoff})
		if err != nil && !errors.Is(err, store.ErrStaleToken) {
			log.ErrorContext(ctx, "coordinator: release assignment", "err", err)
		}
		log.WarnContext(ctx, "coordinator: assignment not accepted", "reason", reason, "failed", fail)
		c.Wake()
	}
	spec := g.Job.Spec
	exe, why := c.executableFor(ctx, g)
	if why != "" {
		release(why, "unfit", false)
		return
	}
	a := &protocol.Assignment{Executable: exe, RunID: g.Run.ID, Token: g.Token, Attempt: g.Run.Attempts, DeviceID: g.Run.DeviceID, Session: c.deviceSession(ctx, g.Run.DeviceID), JobID: g.Job.ID,
		Suite: g.Run.Suite, Build: g.Run.Build, GitSHA: g.Run.GitSHA, Spec: spec, Configs: spec.Expand(),
		Artifact: c.artifactFor(&spec), Model: c.modelFacts(ctx, &spec), LeaseExpiresAt: g.LeaseExpiresAt, Deadline: g.Deadline, IssuedAt: time.Now(),
		// The run's timeout, counted from now: the grant was made a
		// moment ago, so this errs late by that moment, never early.
		DeadlineInMS: g.Run.Timeout.Milliseconds()}
	data, err := protocol.SignAssignment(a, c.signKey)
	if err != nil {
		release("cannot build assignment: "+err.Error(), "invalid", true)
		return
	}
	start := time.Now()
	c.phases.observe(PhaseGrantToPublish, start.Sub(grantedAt))
	msg, err := c.nc.Request(protocol.AssignSubject(g.Run.DeviceID), data, c.cfg.AssignTimeout)
	replied := time.Now()
	if err != nil {
		release("agent did not acknowledge the assignment: "+err.Error(), "unreachable", false)
		return
	}
	rep, err := protocol.DecodeAssignReply(msg.Data)
	if err == nil && (rep.RunID != g.Run.ID || rep.Token != g.Token) {
		err = fmt.Errorf("reply is for run %d token %d", rep.RunID, rep.Token)
	}
	if err != nil {
		c.rejects.Observe(err)
		release("bad assignment reply: "+err.Error(), "bad_reply", false)
		return
	}
	if !rep.Accepted {
		fail := rep.Code == protocol.RefuseMalformed
		outcome := "refused"
		switch rep.Code {
		case protocol.RefuseBusy, protocol.RefuseShuttingDown:
			outcome = "busy"
		case protocol.RefuseUnsupported, protocol.RefuseInsufficientRAM:
			// Not this device: another one may run it. The attempt is
			// given back, and the lease outcome "unfit" keeps this device
			// from claiming the run for store.UnfitFor; a run pinned to
			// this device can go nowhere else.
			if g.Run.TargetDeviceID != "" && g.Run.TargetDeviceID == g.Run.DeviceID {
				fail = true
			} else {
				outcome = "unfit"
			}
		}
		release(fmt.Sprintf("refused by agent (%s): %s", rep.Code, rep.Reason), outcome, fail)
		return
	}
	c.phases.observe(PhaseAgentReply, replied.Sub(start))
	err = c.acks.ack(ctx, g.Run.ID, g.Token, c.cfg.LeaseTTL)
	c.phases.observe(PhaseAckCommit, time.Since(replied))
	if err != nil {
		// Cancelled or failed over while the assignment was in flight; the
		// agent learns from its next heartbeat reply.
		log.WarnContext(ctx, "coordinator: ack of a lease no longer current", "err", err)
		return
	}
	c.assignLatency.observe(time.Since(start))
	log.InfoContext(ctx, "coordinator: assignment accepted", "rtt", time.Since(start).Round(time.Microsecond))
}

// CancelRun pushes the cancellation of a run (already marked cancelled in
// the store) to its agent. An unreachable agent learns it from its next
// heartbeat reply, so CancelRun only logs delivery failures. It implements
// api.Canceller.
func (c *Coordinator) CancelRun(ctx context.Context, runID int64) error {
	r, err := c.store.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	// The same words as a heartbeat reply's notice (store.leaseGoneReason),
	// so the agent reports one reason whichever path reaches it first.
	reason := "cancelled"
	if r.CancelReason != "" {
		reason += ": " + r.CancelReason
	}
	c.pushCancel(ctx, r.ID, r.Token, r.DeviceID, reason)
	c.Wake() // the device may be free now
	return nil
}

func (c *Coordinator) pushCancel(ctx context.Context, runID, token int64, deviceID, reason string) {
	if deviceID == "" || token == 0 {
		return
	}
	data, err := protocol.Encode(&protocol.Cancel{RunID: runID, Token: token, Reason: reason})
	if err != nil {
		c.log.ErrorContext(ctx, "coordinator: encode cancel", "err", err)
		return
	}
	msg, err := c.nc.RequestWithContext(ctx, protocol.CancelSubject(deviceID), data)
	if err != nil {
		c.log.WarnContext(ctx, "coordinator: cancel not delivered, agent learns at next heartbeat", "run_id", runID, "device_id", deviceID, "err", err)
		return
	}
	rep, err := protocol.DecodeCancelReply(msg.Data)
	if err != nil {
		c.rejects.Observe(err)
		return
	}
	c.log.InfoContext(ctx, "coordinator: cancel delivered", "run_id", runID, "device_id", deviceID, "known", rep.Known)
}

// sweepLoop is the safety net: expired leases, run timeouts and devices
// past their TTL whose timer lived elsewhere.
func (c *Coordinator) sweepLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.sweep(ctx)
	}
}

func (c *Coordinator) sweep(ctx context.Context) {
	defer c.sweeps.Add(1)
	c.limits.prune(time.Now())
	// Expired leases and silent devices are only failed over once the
	// database has answered for a TTL (see dbHealth); run timeouts are
	// the runs' own deadlines and go on.
	failover := c.mayFailOver(ctx)
	if failover {
		lctx, cancel := context.WithTimeout(ctx, c.dbTimeout())
		lost, err := c.store.ExpireLeases(lctx, 500)
		cancel()
		c.db.observe(err)
		if err != nil && ctx.Err() == nil {
			c.log.ErrorContext(ctx, "coordinator: expire leases", "err", err)
		}
		c.noteLost(ctx, lost)
	}
	tctx, tcancel := context.WithTimeout(ctx, c.dbTimeout())
	timedOut, err := c.timeoutRuns(tctx)
	tcancel()
	if err != nil && ctx.Err() == nil {
		c.log.ErrorContext(ctx, "coordinator: timeout runs", "err", err)
	}
	for _, t := range timedOut {
		c.log.WarnContext(ctx, "coordinator: run timed out", "run_id", t.RunID, "device_id", t.DeviceID, "requeued", t.Requeued)
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		c.pushCancel(pctx, t.RunID, t.Token, t.DeviceID, "run timed out")
		cancel()
	}
	if len(timedOut) > 0 {
		c.Wake()
	}
	qctx, qcancel := context.WithTimeout(ctx, c.dbTimeout())
	expired, err := c.store.ExpireQueuedRuns(qctx, c.cfg.QueueTimeout, 500) // store/queue_expiry.go
	qcancel()
	if err != nil && ctx.Err() == nil {
		c.log.ErrorContext(ctx, "coordinator: expire queued runs", "err", err)
	}
	for _, r := range expired {
		c.log.WarnContext(ctx, "coordinator: run expired in the queue", "run_id", r.ID, "reason", r.Error)
	}
	if !failover {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, c.dbTimeout())
	defer cancel()
	devs, runs, err := c.store.SweepLostDevices(dctx, c.cfg.LostGrace)
	c.db.observe(err)
	if err != nil && ctx.Err() == nil {
		c.log.ErrorContext(ctx, "coordinator: sweep devices", "err", err)
	}
	for _, d := range devs {
		c.log.WarnContext(ctx, "coordinator: device lost (sweep)", "device_id", d)
	}
	c.noteLost(ctx, runs)
}

// latency keeps recent assignment round trips for metrics and benchmarks.
type latency struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latency) observe(d time.Duration) {
	l.mu.Lock()
	if len(l.d) < 1<<16 {
		l.d = append(l.d, d)
	}
	l.mu.Unlock()
}
