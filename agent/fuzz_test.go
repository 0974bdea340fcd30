package agent

import (
	"log/slog"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// FuzzHandleAssign feeds arbitrary bytes to the assignment handler: it must
// answer every message with a reply (never panic), and refuse anything not
// signed by the coordinator's key.
func FuzzHandleAssign(f *testing.F) {
	pub, priv, _ := protocol.GenerateSigningKey()
	spec, _ := jobs.Builtin("smoke")
	a := &protocol.Assignment{RunID: 1, Token: 1, Attempt: 1, DeviceID: "fuzz", JobID: 1, Suite: "smoke", Spec: *spec, Configs: spec.Expand(),
		Artifact:       protocol.Artifact{URL: "http://127.0.0.1:1/m", SHA256: spec.Model.SHA256, Size: int64(spec.Model.Size)},
		LeaseExpiresAt: time.Now().Add(time.Minute), Deadline: time.Now().Add(time.Hour), IssuedAt: time.Now()}
	good, _ := protocol.SignAssignment(a, priv)
	f.Add(good)
	f.Add([]byte(`{"v":1,"assignment":{"run_id":5,"token":2},"sig":"AAAA"}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	ag, err := New(Config{NATSURL: "nats://unused", Name: "fuzz", CacheDir: f.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	ag.signingKey = pub
	ag.stopping = true // never start a run
	f.Fuzz(func(t *testing.T, data []byte) {
		rep := ag.handleAssign(data)
		if rep == nil {
			t.Fatal("no reply")
		}
		if rep.Accepted {
			t.Fatalf("accepted while shutting down: %+v", rep)
		}
		if rep.Code == "" {
			t.Fatalf("refusal without a code: %+v", rep)
		}
	})
}
