package api

import (
	"maps"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// Device is a registered agent: a phone, or a host agent emulating one.
type Device struct {
	ID          string               `json:"id" doc:"Device id, chosen by the agent." example:"pixel8-a1"`
	Fingerprint protocol.Fingerprint `json:"fingerprint" doc:"What the agent reported about the hardware and OS in its last hello."`
	Platform    string               `json:"platform" enum:"android,ios,linux,darwin" doc:"Platform of the device." example:"android"`
	DeviceModel string               `json:"device_model" doc:"Device model used in result series (emulated:<profile> for an emulated device)." example:"Pixel 8"`
	OSVersion   string               `json:"os_version" doc:"OS release." example:"Android 14 (SDK 34)"`
	RAMBytes    *int64               `json:"ram_bytes,omitempty" doc:"Total memory the OS reports, bytes." example:"8589934592"`
	Emulated    bool                 `json:"emulated" doc:"Whether a host agent emulates the device from a profile." example:"false"`
	Profile     string               `json:"profile,omitempty" doc:"Profile an emulated device runs with." example:"twin:pixel8-a1"`
	AgentLabels map[string]string    `json:"agent_labels" doc:"Labels from the agent's hello." example:"{\"pool\":\"ci\"}"`
	Labels      map[string]string    `json:"labels" doc:"Operator labels (PUT /v1/devices/{id}/labels); they win over the agent's labels." example:"{\"rack\":\"2\"}"`
	State       string               `json:"state" enum:"online,lost" doc:"online while heartbeats arrive within the TTL, lost after." example:"online"`
	Drained     bool                 `json:"drained" doc:"A drained device finishes its current run and gets no new ones." example:"false"`
	TTL         jobs.Duration        `json:"ttl" doc:"Heartbeat TTL the coordinator gave the agent, as a Go duration string: the device is lost after this long without a heartbeat." example:"15s"`
	Coordinator string               `json:"coordinator,omitempty" doc:"Coordinator that holds the device's session." example:"coord-1"`
	FirstSeenAt time.Time            `json:"first_seen_at" doc:"When the device first said hello." example:"2026-11-20T09:00:00Z"`
	LastSeenAt  time.Time            `json:"last_seen_at" doc:"When its last hello or heartbeat arrived." example:"2026-12-01T14:00:00Z"`
	LostAt      *time.Time           `json:"lost_at,omitempty" doc:"When it was marked lost." example:"2026-12-01T13:00:15Z"`
	ActiveRunID int64                `json:"active_run_id,omitempty" doc:"Run the device holds (assigned or running); absent when idle." example:"4812"`
	Build       string               `json:"build" doc:"The code its last hello named, in one line: the agent's build, the runtime's when it differs, the embedded build; empty when it named none." example:"v0.9.1 · runtime v0.9.0 · embeds app-0.9.1"`
	BuildSince  *time.Time           `json:"build_since,omitempty" doc:"When the device first said hello with this build (when its build last changed); absent when unknown (registered before builds were recorded)." example:"2026-12-01T09:00:00Z"`
	PrevBuild   string               `json:"previous_build,omitempty" doc:"The build it ran before build_since; absent when its build never changed." example:"v0.9.0 · embeds app-0.9.0"`
	// DrainReason and Rejections are set by GET /v1/devices/{id} only
	// (wire_rejections.go).
	DrainReason string            `json:"drain_reason,omitempty" doc:"Why the device was drained by quarantine (absent for an operator's drain)." example:"quarantined: 20 messages rejected within 10m0s; last: config 99 unknown"`
	Rejections  *DeviceRejections `json:"rejections,omitempty" doc:"Messages of the device rejected at ingest (GET /v1/devices/{id} only)."`
}

// deviceFromStore converts a store row to its wire form.
func deviceFromStore(d *store.Device) Device {
	return Device{
		ID: d.ID, Fingerprint: d.Fingerprint, Platform: d.Platform, DeviceModel: d.DeviceModel, OSVersion: d.OSVersion,
		RAMBytes: d.RAMBytes, Emulated: d.Emulated, Profile: d.Profile,
		AgentLabels: nonNilMap(d.AgentLabels), Labels: nonNilMap(d.Labels),
		State: d.State, Drained: d.Drained, TTL: jobs.Duration(d.TTL), Coordinator: d.Coordinator,
		FirstSeenAt: d.FirstSeenAt, LastSeenAt: d.LastSeenAt, LostAt: d.LostAt, ActiveRunID: d.ActiveRunID,
		Build: d.Build, BuildSince: d.BuildSince, PrevBuild: d.PreviousBuild,
	}
}

func deviceOut(d *store.Device) *deviceOutput {
	w := deviceFromStore(d)
	return &deviceOutput{Body: &w}
}

// DeviceProfile is a device's measured profile, as uploaded.
type DeviceProfile struct {
	DeviceID  string    `json:"device_id" doc:"Device the profile was measured on." example:"pixel8-a1"`
	Name      string    `json:"name" doc:"The profile's name (from its YAML)." example:"pixel8-a1"`
	YAML      string    `json:"yaml" doc:"The profile YAML written by 'lesfarm profile measure'." example:"name: pixel8-a1"`
	UpdatedAt time.Time `json:"updated_at" doc:"When it was uploaded." example:"2026-12-01T14:00:00Z"`
}

func profileFromStore(p *store.DeviceProfile) *DeviceProfile {
	return &DeviceProfile{DeviceID: p.DeviceID, Name: p.Name, YAML: p.YAML, UpdatedAt: p.UpdatedAt}
}

// nonNilMap returns m, or an empty map for nil, so maps encode as {}.
func nonNilMap[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return maps.Clone(m)
}
