package loadtest

import (
	"bufio"
	"context"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// scrapePoint is one sampling of the coordinators and the agents.
type scrapePoint struct {
	at       time.Time
	sent     int64   // samples acknowledged to the agents so far
	ingested []int64 // committed samples per coordinator (-1: scrape failed)
	cpu      []float64
	rss      []int64
	mem      []MemoryBreakdown
	phases   []map[string]float64 // ingest workers' seconds by phase, per coordinator
}

// ingestPhases are the coordinators' telemetry worker phases
// (lesfarm_ingest_telemetry_<phase>_seconds_total).
var ingestPhases = []string{"fetch", "decode", "commit", "ack"}

// scraper samples the coordinators' /metrics and the agents' sent counter.
type scraper struct {
	urls   []string
	every  time.Duration
	sent   func() int64
	client *http.Client

	mu     sync.Mutex
	points []scrapePoint
	end    time.Time
}

func newScraper(urls []string, every time.Duration, sent func() int64) *scraper {
	return &scraper{urls: urls, every: every, sent: sent, client: &http.Client{Timeout: 5 * time.Second}}
}

func (s *scraper) run(ctx context.Context) {
	if len(s.urls) == 0 {
		return
	}
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		s.scrape(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// mark records the end of the load window (the last point at or before it
// closes the window's figures).
func (s *scraper) mark(end time.Time) {
	s.scrape(context.Background())
	s.mu.Lock()
	s.end = end
	s.mu.Unlock()
}

func (s *scraper) scrape(ctx context.Context) {
	if len(s.urls) == 0 {
		return
	}
	p := scrapePoint{sent: s.sent(), ingested: make([]int64, len(s.urls)), cpu: make([]float64, len(s.urls)), rss: make([]int64, len(s.urls)),
		mem: make([]MemoryBreakdown, len(s.urls)), phases: make([]map[string]float64, len(s.urls))}
	var wg sync.WaitGroup
	for i, u := range s.urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := s.fetch(ctx, u)
			if err != nil {
				p.ingested[i], p.cpu[i], p.rss[i] = -1, -1, -1
				return
			}
			p.ingested[i] = int64(m["lesfarm_ingest_samples_total"])
			p.cpu[i] = m["process_cpu_seconds_total"]
			p.rss[i] = int64(m["process_resident_memory_bytes"])
			p.mem[i] = memoryBreakdown(m)
			p.phases[i] = map[string]float64{}
			for _, ph := range ingestPhases {
				if v, ok := m["lesfarm_ingest_telemetry_"+ph+"_seconds_total"]; ok {
					p.phases[i][ph] = v
				}
			}
		}()
	}
	wg.Wait()
	p.at = time.Now()
	s.mu.Lock()
	s.points = append(s.points, p)
	s.mu.Unlock()
}

// fetch reads the unlabelled samples of a Prometheus text exposition.
func (s *scraper) fetch(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, &httpError{url: url, code: resp.StatusCode}
	}
	return parseMetrics(resp.Body)
}

type httpError struct {
	url  string
	code int
}

func (e *httpError) Error() string { return e.url + ": HTTP " + strconv.Itoa(e.code) }

// parseMetrics returns the value of every unlabelled sample line
// ("name value") of a Prometheus text exposition; labelled lines are
// summed under their bare name.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name = line[:i]
			j := strings.LastIndexByte(line, '}')
			if j < 0 {
				continue
			}
			rest, ok = strings.TrimSpace(line[j+1:]), true
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out, sc.Err()
}

// MemoryBreakdown is where a coordinator's memory was, from the Go
// runtime's figures on its /metrics (bytes): HeapLive is the heap marked
// live by the last GC, HeapInuse the heap spans in use (live objects and
// garbage not yet collected: the GC's headroom above HeapLive, GOGC=100
// allows up to as much again), HeapIdle the free spans the runtime keeps
// without returning them to the OS, Stacks the goroutine stacks, and
// Runtime the rest of what the runtime obtained (GC metadata, spans,
// buffers). Their sum is close to the Go part of the resident set.
type MemoryBreakdown struct {
	HeapLive  int64 `json:"heap_live"`
	HeapInuse int64 `json:"heap_inuse"`
	HeapIdle  int64 `json:"heap_idle_unreleased"`
	Stacks    int64 `json:"stacks"`
	Runtime   int64 `json:"runtime_other"`
	// Goroutines is the number of goroutines.
	Goroutines int64 `json:"goroutines"`
}

// memoryBreakdown reads a MemoryBreakdown from scraped Go collector
// metrics (zero when they are absent).
func memoryBreakdown(m map[string]float64) MemoryBreakdown {
	heapSys, inuse := m["go_memstats_heap_sys_bytes"], m["go_memstats_heap_inuse_bytes"]
	idle, released := m["go_memstats_heap_idle_bytes"], m["go_memstats_heap_released_bytes"]
	stacks, sys := m["go_memstats_stack_sys_bytes"], m["go_memstats_sys_bytes"]
	if sys == 0 {
		return MemoryBreakdown{}
	}
	// next_gc is the heap goal: live × (1 + GOGC/100) at the last cycle.
	live := m["go_memstats_next_gc_bytes"] / 2
	return MemoryBreakdown{HeapLive: int64(live), HeapInuse: int64(inuse), HeapIdle: int64(idle - released), Stacks: int64(stacks),
		Runtime: int64(sys - heapSys - stacks), Goroutines: int64(m["go_goroutines"])}
}

