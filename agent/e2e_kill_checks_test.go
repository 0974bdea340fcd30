// Checks of TestE2EAgentProcessSIGKILL (e2e_kill_process_test.go): requeue,
// fencing of the killed attempt, zombie reports, leases and sample rows.

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// waitRequeued waits until the coordinator marked the device lost and
// requeued the run, then checks the lost attempt was fenced off and its
// rows deleted, and that a zombie reporting with its token changes nothing.
func (f *killFarm) waitRequeued(t *testing.T, id, t1 int64, device string, killedAt time.Time) {
	t.Helper()
	ctx := context.Background()
	st := f.c.Store()
	var queued api.RunDetail
	pollUntil(t, 15*time.Second, "device lost and run requeued", func() (bool, string) {
		d, _ := st.GetDevice(ctx, device)
		queued = f.getRun(t, id)
		return d != nil && d.State == "lost" && queued.State == store.RunQueued,
			fmt.Sprintf("device %+v; run state %s token %d attempts %d error %q", d, queued.State, queued.Token, queued.Attempts, queued.Error)
	})
	t.Logf("requeued %v after the kill: %q", time.Since(killedAt).Round(10*time.Millisecond), queued.Error)
	if queued.Token != 0 || queued.Attempts != 1 || queued.Error == "" {
		t.Fatalf("requeued run: token %d (want cleared) attempts %d error %q", queued.Token, queued.Attempts, queued.Error)
	}
	if out := leaseOutcome(t, st, t1); out != "expired" {
		t.Fatalf("the killed attempt's lease (token %d) ended %q, want expired", t1, out)
	}
	f.wantNoRows(t, id, "after the requeue")

	// 2. The stale token is rejected: a zombie's batch and result change
	// nothing (the store and ingest both fence on the token).
	f.rejectZombie(t, id, t1, device, f.spec.Expand(), "queued")
	if err := st.AckAssignment(ctx, id, t1); !errors.Is(err, store.ErrStaleToken) {
		t.Fatalf("acking with the killed attempt's token: %v, want ErrStaleToken", err)
	}
	if r := f.getRun(t, id); r.State != store.RunQueued || r.Token != 0 {
		t.Fatalf("a stale-token result moved the run: state %s token %d", r.State, r.Token)
	}
	f.wantNoRows(t, id, "after the zombie's messages")
}

// rejectZombie publishes a zombie's batch and result with the dead token
// and waits until ingest has terminated both as stale.
func (f *killFarm) rejectZombie(t *testing.T, id, token int64, device string, configs []jobs.Config, phase string) {
	t.Helper()
	stale0 := f.c.IngestStats().Stale
	f.publishZombie(t, id, token, device, configs, phase)
	pollUntil(t, 15*time.Second, "zombie telemetry and result processed ("+phase+")", func() (bool, string) {
		s := f.c.IngestStats()
		n := f.pendingMsgs(t)
		return s.Stale >= stale0+2 && n == 0, fmt.Sprintf("ingest %+v, %d messages pending", s, n)
	})
}

func (f *killFarm) getRun(t *testing.T, id int64) api.RunDetail {
	t.Helper()
	var r api.RunDetail
	// With the API token: fencing tokens are hidden from anonymous readers.
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/runs/%d", f.base, id), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET run %d: %v", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET run %d: %s %s", id, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("GET run %d: %v", id, err)
	}
	return r
}

// wantNoRows checks the run holds no samples and no results.
func (f *killFarm) wantNoRows(t *testing.T, id int64, when string) {
	t.Helper()
	n, err := f.c.Store().CountSamples(context.Background(), id)
	if err != nil || n != 0 {
		t.Fatalf("%s: run %d has %d samples (err %v), want none: the killed attempt's rows must be gone", when, id, n, err)
	}
	res, err := f.c.Store().ListResults(context.Background(), &store.ListResultsParams{RunID: id, Limit: 10})
	if err != nil || len(res) != 0 {
		t.Fatalf("%s: run %d has %d results (err %v), want none", when, id, len(res), err)
	}
}

