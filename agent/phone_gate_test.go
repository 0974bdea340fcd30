package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/adb/adbtest"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestPhoneThermalGate: a fake phone too hot by its thermal status, its
// thermal headroom or its hottest zone waits for the bounded cool-down
// and then has its config refused with the reason, before any runner
// starts; a gate turned off lets it start at once.
func TestPhoneThermalGate(t *testing.T) {
	f := adbtest.NewFarm(t)
	tests := []struct {
		serial  string
		phone   adbtest.Phone
		h       PhoneHygiene
		wantWhy string // "": the config may start
	}{
		{"SEVERE", adbtest.Phone{ThermalStatus: 3}, PhoneHygiene{}, "thermal status 3 (severe) above the gate's 1"},
		{"HEADROOM", adbtest.Phone{Headroom: 0.95}, PhoneHygiene{}, "thermal headroom 0.95 above the gate's 0.90"},
		{"HEADROOM_LOW_GATE", adbtest.Phone{Headroom: 0.6}, PhoneHygiene{MaxHeadroom: 0.5}, "thermal headroom 0.60 above the gate's 0.50"},
		{"ZONE", adbtest.Phone{}, PhoneHygiene{MaxTempC: 38}, "hottest zone at 38.5 °C above the gate's 38.0 °C"},
		{"HEADROOM_OK", adbtest.Phone{Headroom: 0.7}, PhoneHygiene{}, ""},
		{"HEADROOM_GATE_OFF", adbtest.Phone{Headroom: 0.99}, PhoneHygiene{MaxHeadroom: -1}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.serial, func(t *testing.T) {
			t.Parallel()
			f.AddPhone(t, tc.serial, tc.phone)
			tc.h.CooldownTimeout, tc.h.CooldownPoll = 250*time.Millisecond, 100*time.Millisecond
			a, err := attachFake(t, f, tc.serial, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.wantWhy == "" {
				s, _, waited, err := a.phoneCool(ctx)
				if err != nil || waited != 0 || s == nil {
					t.Fatalf("phoneCool: waited %v err %v", waited, err)
				}
				return
			}
			job := &Job{Configs: []jobs.Config{{Index: 0, Key: "lookahead/budget=50%"}}}
			res, err := a.phoneConfig(ctx, nil, job, noRunnerExe, &protocol.Provenance{})
			if err != nil {
				t.Fatal(err)
			}
			want := "phone still hot after 250ms of cooling down: " + tc.wantWhy
			if res.Error != want || res.InvalidReason != want {
				t.Fatalf("result error %q invalid %q, want %q", res.Error, res.InvalidReason, want)
			}
			ps := res.PhoneState
			if ps == nil || ps.Start == nil || ps.CooldownMS < 250 || !slices.Contains(ps.Flags, protocol.PhoneFlagCooledDown) {
				t.Fatalf("phone state %+v", ps)
			}
			if n := f.Calls(`"` + tc.serial + `" "shell" "-T"`); n != 0 {
				t.Fatalf("%d runner sessions started on a refused config", n)
			}
		})
	}

	// A phone over the headroom gate that cools down meanwhile starts its
	// config when its headroom falls, and says how long it waited.
	t.Run("COOLS", func(t *testing.T) {
		t.Parallel()
		testPhoneCoolsDown(t, f)
	})
}

func testPhoneCoolsDown(t *testing.T, f *adbtest.Farm) {
	f.AddPhone(t, "COOLS", adbtest.Phone{Headroom: 0.97})
	a, err := attachFake(t, f, "COOLS", PhoneHygiene{CooldownTimeout: time.Minute, CooldownPoll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reads := func() int { return f.Calls(`"COOLS" "shell" "echo @@battery`) }
	before := reads()
	type cooled struct {
		s      *protocol.PhoneSnapshot
		waited time.Duration
		err    error
	}
	done := make(chan cooled, 1)
	go func() {
		s, _, waited, err := a.phoneCool(context.Background())
		done <- cooled{s, waited, err}
	}()
	waitFor(t, 30*time.Second, "the phone read while it cools down", func() bool { return reads() >= before+2 })
	f.SetHeadroom(t, "COOLS", 0.5)
	c := <-done
	if c.err != nil || c.waited <= 0 || c.s.ThermalHeadroom == nil || *c.s.ThermalHeadroom != 0.5 {
		t.Fatalf("phoneCool: waited %v err %v state %+v", c.waited, c.err, c.s)
	}
	if st := a.phone.last; st == nil || !strings.Contains(PhoneDeviceState(st).ThermalStatus, "none") {
		t.Fatalf("the phone's latest state %+v", st)
	}
}

// TestPhoneDropCaches: --adb-evict drop-caches drops a rooted phone's page
// cache (the fake phone's /proc/sys/vm/drop_caches gets 3) and is recorded
// as drop_caches; an unrooted phone falls back to the runner's fadvise.
func TestPhoneDropCaches(t *testing.T) {
	f := adbtest.NewFarm(t)
	evicted := &protocol.ConfigResult{Extra: map[string]float64{"page_cache_evicted": 1}}
	tests := []struct {
		serial      string
		rooted      bool
		res         *protocol.ConfigResult
		wantDropped string
		want        string
	}{
		{"ROOTED", true, evicted, "3", protocol.EvictionDropCaches},
		{"UNROOTED", false, evicted, "0", protocol.EvictionFadvise},
		{"OLD_BUILD", false, &protocol.ConfigResult{}, "0", protocol.EvictionNone},
	}
	for _, tc := range tests {
		t.Run(tc.serial, func(t *testing.T) {
			f.AddPhone(t, tc.serial, adbtest.Phone{Rooted: tc.rooted})
			a, err := attachFake(t, f, tc.serial, PhoneHygiene{Evict: EvictDropCaches})
			if err != nil {
				t.Fatal(err)
			}
			dropped := a.dropPhoneCaches(context.Background())
			if got := f.DropCaches(tc.serial); got != tc.wantDropped || dropped != tc.rooted {
				t.Fatalf("drop_caches %q (dropped %v), want %q", got, dropped, tc.wantDropped)
			}
			if got := evictionOf(dropped, tc.res); got != tc.want {
				t.Fatalf("eviction %q, want %q", got, tc.want)
			}
		})
	}
}
