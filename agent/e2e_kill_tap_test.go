// The wire tap of TestE2EAgentProcessSIGKILL (e2e_kill_process_test.go):
// what the agent published on NATS, and what its disk buffer holds.

package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/protocol"
)

// wireTap records every telemetry batch and result published on NATS (a
// plain subscriber sees the JetStream publishes too), with arrival time.
type wireTap struct {
	mu      sync.Mutex
	batches []tappedBatch
	results []*protocol.Result
	hellos  []tappedHello
}

type tappedHello struct {
	at     time.Time
	device string
}

type tappedBatch struct {
	at time.Time
	b  *protocol.TelemetryBatch
}

func (f *killFarm) tap(t *testing.T) *wireTap {
	t.Helper()
	w := &wireTap{}
	sub, err := f.nc.Subscribe("lesfarm.v1.>", func(m *nats.Msg) {
		switch {
		case strings.HasPrefix(m.Subject, "lesfarm.v1.device.") && strings.HasSuffix(m.Subject, ".hello"):
			if h, err := protocol.DecodeHello(m.Data); err == nil {
				w.mu.Lock()
				w.hellos = append(w.hellos, tappedHello{at: time.Now(), device: h.DeviceID})
				w.mu.Unlock()
			}
		case strings.HasPrefix(m.Subject, "lesfarm.v1.telemetry."):
			if b, err := protocol.DecodeTelemetry(m.Data); err == nil {
				w.mu.Lock()
				w.batches = append(w.batches, tappedBatch{at: time.Now(), b: b})
				w.mu.Unlock()
			}
		case strings.HasPrefix(m.Subject, "lesfarm.v1.result."):
			if r, err := protocol.DecodeResult(m.Data); err == nil {
				w.mu.Lock()
				w.results = append(w.results, r)
				w.mu.Unlock()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

func (w *wireTap) result(t *testing.T, id, token int64) *protocol.Result {
	t.Helper()
	var found *protocol.Result
	pollUntil(t, 10*time.Second, "result seen on the wire", func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, r := range w.results {
			if r.RunID == id && r.Token == token {
				found = r
			}
		}
		return found != nil, fmt.Sprintf("%d results seen", len(w.results))
	})
	return found
}

// samples returns the samples attempt token published, keyed (seq, idx).
// Seqs must run 0..batches-1 without gaps, and a batch seen twice (a
// re-send) must be identical.
func (w *wireTap) samples(t *testing.T, id, token int64, batches uint64) map[[2]int]sampleRow {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	bySeq := map[uint64]*protocol.TelemetryBatch{}
	for _, tb := range w.batches {
		b := tb.b
		if b.RunID != id || b.Token != token {
			continue
		}
		if prev, ok := bySeq[b.Seq]; ok && len(prev.Samples) != len(b.Samples) {
			t.Fatalf("batch seq %d of token %d seen twice with different samples", b.Seq, token)
		}
		bySeq[b.Seq] = b
	}
	seqs := make([]uint64, 0, len(bySeq))
	for s := range bySeq {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	if uint64(len(seqs)) != batches || (len(seqs) > 0 && seqs[len(seqs)-1] != batches-1) {
		t.Fatalf("attempt %d published batch seqs %v, its result says %d batches", token, seqs, batches)
	}
	out := map[[2]int]sampleRow{}
	for _, s := range seqs {
		for i, smp := range bySeq[s].Samples {
			out[[2]int{int(s), i}] = sampleRow{Cfg: smp.ConfigIndex, Rep: smp.Repetition, Step: smp.Step, Pos: smp.Pos,
				DurationNS: smp.DurationNS, BytesRead: smp.BytesRead}
		}
	}
	return out
}

// hellosBetween counts the hellos of device seen in [from, to).
func (w *wireTap) hellosBetween(device string, from, to time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, h := range w.hellos {
		if h.device == device && !h.at.Before(from) && h.at.Before(to) {
			n++
		}
	}
	return n
}

// batchesSince returns the (token, seq) of batches of the run with the
// given token seen after since.
func (w *wireTap) batchesSince(id int64, since time.Time, token int64) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []uint64
	for _, tb := range w.batches {
		if tb.b.RunID == id && tb.b.Token == token && tb.at.After(since) {
			out = append(out, tb.b.Seq)
		}
	}
	return out
}

// bufferFiles lists the record files of an agent's telemetry buffer and
// counts torn temporary files.
func bufferFiles(dir string) (records []string, torn int) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0
	}
	for _, de := range des {
		switch n := de.Name(); {
		case strings.HasSuffix(n, ".tmp"):
			torn++
		case strings.HasSuffix(n, ".d"), strings.HasSuffix(n, ".s"):
			records = append(records, n)
		}
	}
	return records, torn
}

// readBufferRecord checks one record file of the agent's disk buffer
// (agent/telemetry.Buffer: u32 subject length, subject, u32 msg id length,
// msg id, data, u32 CRC-32 of everything before) without touching it, and
// returns its msg id.
func readBufferRecord(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if len(b) < 12 {
		return "", errors.New("short record")
	}
	body := b[:len(b)-4]
	if crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return "", errors.New("CRC mismatch: torn record")
	}
	n := int(binary.LittleEndian.Uint32(body))
	if n > len(body)-8 {
		return "", errors.New("bad subject length")
	}
	body = body[4+n:]
	m := int(binary.LittleEndian.Uint32(body))
	if m > len(body)-4 {
		return "", errors.New("bad msg id length")
	}
	return string(body[4 : 4+m]), nil
}
