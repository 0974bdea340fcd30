package expert

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
)

// Device time.
//
// A profile emulates a device's flash, but the model computes at the
// host's speed, so without correction the ratio of read time to compute
// time, and with it every LES speedup, belongs to the host (and to its
// load: on a shared 2-core machine wall-clock compute varies by several
// times). With device time (Options.DeviceTime) the store keeps a device
// clock, a discrete-event clock in the device's own time, and the
// emulated flash runs on it:
//
//   - Compute. The store sees the boundaries of each token's compute
//     segments: per layer the non-expert part before its Use (attention or
//     DeltaNet, norms, router, shared expert, the lookahead router; the
//     output head and embedding at the start of each forward pass) and
//     each expert inside Use. Each advances the clock by what it costs the
//     device: the profile's Compute roofline applied to the segment's
//     weight bytes and FLOPs (ComputeCosts, from the model file).
//   - Flash. A read issued at device time T completes at T + latency plus
//     its transfer through the device's bandwidth, demanded transfers
//     first: a demanded read pauses the speculative transfers still
//     running (their completion moves back by its transfer time), as the
//     Throttle does in real time.
//   - Waiting. An expert is ready when its read is done on the device
//     clock (and the real pread has finished, which costs no device time).
//     When the mode must wait, the clock jumps to the next completion:
//     that jump is device stall.
//
// This is the emulated flash on a clock dilated per segment by the
// host's compute time over the device's, without the host's scheduling
// noise. Decisions (which expert is ready first) depend only on device
// time, so results do not move with the host's speed. The host's time for
// the same segments is measured and recorded: Stats.HostCompute, and the
// dilation HostCompute / DeviceCompute.
//
// Decode (positions fed one at a time, moe.Batcher) and speculative
// verify passes count in the decode totals; the other passes of several
// positions, prefill, in their own total (Stats.DevicePrefill), so a
// prefill rate on an emulated device is the device's too. A pass of
// several positions reads each segment's weights once with its FLOPs for
// every position, and each of its experts once at the weight bandwidth
// (a batch's FLOPs per expert are not known here). Dilation changes time, never what
// is read or computed, so outputs stay exact. What the model leaves out:
// attention over the context (FLOPs growing with position), and, without
// a measured table (with one, deviceflash.go shares the device by queue
// depth), the device's queue-depth limit (latencies overlap without
// bound; transfers share the
// bandwidth), the release of bandwidth reserved by speculative reads that
// are cancelled, and the store's own host overheads.

// ComputeCost is the work of one compute segment for one token.
type ComputeCost struct {
	Bytes int64   // weight bytes read
	FLOPs float64 // floating-point operations
}

// ComputeCosts is the work of the segments of one decoded token. Gap[l] is
// what the model computes before layer l's Use (Head is added to the first
// layer with experts); experts are costed from the layer shapes.
type ComputeCosts struct {
	Gap  []ComputeCost
	Head ComputeCost
	// Router[l] is layer l's router; the lookahead modes run it once more,
	// in layer l-1's gap, to predict.
	Router []ComputeCost
}

// CostsFromGGUF returns the non-expert compute costs of f's layers (all
// tensors of blk.L except the routed experts, two FLOPs per weight) and of
// the output head (output.weight, or the tied embedding, plus one
// embedding row).
func CostsFromGGUF(f *gguf.File, layers int) *ComputeCosts {
	c := &ComputeCosts{Gap: make([]ComputeCost, layers), Router: make([]ComputeCost, layers)}
	var embed *gguf.TensorInfo
	hasOutput := false
	for _, t := range f.Tensors() {
		name := t.Name
		if rest, ok := strings.CutPrefix(name, "blk."); ok {
			num, tail, _ := strings.Cut(rest, ".")
			l, err := strconv.Atoi(num)
			if err != nil || l < 0 || l >= layers || isRoutedExpertTensor(tail) {
				continue
			}
			c.Gap[l].Bytes += t.Size
			c.Gap[l].FLOPs += 2 * float64(t.Elements())
			if tail == "ffn_gate_inp.weight" {
				c.Router[l] = ComputeCost{Bytes: t.Size, FLOPs: 2 * float64(t.Elements())}
			}
			continue
		}
		switch name {
		case "output.weight", "output_norm.weight":
			hasOutput = hasOutput || name == "output.weight"
			c.Head.Bytes += t.Size
			c.Head.FLOPs += 2 * float64(t.Elements())
		case "token_embd.weight":
			embed = t
		}
	}
	if embed != nil && len(embed.Dims) == 2 && embed.Dims[1] > 0 {
		if !hasOutput { // tied: the head reads the whole table
			c.Head.Bytes += embed.Size
			c.Head.FLOPs += 2 * float64(embed.Elements())
		}
		c.Head.Bytes += embed.Size / int64(embed.Dims[1])
	}
	return c
}

