package monitor

import (
	"context"
	"fmt"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// StoreRerunner returns a Config.RequestRerun that queues the confirmation
// rerun as an ordinary run: the suite's current spec, at the build and
// lineage of the newest result, on one device of the same model and kind (emulated or
// real), with source "regress:confirm:<group>". The scheduler places it
// like any other run; its result reaches the monitor through ingest and
// settles the group's confirmation.
func StoreRerunner(st *store.Store) func(ctx context.Context, r RerunRequest) error {
	return func(ctx context.Context, r RerunRequest) error {
		spec, err := st.ResolveSuite(ctx, r.Key.Suite)
		if err != nil {
			return fmt.Errorf("confirmation rerun: suite %q: %w", r.Key.Suite, err)
		}
		emulated := r.Key.Emulated
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{
			Spec: spec, Build: r.Build, Lineage: r.Key.Lineage,
			Selector: &jobs.Selector{DeviceModel: r.Key.DeviceModel, Emulated: &emulated},
			Source:   fmt.Sprintf("regress:confirm:%d", r.GroupID),
		})
		if err != nil {
			return fmt.Errorf("confirmation rerun: %w", err)
		}
		if len(runs) == 0 {
			return fmt.Errorf("confirmation rerun: no run created for %s", r.Key.DeviceModel)
		}
		return nil
	}
}
