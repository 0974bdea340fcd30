package coordinator

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/protocol"
)

var (
	descRuns      = prometheus.NewDesc("lesfarm_runs", "Runs by active state (queue depth and leases).", []string{"state"}, nil)
	descRejected  = prometheus.NewDesc("lesfarm_protocol_rejected_total", "Protocol messages rejected (dropped), by type and kind.", []string{"type", "kind"}, nil)
	descSamples   = prometheus.NewDesc("lesfarm_ingest_samples_total", "Telemetry samples committed to Postgres.", nil, nil)
	descTelMsgs   = prometheus.NewDesc("lesfarm_ingest_telemetry_messages_total", "Telemetry messages committed.", nil, nil)
	descResults   = prometheus.NewDesc("lesfarm_ingest_results_total", "Results committed.", nil, nil)
	descStale     = prometheus.NewDesc("lesfarm_ingest_stale_total", "Messages rejected for a stale fencing token.", nil, nil)
	descIngestErr = prometheus.NewDesc("lesfarm_ingest_errors_total", "Ingest database errors (batches redelivered).", nil, nil)
	descSweeps    = prometheus.NewDesc("lesfarm_sweeps_total", "Lease, timeout and lost-device sweeps finished.", nil, nil)
	descPoolWait  = prometheus.NewDesc("lesfarm_db_pool_acquire_seconds_total", "Time spent waiting to acquire a database connection from the pool.", nil, nil)
	descPoolAcq   = prometheus.NewDesc("lesfarm_db_pool_acquires_total", "Database connections acquired from the pool, by whether the pool had one idle (empty: the caller waited).", []string{"pool"}, nil)
	descLag       = prometheus.NewDesc("lesfarm_ingest_lag_messages", "Messages not yet committed (pending plus unacked), by stream.", []string{"stream"}, nil)
	descFree      = prometheus.NewDesc("lesfarm_data_dir_free_bytes", "Free space of the data dir's file system at the last check (readyz fails below serve --min-free-space).", nil, nil)
	descHealthy   = prometheus.NewDesc("lesfarm_resource_healthy", "1 when the resource passed its last check (disk: the data dir's free space; jetstream: a probe publish), else 0.", []string{"resource"}, nil)
	descJSRecover = prometheus.NewDesc("lesfarm_jetstream_recoveries_total", "Restarts of the embedded JetStream after a full disk or failed probe.", nil, nil)
	// One counter per phase (not a label), so a scraper summing labels
	// still reads each one.
	descTelPhase = map[string]*prometheus.Desc{}
)

func init() {
	for _, ph := range []string{"fetch", "decode", "commit", "ack"} {
		descTelPhase[ph] = prometheus.NewDesc("lesfarm_ingest_telemetry_"+ph+"_seconds_total",
			"Telemetry ingest workers' time in the "+ph+" phase, summed over the workers.", nil, nil)
	}
}

// collector exports the coordinator's state at scrape time.
type collector struct{ c *Coordinator }

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRuns, descRejected, descSamples, descTelMsgs, descResults, descStale, descIngestErr, descLag, descSweeps, descPoolWait, descPoolAcq, descFree, descHealthy, descJSRecover} {
		ch <- d
	}
	for _, d := range descTelPhase {
		ch <- d
	}
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	c := m.c
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if counts, err := c.store.CountRunsByState(ctx); err == nil {
		for st, n := range counts {
			ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(n), st)
		}
	}
	for k, n := range c.rejects.Snapshot() {
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(n), k.Type, k.Kind)
	}
	st := c.IngestStats()
	ch <- prometheus.MustNewConstMetric(descSamples, prometheus.CounterValue, float64(st.SamplesInserted))
	ch <- prometheus.MustNewConstMetric(descTelMsgs, prometheus.CounterValue, float64(st.TelemetryMessages))
	ch <- prometheus.MustNewConstMetric(descResults, prometheus.CounterValue, float64(st.Results))
	ch <- prometheus.MustNewConstMetric(descStale, prometheus.CounterValue, float64(st.Stale))
	ch <- prometheus.MustNewConstMetric(descIngestErr, prometheus.CounterValue, float64(st.Errors))
	ch <- prometheus.MustNewConstMetric(descSweeps, prometheus.CounterValue, float64(c.Sweeps()))
	for ph, d := range map[string]time.Duration{"fetch": st.FetchTime, "decode": st.DecodeTime, "commit": st.CommitTime, "ack": st.AckTime} {
		ch <- prometheus.MustNewConstMetric(descTelPhase[ph], prometheus.CounterValue, d.Seconds())
	}
	c.res.mu.Lock()
	checked, free, diskOK, jsOK, recovered := c.res.checked, c.res.freeBytes, c.res.diskErr == nil, c.res.jsErr == nil, c.res.recovered
	c.res.mu.Unlock()
	if checked {
		if free >= 0 {
			ch <- prometheus.MustNewConstMetric(descFree, prometheus.GaugeValue, float64(free))
		}
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, b2f(diskOK), "disk")
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, b2f(jsOK), "jetstream")
	}
	ch <- prometheus.MustNewConstMetric(descJSRecover, prometheus.CounterValue, float64(recovered))
	ps := c.store.Pool().Stat()
	ch <- prometheus.MustNewConstMetric(descPoolWait, prometheus.CounterValue, ps.AcquireDuration().Seconds())
	ch <- prometheus.MustNewConstMetric(descPoolAcq, prometheus.CounterValue, float64(ps.AcquireCount()-ps.EmptyAcquireCount()), "idle")
	ch <- prometheus.MustNewConstMetric(descPoolAcq, prometheus.CounterValue, float64(ps.EmptyAcquireCount()), "empty")
	for stream, cons := range map[string]string{protocol.StreamTelemetry: ingest.TelemetryConsumer, protocol.StreamResults: ingest.ResultsConsumer} {
		if c.js == nil {
			break
		}
		cn, err := c.js.Consumer(ctx, stream, cons)
		if err != nil {
			continue
		}
		info, err := cn.Info(ctx)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(info.NumPending)+float64(info.NumAckPending), stream)
	}
}

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