// isRoutedExpertTensor reports whether the tensor name after "blk.L." is a
// routed expert's (stacked ffn_*_exps, or a packed ffn_{gate,up,down}.E).
func isRoutedExpertTensor(tail string) bool {
	if strings.Contains(tail, "_exps") {
		return true
	}
	for _, p := range []string{"ffn_gate.", "ffn_up.", "ffn_down."} {
		if rest, ok := strings.CutPrefix(tail, p); ok {
			num, _, _ := strings.Cut(rest, ".")
			if _, err := strconv.Atoi(num); err == nil {
				return true
			}
		}
	}
	return false
}

// DeviceClock is a store's device clock (Options.DeviceTime), its flash
// model and its accounting. A store with device time returns it from
// Store.Clock; a nil *DeviceClock (no device time) is valid and reports
// nothing. Its exported methods are safe for concurrent use. Internally,
// everything but totals runs on the model goroutine (Use, Prefetch and
// Batch, and reads issued from them), most of it under the store's lock;
// totals takes the clock's own lock.
type DeviceClock struct {
	store *sync.Mutex // the store's lock, which guards the clock's state

	comp     *Compute
	gap      []time.Duration // device time per layer before its Use (decode)
	head     time.Duration   // output head + embedding row (decode)
	headCost ComputeCost     // for a verify pass's head (logits at every position)
	gapCost  []ComputeCost   // for prefill
	expert   []time.Duration // one expert for one token, per layer
	expBytes []int64
	slow     float64 // ComputeSlowdown

	prof *Profile // the flash: Profile.ReadCost prices each read
	// ps is the flash of a profile with a measured table (deviceflash.go):
	// reads share the device at the table's throughput for their depth.
	// nil for the simple form, whose reads pay a latency and share one
	// bandwidth (nextDemand, nextSpec).
	ps *psFlash

	now        time.Duration // the device clock
	nextDemand time.Duration // the flash is free for demanded transfers
	nextSpec   time.Duration // ... for speculative ones
	specActive []*entry      // speculative reads not done on the clock
	charged    []bool        // gap of layer l already charged (at a Prefetch)
	batchN     int
	// counted is set while the current pass counts in the totals: a
	// decode pass (one position) or a verify pass of several positions
	// announced by VerifyNext (verifyNext until its Batch).
	counted, verifyNext bool
	last                time.Time // end of the latest store call in decode (host)

	mu         sync.Mutex
	hostTotal  time.Duration
	devTotal   time.Duration
	stallTotal time.Duration
	// prefill is the device time of the passes the decode totals leave
	// out (several positions, not a verify): their compute, their stall
	// and their output head; prefillStall the stall within it.
	prefill, prefillStall time.Duration
}

func secs(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }

