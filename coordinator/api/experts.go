package api

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// Expert-load metrics of the heatmap.
const (
	MetricDemand = "demand"
	MetricMiss   = "miss"
	MetricHit    = "hit"
)

type expertsInput struct {
	ID         int64  `path:"id" minimum:"1" doc:"Run id."`
	Config     int    `path:"config" minimum:"0" maximum:"4095" doc:"Config index of the run (its results' config_index)."`
	Metric     string `query:"metric" enum:"demand,miss,hit" default:"demand" doc:"What a cell counts: demand (times the router selected the expert), miss (demands that found it not resident) or hit (demand − miss)."`
	MaxLayers  int    `query:"max_layers" minimum:"1" maximum:"512" default:"128" doc:"Largest number of rows; consecutive layers are summed into one row when the model has more."`
	MaxExperts int    `query:"max_experts" minimum:"1" maximum:"1024" default:"256" doc:"Largest number of columns; consecutive experts are summed into one column when the model has more."`
	Top        int    `query:"top" minimum:"0" maximum:"100" default:"10" doc:"How many of the largest cells to list in top."`
}

// HotCell is one cell of an expert heatmap.
type HotCell struct {
	Row    int   `json:"row" doc:"Row index: layers [row×layer_bin, (row+1)×layer_bin)." example:"2"`
	Col    int   `json:"col" doc:"Column index: experts [col×expert_bin, (col+1)×expert_bin)." example:"5"`
	Layer  int   `json:"layer" doc:"First layer of the cell." example:"8"`
	Expert int   `json:"expert" doc:"First expert of the cell." example:"40"`
	Value  int64 `json:"value" doc:"The metric summed over the cell's layers and experts, over the measured decode steps." example:"1312"`
}

// ExpertHeatmap is a run config's layer × expert load matrix over its
// measured decode steps.
type ExpertHeatmap struct {
	RunID       int64  `json:"run_id" doc:"Run id." example:"4812"`
	ConfigIndex int    `json:"config_index" doc:"Config index within the run." example:"0"`
	Metric      string `json:"metric" enum:"demand,miss,hit" doc:"What the cells count: demand (expert selected), miss (read on demand) or hit (resident when selected)." example:"demand"`
	Steps       int64  `json:"steps" doc:"Measured decode steps the counts cover (the largest over layers)." example:"512"`
	Layers      int    `json:"layers" doc:"Layers covered (highest layer with counts + 1)." example:"48"`
	Experts     int    `json:"experts" doc:"Experts covered (highest expert demanded + 1)." example:"128"`
	LayerBin    int    `json:"layer_bin" doc:"Layers summed into one row." example:"4"`
	ExpertBin   int    `json:"expert_bin" doc:"Experts summed into one column." example:"4"`
	// Cells[r][c] sums the metric over the row's layers and the column's
	// experts.
	Cells [][]int64 `json:"cells" doc:"cells[row][col]: the metric summed over the row's layers and the column's experts."`
	Max   int64     `json:"max" doc:"Largest cell." example:"2048"`
	Total int64     `json:"total" doc:"Sum of all cells." example:"98304"`
	Top   []HotCell `json:"top" doc:"The largest cells, largest first."`
}

type expertsOutput struct{ Body *ExpertHeatmap }

// RegisterExperts registers GET /v1/runs/{id}/configs/{config}/experts.
func (h *drilldownHandler) RegisterExperts(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "run-config-experts", Method: http.MethodGet, Path: "/v1/runs/{id}/configs/{config}/experts",
		Summary: "Layer × expert load heatmap of one config of a run", Tags: []string{"runs"},
		Description: "Per-expert demand, miss or hit counts summed over the config's measured decode steps (the agent's per-expert telemetry), as a layer × expert matrix bounded on the server to max_layers × max_experts cells.",
	}, func(ctx context.Context, in *expertsInput) (*expertsOutput, error) {
		if _, err := h.st.GetRun(ctx, in.ID); err != nil {
			return nil, storeErr(ctx, h.log, "run", err)
		}
		load, err := h.st.ExpertLoad(ctx, in.ID, in.Config)
		if err != nil {
			return nil, storeErr(ctx, h.log, "expert load", err)
		}
		out := &ExpertHeatmap{RunID: in.ID, ConfigIndex: in.Config, Metric: in.Metric, LayerBin: 1, ExpertBin: 1, Cells: [][]int64{}, Top: []HotCell{}}
		for _, l := range load {
			out.Layers = max(out.Layers, l.Layer+1)
			out.Experts = max(out.Experts, len(l.Demand))
			out.Steps = max(out.Steps, l.Steps)
		}
		if out.Layers == 0 || out.Experts == 0 {
			return &expertsOutput{Body: out}, nil
		}
		out.LayerBin = ceilDiv(out.Layers, in.MaxLayers)
		out.ExpertBin = ceilDiv(out.Experts, in.MaxExperts)
		rows, cols := ceilDiv(out.Layers, out.LayerBin), ceilDiv(out.Experts, out.ExpertBin)
		flat := make([]int64, rows*cols)
		out.Cells = make([][]int64, rows)
		for r := range rows {
			out.Cells[r] = flat[r*cols : (r+1)*cols : (r+1)*cols]
		}
		for _, l := range load {
			row := out.Cells[l.Layer/out.LayerBin]
			for e, d := range l.Demand {
				v := d
				switch in.Metric {
				case MetricMiss:
					v = l.Miss[e]
				case MetricHit:
					v = d - l.Miss[e]
				}
				row[e/out.ExpertBin] += v
				out.Total += v
			}
		}
		var cells []HotCell
		for r, row := range out.Cells {
			for c, v := range row {
				out.Max = max(out.Max, v)
				if v > 0 && in.Top > 0 {
					cells = append(cells, HotCell{Row: r, Col: c, Layer: r * out.LayerBin, Expert: c * out.ExpertBin, Value: v})
				}
			}
		}
		slices.SortStableFunc(cells, func(a, b HotCell) int { return cmp.Compare(b.Value, a.Value) })
		out.Top = append(out.Top, cells[:min(len(cells), in.Top)]...)
		return &expertsOutput{Body: out}, nil
	})
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