// fill adds the window's coordinator figures and ingest lag to rep.
func (s *scraper) fill(rep *Report, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var win []scrapePoint
	for _, p := range s.points {
		if !p.at.After(end.Add(s.every)) {
			win = append(win, p)
		}
	}
	if len(win) < 2 {
		return
	}
	first, last := win[0], win[len(win)-1]
	span := last.at.Sub(first.at).Seconds()
	var committed int64
	for i, u := range s.urls {
		cs := CoordinatorStats{MetricsURL: u}
		for _, p := range s.points {
			if p.rss[i] > cs.RSSMaxBytes {
				cs.RSSMaxBytes = p.rss[i]
				if p.mem[i] != (MemoryBreakdown{}) {
					m := p.mem[i]
					cs.MemoryAtRSSMax = &m
				}
			}
		}
		if first.cpu[i] >= 0 && last.cpu[i] >= 0 && span > 0 {
			cs.CPUCores = math.Round((last.cpu[i]-first.cpu[i])/span*100) / 100
		}
		if first.ingested[i] >= 0 && last.ingested[i] >= 0 {
			cs.SamplesCommitted = last.ingested[i] - first.ingested[i]
			committed += cs.SamplesCommitted
		}
		if first.phases[i] != nil && last.phases[i] != nil && span > 0 {
			for _, ph := range ingestPhases {
				v1, ok1 := last.phases[i][ph]
				v0, ok0 := first.phases[i][ph]
				if ok0 && ok1 {
					if cs.IngestWorkers == nil {
						cs.IngestWorkers = map[string]float64{}
					}
					cs.IngestWorkers[ph] = math.Round((v1-v0)/span*100) / 100
				}
			}
		}
		rep.Coordinators = append(rep.Coordinators, cs)
	}
	if span > 0 {
		rep.IngestedPerS = math.Round(float64(committed) / span)
	}
	// Lag: for each point, how long ago the agents had sent as many
	// samples as are committed now.
	base := make([]int64, len(s.urls))
	copy(base, first.ingested)
	var lags []float64
	for k, p := range win {
		var ing int64
		for i := range p.ingested {
			if p.ingested[i] >= 0 && base[i] >= 0 {
				ing += p.ingested[i] - base[i]
			}
		}
		ing += first.sent // samples sent before the first point count as committed then
		lag := 0.0
		if ing < p.sent {
			j := slices.IndexFunc(win[:k+1], func(q scrapePoint) bool { return q.sent >= ing })
			if j >= 0 {
				lag = p.at.Sub(win[j].at).Seconds()
			}
		}
		lags = append(lags, lag)
	}
	slices.Sort(lags)
	rep.IngestLagP50S = math.Round(pct(lags, 0.5)*1000) / 1000
	rep.IngestLagMaxS = math.Round(lags[len(lags)-1]*1000) / 1000
	steadyRates(rep, win, first)
	backlogRate(rep, s.points, first)
}

// committedSince is the samples committed at p since first, plus those
// sent before first (taken as committed then); ok is false when a
// coordinator's scrape failed at either point.
func committedSince(p, first scrapePoint) (n int64, ok bool) {
	for i := range p.ingested {
		if p.ingested[i] < 0 || first.ingested[i] < 0 {
			return 0, false
		}
		n += p.ingested[i] - first.ingested[i]
	}
	return n + first.sent, true
}

// steadyRates sets the sent and committed rates over the window's second
// half: from the first point at or after its middle to its last point.
func steadyRates(rep *Report, win []scrapePoint, first scrapePoint) {
	last := win[len(win)-1]
	mid := first.at.Add(last.at.Sub(first.at) / 2)
	k := slices.IndexFunc(win, func(p scrapePoint) bool { return !p.at.Before(mid) })
	if k < 0 || k == len(win)-1 {
		return
	}
	m := win[k]
	span := last.at.Sub(m.at).Seconds()
	c0, ok0 := committedSince(m, first)
	c1, ok1 := committedSince(last, first)
	if !ok0 || !ok1 || span <= 0 {
		return
	}
	rep.SteadySentPerS = math.Round(float64(last.sent-m.sent) / span)
	rep.SteadyIngestedPerS = math.Round(float64(c1-c0) / span)
}

// backlogRate sets the committed rate over the intervals between
// consecutive points that both had a backlog (committed < sent).
func backlogRate(rep *Report, points []scrapePoint, first scrapePoint) {
	var dur float64
	var n int64
	for k := 1; k < len(points); k++ {
		p, q := points[k-1], points[k]
		cp, okp := committedSince(p, first)
		cq, okq := committedSince(q, first)
		if !okp || !okq || cp >= p.sent || cq >= q.sent {
			continue
		}
		dur += q.at.Sub(p.at).Seconds()
		n += cq - cp
	}
	if dur > 0 {
		rep.BacklogS = math.Round(dur*100) / 100
		rep.BacklogIngestedPerS = math.Round(float64(n) / dur)
	}
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg reads /proc/loadavg (zeros where it cannot).
func loadAvg() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	for i, f := range strings.Fields(string(b)) {
		if i >= 3 {
			break
		}
		out[i], _ = strconv.ParseFloat(f, 64)
	}
	return out
}