// publishZombie publishes what a killed agent that came back would send
// with its dead token: a telemetry batch and a succeeded result.
func (f *killFarm) publishZombie(t *testing.T, id, token int64, device string, configs []jobs.Config, phase string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A seq no attempt reaches, so an accepted zombie batch adds rows.
	tb := &protocol.TelemetryBatch{RunID: id, Token: token, DeviceID: device, Seq: 1 << 20, SentAt: time.Now(),
		Samples: []protocol.Sample{{ConfigIndex: 0, Step: 0, Phase: protocol.PhaseDecode, Pos: 1, Tokens: 1, DurationNS: 4242}}}
	res := &protocol.Result{RunID: id, Token: token, DeviceID: device, Outcome: protocol.OutcomeSucceeded,
		StartedAt: time.Now().Add(-time.Second), FinishedAt: time.Now(), TelemetryBatches: 1, TelemetrySamples: 1}
	for i, c := range configs {
		res.Configs = append(res.Configs, protocol.ConfigResult{ConfigIndex: i, ConfigKey: c.Key, Repetitions: 1, Valid: true})
	}
	nonce := protocol.NewMsgNonce()
	for _, m := range []struct {
		subject string
		msg     protocol.Message
	}{{protocol.TelemetrySubject(id), tb}, {protocol.ResultSubject(id), res}} {
		data, err := protocol.Encode(m.msg)
		if err != nil {
			t.Fatal(err)
		}
		// The ids a real agent would use (protocol/msgid.go), a fresh
		// nonce per phase.
		msgID := protocol.TelemetryMsgID(device, id, token, tb.Seq, nonce)
		if m.msg == protocol.Message(res) {
			msgID = protocol.ResultMsgID(device, id, token, nonce)
		}
		if _, err := f.js.Publish(ctx, m.subject, data, jetstream.WithMsgID(msgID)); err != nil {
			t.Fatalf("publish zombie %s: %v", m.msg.MessageType(), err)
		}
	}
}

// pendingMsgs is the number of messages still in the TELEMETRY and RESULTS
// work queues (ingest removes a message once it is acked or terminated).
func (f *killFarm) pendingMsgs(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n uint64
	for _, name := range []string{protocol.StreamTelemetry, protocol.StreamResults} {
		s, err := f.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += info.State.Msgs
	}
	return n
}

// checkLeases checks the run's lease history: the killed attempt's lease
// ended with t1Outcome, the last one succeeded, and any lease in between was given back
// without starting the run (an assignment the dead agent could not answer).
func (f *killFarm) checkLeases(t *testing.T, id, t1 int64, t1Outcome string, t2 int64) {
	t.Helper()
	rows, err := f.c.Store().Pool().Query(context.Background(), `SELECT token, outcome, released_at IS NOT NULL FROM leases WHERE run_id = $1 ORDER BY token`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var hist []string
	var tokens []int64
	for rows.Next() {
		var tok int64
		var outcome string
		var released bool
		if err := rows.Scan(&tok, &outcome, &released); err != nil {
			t.Fatal(err)
		}
		hist = append(hist, fmt.Sprintf("%d:%s", tok, outcome))
		tokens = append(tokens, tok)
		switch {
		case !released:
			t.Fatalf("lease %d of run %d was never released (history %v)", tok, id, hist)
		case tok == t1 && outcome != t1Outcome, tok == t2 && outcome != "succeeded":
			t.Fatalf("lease %d ended %q (history %v)", tok, outcome, hist)
		case tok != t1 && tok != t2 && outcome != "unreachable" && outcome != "busy":
			t.Fatalf("unexpected lease %d %q of run %d (history %v)", tok, outcome, id, hist)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tokens) < 2 || tokens[0] != t1 || tokens[len(tokens)-1] != t2 {
		t.Fatalf("lease history of run %d: %v, want %d first and %d last", id, hist, t1, t2)
	}
	t.Logf("lease history of run %d: %v", id, hist)
}

func leaseOutcome(t *testing.T, st *store.Store, token int64) string {
	t.Helper()
	var out string
	if err := st.Pool().QueryRow(context.Background(), `SELECT outcome FROM leases WHERE token = $1 AND released_at IS NOT NULL`, token).Scan(&out); err != nil {
		t.Fatalf("lease %d: %v", token, err)
	}
	return out
}

// sampleRow is the part of a stored sample compared with the wire.
type sampleRow struct {
	Cfg, Rep, Step, Pos int
	DurationNS          int64
	BytesRead           int64
}

func (f *killFarm) sampleRows(t *testing.T, id int64) map[[2]int]sampleRow {
	t.Helper()
	rows, err := f.c.Store().Pool().Query(context.Background(),
		`SELECT seq, idx, config_index, repetition, step, pos, duration_ns, bytes_read FROM samples WHERE run_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[[2]int]sampleRow{}
	for rows.Next() {
		var seq int32
		var idx, cfg, rep int16
		var step, pos int32
		var r sampleRow
		if err := rows.Scan(&seq, &idx, &cfg, &rep, &step, &pos, &r.DurationNS, &r.BytesRead); err != nil {
			t.Fatal(err)
		}
		r.Cfg, r.Rep, r.Step, r.Pos = int(cfg), int(rep), int(step), int(pos)
		out[[2]int{int(seq), int(idx)}] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// leaseEnd is how lease tok of run id ended ("" while it has not).
func (f *killFarm) leaseEnd(t *testing.T, id, tok int64) string {
	t.Helper()
	var outcome string
	if err := f.c.Store().Pool().QueryRow(context.Background(), `SELECT coalesce(outcome, '') FROM leases WHERE run_id = $1 AND token = $2`, id, tok).Scan(&outcome); err != nil {
		t.Fatal(err)
	}
	return outcome
}
