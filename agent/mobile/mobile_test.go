package mobile

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/testenv"
)

type recorder struct {
	mu     sync.Mutex
	states []string
	logs   []string
}

func (r *recorder) OnLog(level, msg string) {
	r.mu.Lock()
	r.logs = append(r.logs, level+" "+msg)
	r.mu.Unlock()
}

func (r *recorder) OnState(s string) {
	r.mu.Lock()
	r.states = append(r.states, s)
	r.mu.Unlock()
}

func (r *recorder) snapshot() ([]string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.states...), append([]string(nil), r.logs...)
}

func TestStartStatusStop(t *testing.T) {
	ns := testenv.NATS(t)
	var rec recorder
	cfg := fmt.Sprintf(`{"nats_url":%q,"name":"phone-1","cache_dir":%q,"labels":{"pool":"lab"},"profile":"phone-mid","batch_ms":100}`, ns.ClientURL(), t.TempDir())
	a, err := Start(cfg, &rec)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(a.Status()), &st); err != nil {
		t.Fatal(err)
	}
	if st["device_id"] != "phone-1" || st["emulated"] != true || st["profile"] != "phone-mid" {
		t.Fatalf("status %v", st)
	}
	if !strings.Contains(a.Fingerprint(), `"emulated:phone-mid"`) {
		t.Fatalf("fingerprint %s", a.Fingerprint())
	}
	// No coordinator answers: the agent keeps trying and stays connecting.
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if _, logs := rec.snapshot(); !strings.Contains(strings.Join(logs, "\n"), "INFO agent: connected to NATS") {
			return fmt.Errorf("no connect log; logs: %q", logs)
		}
		return nil
	})
	if err := a.Stop(10); err != nil {
		t.Fatal(err)
	}
	if a.Running() {
		t.Fatal("still running after Stop")
	}
	states, _ := rec.snapshot()
	if len(states) < 2 || states[len(states)-1] != "stopped" || states[len(states)-2] != "stopping" {
		t.Fatalf("states %v", states)
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct{ cfg, want string }{
		{`not json`, "config JSON"},
		{`{"nats_url":"nats://x","name":"a","cache_dir":"/tmp/x","bogus":1}`, "bogus"},
		{`{"nats_url":"nats://x","name":"a"}`, "cache_dir"},
		{`{"name":"a","cache_dir":"/tmp/x"}`, "NATS URL"},
		{`{"nats_url":"nats://x","name":"a b","cache_dir":"/tmp/x"}`, "name"},
		{`{"nats_url":"nats://x","name":"a","cache_dir":"/tmp/x","log_level":"loud"}`, "log_level"},
	} {
		if _, err := Start(tc.cfg, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start(%s) err = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestZeroAgentIsSafe(t *testing.T) {
	var a Agent // what gobind's generated constructor gives the app
	if a.Running() || a.Stop(1) != nil || a.Status() != `{"state":"stopped"}` || a.Fingerprint() != "{}" {
		t.Fatal("zero Agent misbehaves")
	}
	if !strings.Contains(DeviceFingerprint(t.TempDir()), `"platform"`) || Version() == "" {
		t.Fatal("package functions")
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(`{"nats_url":"nats://x","name":"a","cache_dir":"/tmp/x","labels":{"a":"b"},"batch_ms":5}`)
	f.Add(`{"log_level":"debug","thermal_timeout_s":-1}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		cfg, _, err := parseConfig(s)
		if err == nil && cfg.CacheDir == "" {
			t.Fatal("accepted a config without cache_dir")
		}
	})
}