func newDeviceClock(p *Profile, costs *ComputeCosts, shapes []moe.LayerShape, slow float64, predicts bool, specMax int) *DeviceClock {
	c := p.Compute
	d := &DeviceClock{
		comp: c, gap: make([]time.Duration, len(shapes)), gapCost: make([]ComputeCost, len(shapes)),
		expert: make([]time.Duration, len(shapes)), expBytes: make([]int64, len(shapes)), charged: make([]bool, len(shapes)),
		slow: max(slow, 1), batchN: 1, counted: true, prof: p,
	}
	if p.Service != nil {
		d.ps = &psFlash{st: p.Service, specMax: specMax}
	}
	for l, sh := range shapes {
		if sh.Experts == 0 {
			continue
		}
		d.expert[l] = secs(c.Seconds(sh.Bytes(), 6*float64(sh.Hidden)*float64(sh.FFN)))
		d.expBytes[l] = sh.Bytes()
		if costs != nil && l < len(costs.Gap) {
			g := costs.Gap[l]
			if predicts && l+1 < len(costs.Router) {
				g.Bytes += costs.Router[l+1].Bytes
				g.FLOPs += costs.Router[l+1].FLOPs
			}
			d.gapCost[l] = g
			d.gap[l] = secs(c.Seconds(g.Bytes, g.FLOPs))
		}
	}
	if costs != nil {
		d.head = secs(c.Seconds(costs.Head.Bytes, costs.Head.FLOPs))
		d.headCost = costs.Head
	}
	return d
}

// compute advances the clock by a compute segment: dev on the device; in
// decode (a counted pass) the host's time for it (measured from since,
// busy work of the slowdown hook added) is counted too.
func (d *DeviceClock) compute(dev time.Duration, since time.Time) {
	d.now += dev
	if !d.counted {
		d.addPrefill(dev)
		return
	}
	if since.IsZero() {
		return
	}
	h := time.Since(since)
	if d.slow > 1 {
		busy(time.Duration(float64(h) * (d.slow - 1)))
		h = time.Since(since)
	}
	d.mu.Lock()
	d.hostTotal += h
	d.devTotal += dev
	d.mu.Unlock()
}

// stall advances the clock to t (a read's completion) and counts the wait.
func (d *DeviceClock) stall(t time.Duration) {
	if t <= d.now {
		return
	}
	if d.counted {
		d.mu.Lock()
		d.stallTotal += t - d.now
		d.mu.Unlock()
	} else {
		d.mu.Lock()
		d.prefill += t - d.now
		d.prefillStall += t - d.now
		d.mu.Unlock()
	}
	d.now = t
}

// addPrefill counts dev as prefill time (a pass outside the decode totals).
func (d *DeviceClock) addPrefill(dev time.Duration) {
	d.mu.Lock()
	d.prefill += dev
	d.mu.Unlock()
}

// issue reserves the flash for a read of n bytes in runs preads issued now
// and sets e.devDone to its completion on the device clock. Each pread of
// n/runs bytes costs the profile's latency and transfer for its size
// (Profile.ReadCost: one latency and bandwidth, or the measured table). A worker issues
// an expert's preads one after the other, so each pread after the first
// delays the expert by the profile's latency (the compat layout's second
// read; an unpacked file's third). Like the first read's latency, that
// delay does not occupy the flash's bandwidth: other reads transfer
// meanwhile.
func (d *DeviceClock) issue(e *entry, n int64, runs int, demand bool) {
	runs = max(runs, 1)
	if d.ps != nil {
		e.devDone = d.ps.issue(e, d.now, n, runs, demand)
		return
	}
	lat, xfer := d.prof.runsCost(n, runs)
	extra := time.Duration(runs-1) * lat
	if demand {
		start := max(d.now+lat, d.nextDemand)
		e.devDone = start + xfer + extra
		d.nextDemand = start + xfer
		// Speculative transfers still running pause for this one.
		live := d.specActive[:0]
		for _, x := range d.specActive {
			if x.devDone <= d.now {
				continue
			}
			if x.spec.Load() && x.devDone > start {
				x.devDone += xfer
			}
			live = append(live, x)
		}
		clear(d.specActive[len(live):])
		d.specActive = live
		if d.nextSpec > start {
			d.nextSpec += xfer
		}
		return
	}
	start := max(d.now+lat, d.nextSpec, d.nextDemand)
	e.devDone = start + xfer + extra
	d.nextSpec = start + xfer
	d.specActive = append(d.specActive, e)
}

