package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/agent/adb"
)

// PhonesConfig configures RunPhones: one farm device per attached phone.
type PhonesConfig struct {
	// Base is every phone's agent config; Name prefixes the device ids
	// (empty: "phone") and CacheDir holds one directory per phone.
	Base Config
	// ADB runs the adb client (required).
	ADB *adb.Client
	// Serials are the phones to drive; empty means every attached phone.
	Serials []string
	// Phone is each phone's execution and hygiene settings (ADB and
	// Serial are filled in).
	Phone PhoneConfig
	// Poll is how often `adb devices` is read (default 2 s).
	Poll time.Duration
	// OnChange, if set, is called after each poll that changed a phone's
	// status (tests wait on it).
	OnChange func([]PhoneStatus)
}

// PhoneStatus is one phone as RunPhones sees it.
type PhoneStatus struct {
	Serial   string `json:"serial"`
	DeviceID string `json:"device_id"`
	// State is adb's state ("device", "unauthorized", "offline",
	// "recovery", ...), "gone" for a phone no longer listed.
	State string `json:"state"`
	// Running: its agent runs (the farm device is online).
	Running bool `json:"running"`
	// Error says why a listed phone has no agent (unusable state, a
	// fingerprint that could not be read).
	Error string `json:"error,omitempty"`
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// PhoneDeviceID is the farm device id of the phone serial: prefix-serial
// with every character a device id cannot hold as '_', at most 64 bytes.
func PhoneDeviceID(prefix, serial string) string {
	id := cmp.Or(prefix, "phone") + "-" + unsafeID.ReplaceAllString(serial, "_")
	if len(id) > 64 {
		id = id[:64]
	}
	return id
}

// phoneAgent is a running agent of one phone.
type phoneAgent struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// RunPhones drives the attached phones until ctx ends: every Poll it
// lists them with `adb devices`, starts an Agent (Config.Phone) for each
// usable phone it wants that has none, and stops the agent of a phone that
// went away or became unusable (its run is aborted and requeued; the
// coordinator marks the device lost). A phone that comes back is picked
// up again under the same device id. Unauthorized, offline and recovery
// phones, and phones whose fingerprint cannot be read, get a log line and
// a PhoneStatus, and are retried at each poll. It returns when ctx ends,
// after every agent stopped; adb missing is an error at once.
func RunPhones(ctx context.Context, pc PhonesConfig) error {
	pc.Poll = cmp.Or(pc.Poll, 2*time.Second)
	log := cmp.Or(pc.Base.Logger, slog.Default())
	if pc.ADB == nil {
		return errors.New("phones: an adb client is required")
	}
	if _, err := pc.ADB.Devices(ctx); err != nil {
		return fmt.Errorf("phones: %w (install Debian's adb package or pass --adb-path)", err)
	}
	want := map[string]bool{}
	for _, s := range pc.Serials {
		want[s] = true
	}
	agents := map[string]*phoneAgent{}
	status := map[string]PhoneStatus{}
	var wg sync.WaitGroup
	defer func() {
		for _, pa := range agents {
			pa.cancel()
		}
		wg.Wait()
	}()
	t := time.NewTicker(pc.Poll)
	defer t.Stop()
	for {
		ds, err := pc.ADB.Devices(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("phones: adb devices failed", "err", err)
		}
		changed := false
		set := func(s PhoneStatus) {
			if old, ok := status[s.Serial]; !ok || old != s {
				status[s.Serial] = s
				changed = true
			}
		}
		seen := map[string]string{}
		if err == nil {
			for _, d := range ds {
				if len(want) == 0 || want[d.Serial] {
					seen[d.Serial] = d.State
				}
			}
			for serial, pa := range agents { // agents that ended or whose phone left
				select {
				case <-pa.done:
					delete(agents, serial)
					continue
				default:
				}
				if seen[serial] != adb.StateDevice {
					log.Warn("phones: phone gone; stopping its device (lost)", "serial", serial, "state", cmp.Or(seen[serial], "gone"))
					pa.cancel()
					<-pa.done
					delete(agents, serial)
					set(PhoneStatus{Serial: serial, DeviceID: PhoneDeviceID(pc.Base.Name, serial), State: cmp.Or(seen[serial], "gone")})
				}
			}
			for serial, old := range status {
				if _, ok := seen[serial]; !ok && old.State != "gone" {
					set(PhoneStatus{Serial: serial, DeviceID: old.DeviceID, State: "gone"})
				}
			}
			serials := make([]string, 0, len(seen))
			for s := range seen {
				serials = append(serials, s)
			}
			sort.Strings(serials)
			for _, serial := range serials {
				st := seen[serial]
				id := PhoneDeviceID(pc.Base.Name, serial)
				if _, ok := agents[serial]; ok {
					set(PhoneStatus{Serial: serial, DeviceID: id, State: st, Running: true})
					continue
				}
				if st != adb.StateDevice {
					why := phoneStateHint(st)
					if old := status[serial]; old.Error != why {
						log.Warn("phones: phone not usable", "serial", serial, "state", st, "hint", why)
					}
					set(PhoneStatus{Serial: serial, DeviceID: id, State: st, Error: why})
					continue
				}
				pa, err := startPhoneAgent(ctx, pc, serial, id, &wg)
				if err != nil {
					if old := status[serial]; old.Error != err.Error() {
						log.Error("phones: phone not attached", "serial", serial, "err", err)
					}
					set(PhoneStatus{Serial: serial, DeviceID: id, State: st, Error: err.Error()})
					continue
				}
				agents[serial] = pa
				log.Info("phones: phone attached as a farm device", "serial", serial, "device_id", id)
				set(PhoneStatus{Serial: serial, DeviceID: id, State: st, Running: true})
			}
		}
		if changed && pc.OnChange != nil {
			list := make([]PhoneStatus, 0, len(status))
			for _, s := range status {
				list = append(list, s)
			}
			sort.Slice(list, func(i, j int) bool { return list[i].Serial < list[j].Serial })
			pc.OnChange(list)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// startPhoneAgent creates and starts the agent of one phone.
func startPhoneAgent(ctx context.Context, pc PhonesConfig, serial, id string, wg *sync.WaitGroup) (*phoneAgent, error) {
	cfg := pc.Base
	cfg.Name = id
	cfg.CacheDir = filepath.Join(pc.Base.CacheDir, id)
	ph := pc.Phone
	ph.ADB, ph.Serial = pc.ADB, serial
	cfg.Phone = &ph
	cfg.Profile = ""
	if cfg.Logger != nil {
		cfg.Logger = cfg.Logger.With("device_id", id)
	}
	a, err := New(cfg)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	pa := &phoneAgent{cancel: cancel, done: make(chan struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(pa.done)
		if err := a.Run(actx); err != nil && actx.Err() == nil {
			cmp.Or(cfg.Logger, slog.Default()).Error("phones: agent ended", "serial", serial, "err", err)
		}
	}()
	return pa, nil
}

// phoneStateHint says what to do about a phone adb lists but cannot use.
func phoneStateHint(state string) string {
	switch {
	case state == adb.StateUnauthorized:
		return "unauthorized: accept the USB debugging (RSA key) prompt on the phone"
	case state == adb.StateOffline:
		return "offline: reconnect the cable or restart adb (adb kill-server)"
	case state == adb.StateRecovery, state == "sideload", state == "bootloader", state == "rescue":
		return state + ": the phone is not booted into Android; reboot it"
	case len(state) >= 14 && state[:14] == "no permissions":
		return "no permissions: install udev rules for the phone (docs/phones.md)"
	}
	return "state " + state + ": not usable by adb"
}
