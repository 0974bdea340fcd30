package agent

import (
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestRunDeadlineIgnoresClockSkew: the device's clock is 5 minutes ahead
// of or behind the coordinator's. A run with the smoke suite's 5-minute timeout must not
// be aborted at once (device ahead), and a run with a short timeout must
// still end at its timeout (device behind), both when the assignment
// carries the timeout as a duration and when an older coordinator sends
// only the absolute deadline (corrected by the ServerTime offset).
func TestRunDeadlineIgnoresClockSkew(t *testing.T) {
	model := trainedModel(t)
	ns := testenv.NATS(t)
	c := newCoord(t, ns.ClientURL(), 5*time.Second)
	url, spec := modelServer(t, model)
	long := spec.Clone()
	long.Repetitions = 200 // runs far longer than the short timeout
	tests := []struct {
		name      string
		skew      time.Duration // device clock minus coordinator clock
		timeout   time.Duration
		duration  bool // the assignment carries DeadlineInMS
		wantAbort bool
	}{
		{"ahead, duration", 5 * time.Minute, 5 * time.Minute, true, false}, // the smoke suite's timeout
		{"ahead, absolute", 5 * time.Minute, 5 * time.Minute, false, false},
		{"behind, duration", -5 * time.Minute, 1500 * time.Millisecond, true, true},
		{"behind, absolute", -5 * time.Minute, 1500 * time.Millisecond, false, true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			skew := tc.skew
			name := "skew-" + string(rune('a'+i))
			startAgent(t, Config{NATSURL: ns.ClientURL(), Name: name, Clock: func() time.Time { return time.Now().Add(skew) }})
			s := spec
			if tc.wantAbort {
				s = long
			}
			asg := assignment(s, name, int64(100+i), 1, url)
			now := time.Now() // the coordinator's clock
			asg.IssuedAt, asg.Deadline = now, now.Add(tc.timeout)
			if tc.duration {
				asg.DeadlineInMS = tc.timeout.Milliseconds()
			}
			start := time.Now()
			if rep := c.assign(asg); !rep.Accepted {
				t.Fatalf("refused: %+v", rep)
			}
			res := c.waitResult(t, asg.RunID, 2*time.Minute)
			took := time.Since(start)
			if !tc.wantAbort {
				if res.Outcome != protocol.OutcomeSucceeded {
					t.Fatalf("outcome %s (%s) after %v, want succeeded: a skewed clock must not shorten the run", res.Outcome, res.Error, took)
				}
				return
			}
			if res.Outcome != protocol.OutcomeFailed || took > tc.timeout+20*time.Second || took < tc.timeout {
				t.Fatalf("outcome %s (%s) after %v, want failed at the %v deadline", res.Outcome, res.Error, took, tc.timeout)
			}
		})
	}
}
