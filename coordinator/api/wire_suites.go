package api

import (
	"encoding/json"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// Suite is a named, editable job spec.
type Suite struct {
	Name      string    `json:"name" doc:"Suite name." example:"les-ladder"`
	Spec      jobs.Spec `json:"spec" doc:"The job spec (see docs/api.md and the jobs package); its durations are Go duration strings."`
	Builtin   bool      `json:"builtin" doc:"True for a suite that ships with lesfarm (stored at startup, or not stored at all)." example:"true"`
	CreatedAt time.Time `json:"created_at" doc:"When the suite was first stored (zero for a built-in suite that was never stored)." example:"2026-12-01T14:00:00Z"`
	UpdatedAt time.Time `json:"updated_at" doc:"When the suite was last replaced." example:"2026-12-01T14:00:00Z"`
}

func suiteFromStore(su *store.Suite) Suite {
	return Suite{Name: su.Name, Spec: su.Spec, Builtin: su.Builtin, CreatedAt: su.CreatedAt, UpdatedAt: su.UpdatedAt}
}

func suitePtr(su *store.Suite) *Suite {
	w := suiteFromStore(su)
	return &w
}

// Schedule is a cron-driven trigger of a suite (a nightly run).
type Schedule struct {
	ID             int64           `json:"id" doc:"Schedule id." example:"3"`
	Name           string          `json:"name" doc:"Unique schedule name." example:"nightly-ladder"`
	Cron           string          `json:"cron" doc:"5-field cron expression or descriptor (@daily, \"@every 6h\")." example:"0 2 * * *"`
	Timezone       string          `json:"timezone" doc:"IANA time zone the cron expression is evaluated in." example:"UTC"`
	Suite          string          `json:"suite" doc:"Suite each occurrence triggers." example:"les-ladder"`
	Build          string          `json:"build" doc:"Build id of the triggered runs; {date} becomes the occurrence's UTC date (YYYYMMDD)." example:"nightly-{date}"`
	GitSHA         string          `json:"git_sha" doc:"Git commit given to the triggered runs." example:"9813d69"`
	Lineage        string          `json:"lineage" doc:"Build lineage of the triggered runs." example:"main"`
	DeviceSelector json.RawMessage `json:"device_selector" doc:"Device selector applied to every triggered job ({platform, labels, min_ram, device_model, emulated}), or null."`
	ConfigOverride json.RawMessage `json:"config_override,omitempty" doc:"Config override applied to every triggered job (same fields as a run trigger's override)."`
	Priority       int             `json:"priority" doc:"Priority of the triggered runs." example:"0"`
	Enabled        bool            `json:"enabled" doc:"Disabled schedules do not fire." example:"true"`
	Bisect         string          `json:"bisect" enum:"off,auto" doc:"auto: a regression alert group its runs raise gets a bisection started automatically (one per group, below nightly work; docs/bisect.md)." example:"auto"`
	Catchup        jobs.Duration   `json:"catchup" doc:"Missed-occurrence window, as a Go duration string: after downtime, the most recent missed occurrence fires if it is at most this old." example:"1h0m0s"`
	NextFireAt     time.Time       `json:"next_fire_at" doc:"Next occurrence." example:"2026-12-02T02:00:00Z"`
	LastFiredAt    *time.Time      `json:"last_fired_at,omitempty" doc:"Last occurrence that fired." example:"2026-12-01T02:00:00Z"`
	CreatedAt      time.Time       `json:"created_at" doc:"When the schedule was created." example:"2026-11-20T09:00:00Z"`
	UpdatedAt      time.Time       `json:"updated_at" doc:"When it was last changed (by an edit or a firing)." example:"2026-12-01T02:00:00Z"`
}

func scheduleFromStore(s *store.Schedule) Schedule {
	sel := s.DeviceSelector
	if len(sel) == 0 {
		sel = json.RawMessage("null")
	}
	return Schedule{
		ID: s.ID, Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, Suite: s.Suite, Build: s.Build, GitSHA: s.GitSHA,
		Lineage: s.Lineage, DeviceSelector: sel, ConfigOverride: s.ConfigOverride, Priority: s.Priority,
		Enabled: s.Enabled, Bisect: s.Bisect, Catchup: jobs.Duration(time.Duration(s.CatchupSeconds) * time.Second), NextFireAt: s.NextFireAt,
		LastFiredAt: s.LastFiredAt, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

func schedulePtr(s *store.Schedule) *Schedule {
	w := scheduleFromStore(s)
	return &w
}

// ScheduleFiring records how one occurrence of a schedule was handled.
type ScheduleFiring struct {
	ScheduleID  int64     `json:"schedule_id" doc:"Schedule the occurrence belongs to." example:"3"`
	Occurrence  time.Time `json:"occurrence" doc:"The occurrence (cron time)." example:"2026-12-01T02:00:00Z"`
	HandledAt   time.Time `json:"handled_at" doc:"When a coordinator handled it." example:"2026-12-01T02:00:01Z"`
	Outcome     string    `json:"outcome" enum:"fired,skipped,failed" doc:"fired: runs were triggered; skipped: missed and older than the catch-up window; failed: see detail." example:"fired"`
	Coordinator string    `json:"coordinator" doc:"Coordinator that handled it." example:"coord-1"`
	RunIDs      []string  `json:"run_ids" doc:"Runs it triggered." example:"[\"4812\"]"`
	Detail      string    `json:"detail" doc:"Why it was skipped or failed." example:"missed by 3h0m0s, more than the catch-up window"`
}

func firingFromStore(f *store.ScheduleFiring) ScheduleFiring {
	return ScheduleFiring{ScheduleID: f.ScheduleID, Occurrence: f.Occurrence, HandledAt: f.HandledAt, Outcome: f.Outcome,
		Coordinator: f.Coordinator, RunIDs: nonNil(f.RunIDs), Detail: f.Detail}
}