// syncRead is a synchronous read of n bytes with the flash otherwise idle
// (the naive mode's faults): the clock waits for it.
func (d *DeviceClock) syncRead(n int64, pages int64) {
	defer d.pages(pages)
	if d.ps != nil {
		d.stall(d.ps.issue(nil, d.now, n, 1, true))
		return
	}
	lat, x := d.prof.ReadCost(n)
	start := max(d.now+lat, d.nextDemand, d.nextSpec)
	d.nextDemand = start + x
	d.stall(d.nextDemand)
}

// pages charges the device's page-cache work for pages read by a naive
// fault (Compute.PageCost each) as device compute.
func (d *DeviceClock) pages(n int64) {
	dev := time.Duration(n) * d.comp.PageCost
	if dev <= 0 {
		return
	}
	d.now += dev
	if d.counted {
		d.mu.Lock()
		d.devTotal += dev
		d.mu.Unlock()
	} else {
		d.addPrefill(dev)
	}
}

// busy spins for d: the ComputeSlowdown test hook's busy work.
func busy(d time.Duration) {
	end := time.Now().Add(d)
	x := 1.0
	for time.Now().Before(end) {
		for range 64 {
			x = x*1.0000001 + 1e-9
		}
	}
	_ = x
}

func (d *DeviceClock) batch(n int) {
	prevN, prevVerify := d.batchN, d.batchN != 1 && d.counted
	d.batchN = n
	d.counted = n == 1 || d.verifyNext
	d.verifyNext = false
	clear(d.charged)
	if !d.counted {
		// A prefill pass: its output head (the logits of its last
		// position) counts in its time now; the clock advances by it at
		// the next pass, as before any pass's head.
		d.addPrefill(d.head)
		d.last = time.Time{}
		return
	}
	// The previous pass's output head ran since the last Use (a verify
	// pass's for the logits of all its positions; after a prefill, d.last
	// is zero and the head is not counted).
	head := d.head
	if prevVerify {
		head = secs(d.comp.Seconds(d.headCost.Bytes, d.headCost.FLOPs*float64(prevN)))
	}
	d.compute(head, d.last)
	d.last = time.Now()
}

// gapCharge charges the non-expert compute of layer once per token: at
// the Prefetch issued from it (lookahead, after its attention) or at its
// Use.
func (d *DeviceClock) gapCharge(layer int) {
	if layer < 0 || layer >= len(d.gap) || d.charged[layer] {
		return
	}
	d.charged[layer] = true
	dev := d.gap[layer]
	if d.batchN != 1 {
		g := d.gapCost[layer]
		dev = secs(d.comp.Seconds(g.Bytes, g.FLOPs*float64(max(d.batchN, 1))))
	}
	d.compute(dev, d.last)
	if d.counted {
		d.last = time.Now()
	}
}

// expertDone charges one expert's compute (host time since t0).
func (d *DeviceClock) expertDone(layer int, t0 time.Time) {
	dev := d.expert[layer]
	if d.batchN != 1 {
		dev = secs(float64(d.expBytes[layer]) / d.comp.WeightBandwidth)
	}
	d.compute(dev, t0)
}

// endUse marks the end of a Use: the next segment starts here.
func (d *DeviceClock) endUse() {
	if d.counted {
		d.last = time.Now()
	}
}

// reset zeroes the totals (Meter.Reset); the clock runs on.
func (d *DeviceClock) reset() {
	d.mu.Lock()
	d.hostTotal, d.devTotal, d.stallTotal, d.prefill, d.prefillStall = 0, 0, 0, 0, 0
	d.mu.Unlock()
}

func (d *DeviceClock) totals() (host, dev, stall time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hostTotal, d.devTotal, d.stallTotal
}

// prefillTotal returns the device time of the prefill passes so far
// (Stats.DevicePrefill).
func (d *DeviceClock) prefillTotal() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.prefill
}

// Batch implements moe.Batcher: the model feeds n positions in the next
// forward pass; device time counts only n == 1 (decode).
func (s *Store) Batch(n int) {
	if s.clock != nil {
		s.mu.Lock()
		s.clock.batch(n)
		s.mu.Unlock()
	}
}