type deviceTraceInput struct {
	ID     int64 `path:"id" minimum:"1" doc:"Run id."`
	Points int   `query:"points" minimum:"1" maximum:"5000" default:"600" doc:"Largest number of points; consecutive samples are averaged into buckets when the run has more."`
}

// DeviceStatePoint is one bucket of a run's device-state samples.
type DeviceStatePoint struct {
	At             time.Time `json:"at" doc:"When the bucket's first sample arrived (coordinator clock)." example:"2026-12-01T14:00:05Z"`
	Samples        int       `json:"samples" doc:"Heartbeat samples in the bucket." example:"3"`
	MaxTempC       *float64  `json:"max_temp_c,omitempty" doc:"Hottest thermal zone, °C (bucket average)." example:"47.25"`
	BatteryPercent *float64  `json:"battery_percent,omitempty" doc:"Battery charge, % (bucket average)." example:"77"`
	BatteryTempC   *float64  `json:"battery_temp_c,omitempty" doc:"Battery temperature, °C (bucket average)." example:"33.1"`
	Charging       *bool     `json:"charging,omitempty" doc:"Whether the device charged during the bucket." example:"false"`
	ThermalStatus  string    `json:"thermal_status,omitempty" doc:"Platform thermal status (last in the bucket), e.g. iOS nominal/fair/serious/critical." example:"nominal"`
}

// DeviceTrace is the thermal and battery trace a device reported while it
// held a run.
type DeviceTrace struct {
	RunID int64 `json:"run_id" doc:"Run id." example:"4812"`
	// Reported is false when the device reported no thermal or battery
	// reading during the run (emulated devices report none).
	Reported     bool               `json:"reported" doc:"False when the device reported no thermal or battery reading during the run (emulated devices report none)." example:"true"`
	SamplesTotal int                `json:"samples_total" doc:"Samples before downsampling." example:"120"`
	Points       []DeviceStatePoint `json:"points" doc:"Buckets of consecutive samples, oldest first."`
}

type deviceTraceOutput struct{ Body *DeviceTrace }

// RegisterDeviceTrace registers GET /v1/runs/{id}/device-trace.
func (h *drilldownHandler) RegisterDeviceTrace(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "run-device-trace", Method: http.MethodGet, Path: "/v1/runs/{id}/device-trace",
		Summary: "Thermal and battery trace of a run", Tags: []string{"runs"},
		Description: "The thermal and battery state the device reported in its heartbeats while it held the run, in time order, averaged on the server into at most `points` buckets.",
	}, func(ctx context.Context, in *deviceTraceInput) (*deviceTraceOutput, error) {
		if _, err := h.st.GetRun(ctx, in.ID); err != nil {
			return nil, storeErr(ctx, h.log, "run", err)
		}
		pts, total, err := h.st.DeviceTrace(ctx, in.ID, in.Points)
		if err != nil {
			return nil, storeErr(ctx, h.log, "device trace", err)
		}
		out := &DeviceTrace{RunID: in.ID, Reported: total > 0, SamplesTotal: total, Points: make([]DeviceStatePoint, 0, len(pts))}
		for _, p := range pts {
			out.Points = append(out.Points, DeviceStatePoint{At: p.At.UTC(), Samples: p.Samples, MaxTempC: p.MaxTempC, BatteryPercent: p.BatteryPercent,
				BatteryTempC: p.BatteryTempC, Charging: p.Charging, ThermalStatus: p.ThermalStatus})
		}
		return &deviceTraceOutput{Body: out}, nil
	})
}