// Clock returns the store's device clock, or nil without device time
// (Options.DeviceTime); DeviceClock's methods accept nil.
func (s *Store) Clock() *DeviceClock { return s.clock }

// nextDoneLocked returns the earliest device completion among the items
// not done yet whose reads are issued and not done on the clock, or -1.
func (s *Store) nextDoneLocked(items []*entry, done []bool) time.Duration {
	best := time.Duration(-1)
	for i, e := range items {
		if e == nil || done[i] || !e.issued || e.state == stFailed || e.devDone <= s.clock.now {
			continue
		}
		if best < 0 || e.devDone < best {
			best = e.devDone
		}
	}
	return best
}

// nextEvictableDoneLocked returns the earliest device completion among
// the cached entries that are read on the host, not yet on the device
// clock, and pinned by nothing: when the clock reaches it, the entry may
// be evicted (cache.evictable). -1 without device time or such an entry.
func (s *Store) nextEvictableDoneLocked() time.Duration {
	best := time.Duration(-1)
	if s.clock == nil {
		return best
	}
	for _, e := range s.cache.entries {
		if e.state != stReady || e.pins > 0 || !e.issued || e.devDone <= s.clock.now {
			continue
		}
		if best < 0 || e.devDone < best {
			best = e.devDone
		}
	}
	return best
}

// issuedLocked is the read queue's hook: a read of e was queued.
func (s *Store) issuedLocked(e *entry, demand bool) {
	e.issued = true
	if s.clock != nil {
		runs := len(planRead(s.layout.Experts[e.key.Layer][e.key.Expert], s.file.align).runs)
		s.clock.issue(e, s.bufSize[e.key.Layer], runs, demand)
	}
	// The cache policy learns of it in issue order, not in the host's
	// completion order, so eviction is deterministic: in device time,
	// and on direct storage too, which then caches what its twin caches.
	s.cache.policy().Insert(e.key)
}

// forgetIssuedLocked takes a cancelled read's key out of the cache policy,
// which learnt of it at issue, and its read off the device clock's flash.
func (s *Store) forgetIssuedLocked(e *entry) {
	s.cache.policy().Remove(e.key)
	if s.clock != nil && s.clock.ps != nil {
		s.clock.ps.cancel(e, s.clock.now)
	}
}

// useClocked runs Use under the device clock.
func (s *Store) useClocked(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	c := s.clock
	if layer < 0 || layer >= len(s.shapes) {
		return s.use(ctx, layer, experts, fn)
	}
	s.mu.Lock()
	c.gapCharge(layer)
	s.mu.Unlock()
	err := s.use(ctx, layer, experts, func(i int, w moe.Weights) error {
		t0 := time.Now()
		err := fn(i, w)
		s.mu.Lock()
		c.expertDone(layer, t0)
		s.mu.Unlock()
		return err
	})
	s.mu.Lock()
	c.endUse()
	s.mu.Unlock()
	return err
}

// newClock validates the device-time options and returns the clock, or nil
// without device time.
func newClock(opts *Options, shapes []moe.LayerShape, storeMu *sync.Mutex) (*DeviceClock, error) {
	if opts.ComputeSlowdown != 0 && (opts.ComputeSlowdown < 1 || opts.ComputeSlowdown > 100) {
		return nil, fmt.Errorf("expert: compute slowdown %g must be between 1 and 100", opts.ComputeSlowdown)
	}
	if !opts.DeviceTime {
		return nil, nil
	}
	if opts.Profile == nil {
		return nil, fmt.Errorf("expert: device time needs a device profile with a compute section (direct storage runs at the host's speed)")
	}
	if opts.Profile.Compute == nil {
		return nil, fmt.Errorf("expert: device time needs profile %s to declare its compute speed (a compute: section with weight_bandwidth and throughput)", opts.Profile.Name)
	}
	predicts := opts.Mode == Lookahead || opts.Mode == Scheduled
	d := newDeviceClock(opts.Profile, opts.Costs, shapes, opts.ComputeSlowdown, predicts, opts.SpecInFlight)
	d.store = storeMu
	return d, nil
}
